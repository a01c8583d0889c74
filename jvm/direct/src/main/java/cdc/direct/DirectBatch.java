package cdc.direct;

import java.io.Serializable;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Queue;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.function.Supplier;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.Table;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.spark.Spark3Util;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.MutableProjection$;
import org.apache.spark.sql.catalyst.expressions.MutableProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection$;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.execution.SQLExecution;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.immutable.Seq;

/**
 * A table's batch on the direct path with no query planned for it. The table's decoding
 * (spark_decode.py's expressions, over a template of the Kafka source's rows) is planned once and
 * kept as a {@link Decoding}; then each batch is one Spark job of one task that decodes the batch's
 * records with it, takes the batch's stats (jobs/plan.py's {@code PartitionStats}) and, when none of
 * its records needs the MERGE, writes the target's files and the delete memory's as
 * {@link DirectDelta#writeEvents} does. The driver makes the batch's plan from those stats, then
 * commits the files ({@link Pending#commit}) or, when the plan says otherwise, deletes them
 * ({@link Pending#discard}) and the batch takes the path through a query.
 */
public final class DirectBatch {
  private DirectBatch() {}

  static final String NON_DATA = "non-data";  // spark_decode.py's NON_DATA
  /** Why a batch needs a query: the records' own reasons (the applier's other reasons are its own). */
  static final String BAD = "bad records";
  static final String TRUNCATE = "a truncate";
  static final String UNCHANGED = "unchanged values or a key change to look up";
  static final String UNSEEN = "a record schema not judged yet";
  static final String COLUMNS = "the records' columns differ from the decoding's";
  /** The columns the applier adds to the decoded events for the stats, in this order, after the
   * direct path's input ({@link DirectDelta#asInput}): whether the record is bad, its source time in
   * epoch milliseconds, its schema's fingerprint (null without), whether a change lacks an unchanged
   * value, whether it is half of a key change, its source transaction and the table's order of the
   * change in it (Debezium's transaction metadata; null without). */
  public static final List<String> EXTRAS = List.of("_bad", "_ms", "_schema", "_lacking", "_moved", "_txn_id",
      "_txn_order");

  /** The most bytes of decoded records a task holds before it writes them: an eighth of the heap
   * (a larger batch takes a query, which streams its rows). */
  static long heldBytes() {
    return Runtime.getRuntime().maxMemory() / 8;
  }

  /** A table's decoding as a chain of projections from the Kafka source's rows ({@code raw}) to the
   * direct path's input and the {@link #EXTRAS}, planned once. */
  public static final class Decoding implements Serializable {
    final StructType raw;
    final List<Seq<Expression>> stages;  // from the records up
    final List<Seq<Attribute>> inputs;
    final DataType[] types;
    final long schemaId;  // the target schema it was made for
    final String id = UUID.randomUUID().toString();  // its projections' key in the executors (COMPILED)
    private transient Broadcast<Decoding> shared;  // sent to the executors once, freed with the decoding

    Decoding(StructType raw, List<Seq<Expression>> stages, List<Seq<Attribute>> inputs, DataType[] types,
             long schemaId) {
      this.raw = raw;
      this.stages = stages;
      this.inputs = inputs;
      this.types = types;
      this.schemaId = schemaId;
    }

    /** Its chain of projections for a task of partition {@code partition}: one a task before left
     * ({@link #release}), else made now. Each stage but the last evaluates into a row of references
     * (no copy of its values); the last writes the decoded row. An unsafe row per stage would hold a
     * copy of the record's value in each, twice its size: a 32 MiB record then took over 1 GiB of heap. */
    Chain chain(int partition) {
      Queue<Chain> kept;
      synchronized (COMPILED) {
        kept = COMPILED.get(id);
      }
      Chain chain = kept == null ? null : kept.poll();
      if (chain == null) {
        int last = stages.size() - 1;
        MutableProjection[] middle = new MutableProjection[last];
        for (int i = 0; i < last; i++) {
          middle[i] = MutableProjection$.MODULE$.create(stages.get(i), inputs.get(i));
        }
        chain = new Chain(middle, UnsafeProjection$.MODULE$.create(stages.get(last), inputs.get(last)));
      }
      for (MutableProjection p : chain.middle) {
        p.initialize(partition);
      }
      chain.last.initialize(partition);
      return chain;
    }

