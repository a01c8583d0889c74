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
import java.util.Set;
import java.util.TreeMap;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.Table;
import org.apache.iceberg.spark.Spark3Util;
import org.apache.spark.TaskContext;
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

import scala.Function1;
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
    private transient Broadcast<Decoding> shared;  // sent to the executors once, freed with the decoding

    Decoding(StructType raw, List<Seq<Expression>> stages, List<Seq<Attribute>> inputs, DataType[] types,
             long schemaId) {
      this.raw = raw;
      this.stages = stages;
      this.inputs = inputs;
      this.types = types;
      this.schemaId = schemaId;
    }

    /** This decoding broadcast, once: Spark's cleaner frees it when the decoding is dropped. */
    synchronized Broadcast<Decoding> shared(SparkSession spark) {
      if (shared == null) {
        shared = JavaSparkContext.fromSparkContext(spark.sparkContext()).broadcast(this);
      }
      return shared;
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
  }

  /** A batch decoded and written, not yet committed: the driver's handle on it. */
  public static final class Pending {
    private final Table table;
    private final Table memory;
    private final Outcome outcome;
    private boolean remembered;

    Pending(Table table, Table memory, Outcome outcome) {
      this.table = table;
      this.memory = memory;
      this.outcome = outcome;
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
        remembered = true;
      }
      DirectDelta.commit(table, w, summary);
      return new long[] {w.found, w.inserted, w.removed, w.memory == null ? 0L : w.memory.recordCount(),
                         threads.getCurrentThreadCpuTime() - began};
    }

    /** Delete the files the task wrote and no commit took (the batch then takes a query). */
    public void discard() {
      DirectDelta.Written w = outcome.written;
      if (w == null) {
        return;
      }
      for (DataFile f : w.data) {
        table.io().deleteFile(f.location());
      }
      for (DeleteFile f : w.deletes) {
        table.io().deleteFile(f.location());
      }
      if (w.memory != null && !remembered) {
        memory.io().deleteFile(w.memory.location());
      }
    }
  }

  /**
   * Decode and write one batch of Spark table {@code name}: {@code batch} holds the Kafka source's
   * rows of the target's data {@code columns}; those before {@code committed}'s offset of their
   * partition are left out (the table holds them). Nothing is read when the target refuses the direct
   * path ({@link DirectDelta#refusal}, the reason returned). The task stops writing, and says why, at a record that needs a query: a bad one, a
   * truncate, with {@code toast} a change lacking an unchanged value or half of a key change, a
   * schema fingerprint not in {@code known} (null: not checked), more than {@code limit} records or
   * more than {@code maxBytes} of them decoded (0: {@link #heldBytes}).
   */
  public static Pending run(SparkSession spark, Decoding decoding, Dataset<Row> batch, String name, String memory,
                            List<String> key, List<String> columns, String floor, Map<?, ?> committed,
                            List<?> known, boolean toast, long limit, long maxBytes) throws Exception {
    Table table = DirectDelta.loaded(spark, name);
    String refused = DirectDelta.refusal(table, key, columns);
    if (refused != null || !batch.schema().equals(decoding.raw) || table.schema().schemaId() != decoding.schemaId) {
      Outcome none = new Outcome();
      none.reason = refused != null ? refused : COLUMNS;
      return new Pending(table, null, none);
    }
    Map<Integer, Long> skip = new HashMap<>();
    committed.forEach((p, o) -> skip.put(((Number) p).intValue(), ((Number) o).longValue()));
    Set<Long> seen = known == null ? null : new HashSet<>();
    if (known != null) {
      known.forEach(k -> seen.add(((Number) k).longValue()));
    }
    List<String> keys = List.copyOf(key);
    int partitionAt = decoding.raw.fieldIndex("partition");
    int offsetAt = decoding.raw.fieldIndex("offset");
    Broadcast<Decoding> decoder = decoding.shared(spark);
    DirectDelta.Opened opened = DirectDelta.Opened.of(spark, table, memory, name, key);
    Broadcast<Table> target = opened.target;
    Broadcast<Table> deletes = opened.deletes;
    long base = opened.base;
    long memoryBase = opened.memoryBase;
    List<Outcome> outcomes;
    try (opened) {
      // The session's SQL settings reach the task as a query's do (the JSON reader's partial
      // results, ANSI rules): the expressions read them where they run.
      outcomes = SQLExecution.withSQLConfPropagated((org.apache.spark.sql.classic.SparkSession) spark, () ->
          batch.queryExecution().toRdd().toJavaRDD().coalesce(1).mapPartitions(it -> {
        Decoding d = decoder.value();
        TaskContext task = TaskContext.get();
        // Each stage but the last evaluates into a row of references (no copy of its values); the
        // last writes the decoded row. An unsafe row per stage would hold a copy of the record's
        // value in each, twice its size: a 32 MiB record then took over 1 GiB of heap.
        int partition = task == null ? 0 : task.partitionId();
        int last = d.stages.size() - 1;
        List<Function1<InternalRow, InternalRow>> chain = new ArrayList<>();
        for (int i = 0; i < last; i++) {
          MutableProjection p = MutableProjection$.MODULE$.create(d.stages.get(i), d.inputs.get(i));
          p.initialize(partition);
          chain.add(p);
        }
        UnsafeProjection written = UnsafeProjection$.MODULE$.create(d.stages.get(last), d.inputs.get(last));
        written.initialize(partition);
        chain.add(written);
        long budget = maxBytes > 0 ? maxBytes : heldBytes();
        long held = 0;
        Table t = target.value();
        DirectDelta.Layout layout = DirectDelta.Layout.of(t.schema(), keys);
        int opAt = layout.columns() + 1;
        int extras = layout.columns() + 3;
        Outcome out = new Outcome();
        List<InternalRow> rows = new ArrayList<>();
        long records = 0;
        while (it.hasNext()) {
          InternalRow r = it.next();
          Long from = skip.get(r.getInt(partitionAt));
          if (from != null && r.getLong(offsetAt) < from) {
            continue;
          }
          InternalRow e = r;
          for (Function1<InternalRow, InternalRow> p : chain) {
            e = p.apply(e);
          }
          held += ((UnsafeRow) e).getSizeInBytes();
          String op = e.isNullAt(opAt) ? "" : e.getUTF8String(opAt).toString();
          boolean bad = e.getBoolean(extras);
          Long schema = e.isNullAt(extras + 2) ? null : e.getLong(extras + 2);
          count(out.stats, e, layout, op, bad, extras, schema);
          if (out.reason == null) {
            out.reason = bad ? BAD : "t".equals(op) ? TRUNCATE
                : toast && (e.getBoolean(extras + 3) || e.getBoolean(extras + 4)) ? UNCHANGED
                : seen != null && schema != null && !seen.contains(schema) ? UNSEEN
                : ++records > limit ? "more than " + limit + " records"
                : held > budget ? "more than " + (budget >> 20) + " MiB of records" : null;
          }
          if (out.reason != null) {
            break;  // the batch takes a query, which reads it again
          }
          if (!NON_DATA.equals(op)) {
            rows.add(DirectDelta.generic(e.copy(), d.types));
          }
        }
        if (out.reason == null) {
          out.written = DirectDelta.writeEvents(t, base, deletes.value(), memoryBase, name, rows, keys, floor);
        }
        return List.of(out).iterator();
      }).collect());
    }
    Outcome outcome = outcomes.isEmpty() ? new Outcome() : outcomes.get(0);
    if (outcomes.isEmpty()) {  // a batch of no Kafka partition: nothing to write
      outcome.written = new DirectDelta.Written();
      outcome.written.base = base;
    }
    return new Pending(table, opened.memory, outcome);
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