    /** Keep {@code chain} for the next task (one that wrote a row of {@code largest} bytes or more than
     * {@link #KEPT_ROW_BYTES} is dropped: its buffer stays that size). */
    void release(Chain chain, long largest) {
      if (largest > KEPT_ROW_BYTES) {
        return;
      }
      synchronized (COMPILED) {
        COMPILED.computeIfAbsent(id, k -> new ConcurrentLinkedQueue<>()).add(chain);
      }
    }

    /** This decoding broadcast, once: Spark's cleaner frees it when the decoding is dropped. */
    synchronized Broadcast<Decoding> shared(SparkSession spark) {
      if (shared == null) {
        shared = JavaSparkContext.fromSparkContext(spark.sparkContext()).broadcast(this);
      }
      return shared;
    }
  }

  /** The most decodings whose projections an executor keeps made between batches, the least recently
   * used dropped first (making them costs a table about 0.1 s of a batch's task). */
  static final int KEPT_DECODINGS = 1024;
  static final long KEPT_ROW_BYTES = 1 << 20;
  private static final Map<String, Queue<Chain>> COMPILED = new LinkedHashMap<>(16, 0.75f, true) {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, Queue<Chain>> eldest) {
      return size() > KEPT_DECODINGS;
    }
  };

  /** A decoding's projections, from the Kafka source's row to the decoded one. */
  record Chain(MutableProjection[] middle, UnsafeProjection last) {
    InternalRow apply(InternalRow r) {
      InternalRow e = r;
      for (MutableProjection p : middle) {
        e = p.apply(e);
      }
      return last.apply(e);
    }
  }

  /**
   * The decoding of Spark table {@code name}'s records: {@code decoded} is the applier's decoding of
   * a template of the Kafka source's rows (an empty relation of schema {@code raw}) with the
   * {@link #EXTRAS} as columns. Null when its optimized plan is not a chain of projections over that
   * template (the batch then takes a query).
   */
  public static Decoding compile(SparkSession spark, Dataset<Row> decoded, StructType raw, String name)
      throws Exception {
    Table table = Spark3Util.loadIcebergTable(spark, name);
    List<Column> columns = DirectDelta.inputColumns(decoded, table.schema(), name);
    for (String extra : EXTRAS) {
      columns.add(decoded.col(extra));
    }
    Dataset<Row> input = decoded.select(columns.toArray(new Column[0]));
    LogicalPlan plan = input.queryExecution().optimizedPlan();
    List<Seq<Expression>> stages = new ArrayList<>();
    List<Seq<Attribute>> inputs = new ArrayList<>();
    while (plan instanceof Project project) {
      @SuppressWarnings({"unchecked", "rawtypes"})
      Seq<Expression> exprs = (Seq) project.projectList();
      stages.add(0, exprs);
      inputs.add(0, project.child().output());
      plan = project.child();
    }
    if (stages.isEmpty() || !plan.children().isEmpty() || !plan.schema().equals(raw)) {
      return null;
    }
    DataType[] types = java.util.Arrays.stream(input.schema().fields()).map(StructField::dataType)
        .toArray(DataType[]::new);
    return new Decoding(raw, stages, inputs, types, table.schema().schemaId());
  }

  /** What one Kafka partition's records of the batch hold (jobs/plan.py's PartitionStats). */
  static final class Stats implements Serializable {
    public int partition;
    public long first = Long.MAX_VALUE;
    public long last = Long.MIN_VALUE;
    public long records;
    public UTF8String position;
    public String transactionId;  // of the change at {@code position}, with its order
    public Long transactionOrder;
    public Long sourceTsMs;
    public long errors;
    public long deletes;
    public List<Long> schemas = new ArrayList<>();
  }

  /** A task's outcome: the batch's stats, why it needs a query (null: it does not) and, when it
   * does not, the files written. */
  static final class Outcome implements Serializable {
    Map<Integer, Stats> stats = new TreeMap<>();
    String reason;
    DirectDelta.Written written;
    long decodeNanos;  // the task's time decoding and counting the part's records
    long writeNanos;  // ... and writing its files
    long compileNanos;  // ... of it, making its decoding's projections
    long prepareNanos;  // the driver's, loading the part's tables and sending them to the task
    long readNanos;  // the task's reading the batch's records (of every part)
  }

  /** A batch decoded and written, not yet committed: the driver's handle on it. */
  public static final class Pending {
    final Table table;
    final Table memory;
    final Outcome outcome;
    private boolean remembered;

    Pending(Table table, Table memory, Outcome outcome) {
      this.table = table;
      this.memory = memory;
      this.outcome = outcome;
    }

    /** The task's nanoseconds decoding the part's records and writing its files. */
    public long[] taskNanos() {
      return new long[] {outcome.decodeNanos, outcome.writeNanos, outcome.compileNanos, outcome.prepareNanos,
                         outcome.readNanos, outcome.written == null ? 0L : outcome.written.findNanos};
    }

    /** Why the batch needs a query (null: its files are written). */
    public String reason() {
      return outcome.reason;
    }

    /** The batch's stats per Kafka partition, as JSON (a list of PartitionStats' fields). */
    public String stats() throws JsonProcessingException {
      List<Map<String, Object>> out = new ArrayList<>();
      for (Stats s : outcome.stats.values()) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("partition", s.partition);
        m.put("first", s.first);
        m.put("last", s.last);
        m.put("records", s.records);
        m.put("position", s.position == null ? null : s.position.toString());
        m.put("transaction", s.transactionId == null || s.transactionOrder == null ? null
            : Map.of("id", s.transactionId, "order", s.transactionOrder));
        m.put("source_ts_ms", s.sourceTsMs);
        m.put("errors", s.errors);
        m.put("deletes", s.deletes);
        m.put("schemas", s.schemas);
        out.add(m);
      }
      return new ObjectMapper().writeValueAsString(out);
    }

    /** The delete memory's file appended (before the target's commit: a crash in between re-runs
     * both), then the target's RowDelta carrying {@code summary}; returns the rows found, inserted,
     * removed and remembered, and the CPU nanoseconds the calling thread spent committing. Nothing
     * is committed when nothing changes (the caller then commits the summary alone). */
    public long[] commit(Map<String, String> summary) {
      ThreadMXBean threads = ManagementFactory.getThreadMXBean();
      long began = threads.getCurrentThreadCpuTime();
      DirectDelta.Written w = outcome.written;
      if (w.memory != null && !remembered) {
        memory.newAppend().appendFile(w.memory).commit();
        KeyIndex.committed(memory, List.of(w.memory), List.of(), List.of());
        remembered = true;
      }
      try {
        DirectDelta.commit(table, w, summary);
      } catch (CommitStateUnknownException e) {
        throw e;  // it may have committed: its files stay
      } catch (RuntimeException e) {
        deleteTargetFiles();  // a commit that failed (a conflict, moved offsets, the catalog down) leaves none
        throw e;
      }
      return new long[] {w.found, w.inserted, w.removed, w.memory == null ? 0L : w.memory.recordCount(),
                         threads.getCurrentThreadCpuTime() - began};
    }

    /** Delete the files the task wrote and no commit took (the batch then takes a query). */
    public void discard() {
      DirectDelta.Written w = outcome.written;
      if (w == null) {
        return;
      }
      deleteTargetFiles();
      if (w.memory != null && !remembered) {
        memory.io().deleteFile(w.memory.location());
      }
    }

    private void deleteTargetFiles() {
      DirectDelta.Written w = outcome.written;
      for (DataFile f : w.data) {
        table.io().deleteFile(f.location());
      }
      for (DeleteFile f : w.deletes) {
        table.io().deleteFile(f.location());
      }
    }
  }

  /** A table's part of a batch: what {@link #runAll} decodes and writes for it. */
  public static final class Part implements Serializable {
    final transient Decoding decoding;  // broadcast to the task on its own
    final String name;
    final String memory;
    final String topic;
    final List<String> key;
    final List<String> columns;
    final String floor;
    final Map<Integer, Long> from = new HashMap<>();
    final Map<Integer, Long> until = new HashMap<>();
    final Set<Long> known;
    final boolean toast;
    final long limit;

    Part(Decoding decoding, String name, String memory, String topic, List<?> key, List<?> columns, String floor,
         Map<?, ?> from, Map<?, ?> until, List<?> known, boolean toast, long limit) {
      this.decoding = decoding;
      this.name = name;
      this.memory = memory;
      this.topic = topic;
      this.key = key.stream().map(String::valueOf).toList();
      this.columns = columns.stream().map(String::valueOf).toList();
      this.floor = floor;
      from.forEach((p, o) -> this.from.put(((Number) p).intValue(), ((Number) o).longValue()));
      if (until != null) {
        until.forEach((p, o) -> this.until.put(((Number) p).intValue(), ((Number) o).longValue()));
      }
      this.known = known == null ? null : new HashSet<>();
      if (known != null) {
        known.forEach(k -> this.known.add(((Number) k).longValue()));
      }
      this.toast = toast;
      this.limit = limit;
    }
  }

  /**
   * Spark table {@code name}'s part of a batch, for {@link #runAll}: its records are those of
   * {@code topic} from {@code from}'s offset of their partition (the table holds those before) up to
   * {@code until}'s (null or a partition it lacks: no end), decoded with {@code decoding} and written
   * to the target of {@code key} and data {@code columns} with its delete memory {@code memory} and
   * truncate {@code floor}. A record stops the part's writing, and says why, when it needs a query: a
   * bad one, a truncate, with {@code toast} a change lacking an unchanged value or half of a key
   * change, a schema fingerprint not in {@code known} (null: not checked), more than {@code limit}
   * records.
   */
  public static Part part(Decoding decoding, String name, String memory, String topic, List<?> key, List<?> columns,
                          String floor, Map<?, ?> from, Map<?, ?> until, List<?> known, boolean toast, long limit) {
    return new Part(decoding, name, memory, topic, key, columns, floor, from, until, known, toast, limit);
  }

  /** One batch of one table, as {@link #runAll} does for many: {@code batch} holds the Kafka source's
   * rows of the table's topic; {@code maxBytes} of records decoded at most (0: {@link #heldBytes}). */
  public static Pending run(SparkSession spark, Decoding decoding, Dataset<Row> batch, String name, String memory,
                            List<String> key, List<String> columns, String floor, Map<?, ?> committed,
                            List<?> known, boolean toast, long limit, long maxBytes) throws Exception {
    return runAll(spark, batch, List.of(new Part(decoding, name, memory, null, key, columns, floor, committed, null,
                                                 known, toast, limit)), maxBytes).get(0);
  }

  /** {@link #run} of the records {@code read} reads (in the task), as rows of the Kafka source's
   * {@code raw} schema (with headers). */
  public static Pending run(SparkSession spark, Decoding decoding, KafkaRead read, StructType raw, String name,
                            String memory, List<String> key, List<String> columns, String floor,
                            Map<?, ?> committed, List<?> known, boolean toast, long limit, long maxBytes)
      throws Exception {
    return runAll(spark, read, raw, List.of(new Part(decoding, name, memory, null, key, columns, floor, committed,
                                                     null, known, toast, limit)), maxBytes).get(0);
  }

  /** What a task needs of a part: its decoding, target and memory broadcast, and their snapshots. */
  private record Task(Part part, Broadcast<Decoding> decoder, Broadcast<Table> target, Broadcast<Table> deletes,
                      long base, long memoryBase) implements Serializable {}

  /**
   * Decode and write the {@code parts} of one batch ({@code batch}: the Kafka source's rows of their
   * topics; a part of no topic takes every row) in one Spark job of one task, and return each part's
   * {@link Pending}, in order. Each record goes to the parts of its topic. A part whose target refuses
   * the direct path ({@link DirectDelta#refusal}) or whose decoding no longer fits is not read; one
   * that meets a record needing a query stops there, and says why, and the others go on. A part whose
   * record brings the task's decoded records over {@code maxBytes} (0: {@link #heldBytes}) drops its
   * own, and says so.
   */
  public static List<Pending> runAll(SparkSession spark, Dataset<Row> batch, List<Part> parts, long maxBytes)
      throws Exception {
    return runAll(spark, batch.schema(), () -> batch.queryExecution().toRdd().toJavaRDD(), parts, maxBytes);
  }

  /** {@link #runAll} of the records {@code read} reads (in the task), as rows of the Kafka source's
   * {@code raw} schema (with headers). */
  public static List<Pending> runAll(SparkSession spark, KafkaRead read, StructType raw, List<Part> parts,
                                     long maxBytes) throws Exception {
    return runAll(spark, raw, () -> JavaSparkContext.fromSparkContext(spark.sparkContext())
        .parallelize(List.of(read), 1).mapPartitions(it -> it.next().rows(raw)), parts, maxBytes);
  }

  private static List<Pending> runAll(SparkSession spark, StructType raw, Supplier<JavaRDD<InternalRow>> batch,
                                      List<Part> parts, long maxBytes) throws Exception {
    Pending[] pending = new Pending[parts.size()];
    List<Integer> read = new ArrayList<>();
    List<Task> tasks = new ArrayList<>();
    List<DirectDelta.Opened> opened = new ArrayList<>();
    try {
      long[] prepared = new long[parts.size()];
      for (int i = 0; i < parts.size(); i++) {
        long began = System.nanoTime();
        Part part = parts.get(i);
        Table table = DirectDelta.loaded(spark, part.name);
        String refused = DirectDelta.refusal(table, part.key, part.columns);
        if (refused != null || !raw.equals(part.decoding.raw)
            || table.schema().schemaId() != part.decoding.schemaId) {
          Outcome none = new Outcome();
          none.reason = refused != null ? refused : COLUMNS;
          pending[i] = new Pending(table, null, none);
          continue;
        }
        DirectDelta.Opened o = DirectDelta.Opened.of(spark, table, part.memory, part.name, part.key);
        opened.add(o);
        read.add(i);
        tasks.add(new Task(part, part.decoding.shared(spark), o.target, o.deletes, o.base, o.memoryBase));
        pending[i] = new Pending(table, o.memory, null);
        prepared[i] = System.nanoTime() - began;
      }
      if (!tasks.isEmpty()) {
        List<Outcome> outcomes = written(spark, raw, batch, tasks, maxBytes);
        for (int j = 0; j < tasks.size(); j++) {
          Outcome outcome = outcomes.isEmpty() ? new Outcome() : outcomes.get(j);
          if (outcomes.isEmpty()) {  // a batch of no Kafka partition: nothing to write
            outcome.written = new DirectDelta.Written();
            outcome.written.base = tasks.get(j).base;
          }
          outcome.prepareNanos = prepared[read.get(j)];
          Pending p = pending[read.get(j)];
          pending[read.get(j)] = new Pending(p.table, p.memory, outcome);
        }
      }
    } finally {
      opened.forEach(DirectDelta.Opened::close);
    }
    return List.of(pending);
  }

  /** The job of {@link #runAll}: one task decoding the batch's records for each of {@code tasks} and
   * writing each one's files; their outcomes in order (none for a batch of no partition). */
  private static List<Outcome> written(SparkSession spark, StructType raw, Supplier<JavaRDD<InternalRow>> batch,
                                       List<Task> tasks, long maxBytes) {
    int partitionAt = raw.fieldIndex("partition");
    int offsetAt = raw.fieldIndex("offset");
    int topicAt = raw.fieldIndex("topic");
    // The session's SQL settings reach the task as a query's do (the JSON reader's partial
    // results, ANSI rules): the expressions read them where they run.
    List<List<Outcome>> out = SQLExecution.withSQLConfPropagated((org.apache.spark.sql.classic.SparkSession) spark,
        () -> batch.get().coalesce(1).mapPartitions(it -> {
      TaskContext context = TaskContext.get();
      int partition = context == null ? 0 : context.partitionId();
      long budget = maxBytes > 0 ? maxBytes : heldBytes();
      List<Decoder> decoders = new ArrayList<>();
      Map<UTF8String, List<Decoder>> byTopic = new HashMap<>();
      List<Decoder> everyTopic = new ArrayList<>();
      for (Task t : tasks) {
        Decoder d = new Decoder(t, partition);
        decoders.add(d);
        if (t.part().topic == null) {
          everyTopic.add(d);
        } else {
          byTopic.computeIfAbsent(UTF8String.fromString(t.part().topic), k -> new ArrayList<>()).add(d);
        }
      }
      long held = 0;
      long reading = 0;
      while (true) {
        long asked = System.nanoTime();
        if (!it.hasNext()) {
          reading += System.nanoTime() - asked;
          break;
        }
        InternalRow r = it.next();
        reading += System.nanoTime() - asked;
        List<Decoder> to = everyTopic.isEmpty() ? byTopic.getOrDefault(r.getUTF8String(topicAt), List.of())
            : everyTopic;
        int p = r.getInt(partitionAt);
        long offset = r.getLong(offsetAt);
        for (Decoder d : to) {
          long began = System.nanoTime();
          Long from = d.task.part().from.get(p);
          Long until = d.task.part().until.get(p);
          if (d.out.reason != null || from != null && offset < from || until != null && offset >= until) {
            continue;
          }
          held += d.take(r);
          if (d.out.reason == null && held > budget) {
            d.out.reason = "more than " + (budget >> 20) + " MiB of records";
          }
          if (d.out.reason != null) {  // the part takes a query, which reads it again
            held -= d.held;
            d.drop();
          }
          d.out.decodeNanos += System.nanoTime() - began;
        }
      }
      List<Outcome> outcomes = new ArrayList<>();
      for (Decoder d : decoders) {
        if (d.out.reason == null) {
          long began = System.nanoTime();
          Part part = d.task.part();
          d.out.written = DirectDelta.writeEvents(d.target, d.task.base(), d.task.deletes().value(),
              d.task.memoryBase(), part.name, d.rows, part.key, part.floor);
          d.out.writeNanos = System.nanoTime() - began;
        }
        d.out.readNanos = reading;
        outcomes.add(d.out);
        d.release();
      }
      return List.of(outcomes).iterator();
    }).collect());
    return out.isEmpty() ? List.of() : out.get(0);
  }

  /** A part's decoding in the task, with the rows it keeps and its outcome so far. */
  private static final class Decoder {
    final Task task;
    final Table target;
    final DirectDelta.Layout layout;
    final int partition;
    final Outcome out = new Outcome();
    Chain chain;  // at the part's first record
    long largest;  // the longest row it decoded
    DataType[] types;
    List<InternalRow> rows = new ArrayList<>();
    long records;
    long held;

    Decoder(Task task, int partition) {
      this.task = task;
      this.partition = partition;
      this.target = task.target().value();
      this.layout = DirectDelta.Layout.of(target.schema(), task.part().key);
    }

    private void compile() {
      Decoding d = task.decoder().value();
      types = d.types;
      chain = d.chain(partition);
    }

    /** Its projections kept for the next task. */
    void release() {
      if (chain != null) {
        task.decoder().value().release(chain, largest);
      }
    }

    /** Decode record {@code r}, count it and keep its row (unless it needs a query: {@code out.reason});
     * returns the bytes it holds decoded. */
    long take(InternalRow r) {
      if (chain == null) {
        long began = System.nanoTime();
        compile();
        out.compileNanos = System.nanoTime() - began;
      }
      InternalRow e = chain.apply(r);
      Part part = task.part();
      long size = ((UnsafeRow) e).getSizeInBytes();
      largest = Math.max(largest, size);
      int opAt = layout.columns() + 1;
      int extras = layout.columns() + 3;
      String op = e.isNullAt(opAt) ? "" : e.getUTF8String(opAt).toString();
      boolean bad = e.getBoolean(extras);
      Long schema = e.isNullAt(extras + 2) ? null : e.getLong(extras + 2);
      count(out.stats, e, layout, op, bad, extras, schema);
      out.reason = bad ? BAD : "t".equals(op) ? TRUNCATE
          : part.toast && (e.getBoolean(extras + 3) || e.getBoolean(extras + 4)) ? UNCHANGED
          : part.known != null && schema != null && !part.known.contains(schema) ? UNSEEN
          : ++records > part.limit ? "more than " + part.limit + " records" : null;
      if (out.reason == null && !NON_DATA.equals(op)) {
        rows.add(DirectDelta.generic(e.copy(), types));
        held += size;
        return size;
      }
      return 0;
    }

    void drop() {
      rows = new ArrayList<>();
      held = 0;
    }
  }

  /** Count a decoded record {@code e} in its partition's stats (the applier's stats aggregation). */
  private static void count(Map<Integer, Stats> stats, InternalRow e, DirectDelta.Layout layout, String op,
                            boolean bad, int extras, Long schema) {
    int partition = e.getInt(layout.partitionAt());
    long offset = e.getLong(layout.offsetAt());
    Stats s = stats.computeIfAbsent(partition, p -> {
      Stats created = new Stats();
      created.partition = p;
      return created;
    });
    s.first = Math.min(s.first, offset);
    s.last = Math.max(s.last, offset);
    s.records += 1;
    if (!e.isNullAt(layout.positionAt())) {
      UTF8String position = e.getUTF8String(layout.positionAt());
      if (s.position == null || position.compareTo(s.position) > 0) {
        s.position = position.clone();
        s.transactionId = e.isNullAt(extras + 5) ? null : e.getUTF8String(extras + 5).toString();
        s.transactionOrder = e.isNullAt(extras + 6) ? null : e.getLong(extras + 6);
      }
      if (!e.isNullAt(extras + 1)) {
        long ms = e.getLong(extras + 1);
        s.sourceTsMs = s.sourceTsMs == null ? ms : Math.max(s.sourceTsMs, ms);
      }
    }
    s.errors += bad ? 1 : 0;
    s.deletes += "d".equals(op) ? 1 : 0;
    if (schema != null && !s.schemas.contains(schema)) {
      s.schemas.add(schema);
    }
  }
}
