package cdc.direct;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.MetadataColumns;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.BaseDeleteLoader;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.deletes.BaseDVFileWriter;
import org.apache.iceberg.deletes.PositionDeleteIndex;
import org.apache.iceberg.expressions.Expression;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.DeleteWriteResult;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.spark.Spark3Util;
import org.apache.iceberg.spark.SparkSchemaUtil;
import org.apache.iceberg.spark.data.vectorized.VectorizedSparkParquetReaders;
import org.apache.iceberg.spark.data.SparkParquetWriters;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The direct path: the last change per key of upsert-mode, unpartitioned Iceberg targets of
 * format version 3, applied with no query plan per target. A task per target finds the current
 * rows of its keys (the data files the key filter keeps, their deletion vectors applied), writes
 * one data file of the rows to insert and the deletion vectors of the rows replaced or deleted
 * (merged with the file's previous vector); the driver commits each target's files as one
 * RowDelta carrying the batch's summary. {@link #applyEvents} is a running job's (jobs/apply.py);
 * the benchmark's many targets in one job (bench/direct.py) are jvm/direct-bench's, outside this jar.
 *
 * <p>The guards are the MERGE's of planning/merge.py in upsert mode: a change replaces a row only
 * when newer than its position; a delete removes it when newer; a tombstone removes a row written
 * earlier in its Kafka partition; an upsert inserts a key no row holds when newer than the key's
 * remembered delete ({@code _deleted_position}) and than the last truncate (the floor).
 */
public final class DirectDelta {
  private DirectDelta() {}

  static final String TOMBSTONE = "tombstone";  // planning/sql.py's TOMBSTONE
  static final int READ_BATCH_ROWS = 4096;  // rows a stored file is read by at a time (Spark's own default)
  /** The batch view's names (planning/merge.py) of the target's metadata columns. */
  static final Map<String, String> FROM_VIEW = Map.of(
      "_cdc_op", "_op", "_cdc_position", "_position", "_cdc_source_ts", "_source_ts",
      "_cdc_kafka_partition", "_partition", "_cdc_kafka_offset", "_offset");

  /** One target's files, written by its task, committed by the driver. */
  static final class Written implements Serializable {
    String table;
    long base;
    List<DataFile> data = new ArrayList<>();
    List<DeleteFile> deletes = new ArrayList<>();
    List<DeleteFile> replaced = new ArrayList<>();
    List<String> referenced = new ArrayList<>();
    DataFile memory;  // the batch's deletes, for the delete memory (applyEvents)
    long found;
    long inserted;
    long removed;
    long taskNanos;
    long findNanos;  // of it, finding the current rows of its keys and their remembered deletes
    Expression filter = Expressions.alwaysTrue();
  }

  /**
   * Apply one target's batch of decoded events in one Spark job of one task: {@code events} holds
   * the batch's change events (the key and data {@code columns} by their names, {@code _op},
   * {@code _position}, {@code _source_ts}, {@code _partition}, {@code _offset}), applied to Spark
   * table {@code name} keyed by {@code key}, with {@code floor} the last truncate's position (or
   * null) and {@code memory} the table's delete memory. The task takes the last change per key
   * (planning/dedupe.py's rules), looks up each key's newest remembered delete as of the memory's
   * snapshot before this batch, and writes the batch's delete events as one file of the memory and
   * the target's files; the driver appends the memory's file, then commits one RowDelta carrying
   * {@code summary} (none when nothing changes). Returns the rows found, inserted, removed and
   * remembered.
   */
  public static long[] applyEvents(SparkSession spark, String name, String memory, Dataset<Row> events,
                                   List<String> key, List<String> columns, String floor,
                                   Map<String, String> summary) throws Exception {
    Table table = loaded(spark, name);
    String refused = refusal(table, key, columns);
    if (refused != null) {
      throw new IllegalArgumentException("the direct path cannot write " + name + ": " + refused);
    }
    Dataset<Row> input = asInput(events, table.schema(), name);
    List<String> keys = List.copyOf(key);
    DataType[] types = java.util.Arrays.stream(input.schema().fields()).map(StructField::dataType)
        .toArray(DataType[]::new);
    Opened opened = Opened.of(spark, table, memory, name, key);
    List<Written> written;
    try (opened) {
      Broadcast<Table> target = opened.target;
      Broadcast<Table> deletes = opened.deletes;
      long base = opened.base;
      long memoryBase = opened.memoryBase;
      written = input.queryExecution().toRdd().toJavaRDD().coalesce(1).mapPartitions(it -> {
        List<InternalRow> copied = new ArrayList<>();
        it.forEachRemaining(r -> copied.add(generic(r.copy(), types)));
        return List.of(writeEvents(target.value(), base, deletes.value(), memoryBase, name, copied, keys, floor))
            .iterator();
      }).collect();
    }
    Table remembered = opened.memory;
    Written w = written.get(0);
    if (w.memory != null) {  // before the target's commit: a crash in between re-runs both
      remembered.newAppend().appendFile(w.memory).commit();
      KeyIndex.committed(remembered, List.of(w.memory), List.of(), List.of());
    }
    try {
      commit(table, w, summary);
    } catch (CommitStateUnknownException e) {
      throw e;  // it may have committed: its files stay
    } catch (RuntimeException e) {
      w.data.forEach(f -> table.io().deleteFile(f.location()));  // a commit that failed leaves no files
      w.deletes.forEach(f -> table.io().deleteFile(f.location()));
      throw e;
    }
    return new long[] {w.found, w.inserted, w.removed, w.memory == null ? 0L : w.memory.recordCount()};
  }

  /** Spark table {@code name}'s Iceberg table, refreshed. */
  static Table loaded(SparkSession spark, String name) throws Exception {
    Table table = Spark3Util.loadIcebergTable(spark, name);
    table.refresh();
    return table;
  }

  /** Table {@code t}'s current snapshot's id, -1 when it has none. */
  static long snapshotOf(Table t) {
    return t.currentSnapshot() == null ? -1L : t.currentSnapshot().snapshotId();
  }

  /** A target and its delete memory as a batch's task reads them: their snapshots before the batch
   * and their copies broadcast to the task, destroyed on close. */
  static final class Opened implements AutoCloseable {
    final Table memory;
    final long base;
    final long memoryBase;
    final Broadcast<Table> target;
    final Broadcast<Table> deletes;

    private Opened(Table table, Table memory, JavaSparkContext jsc) {
      this.memory = memory;
      this.base = snapshotOf(table);
      this.memoryBase = snapshotOf(memory);
      this.target = jsc.broadcast(SerializableTable.copyOf(table));
      this.deletes = jsc.broadcast(SerializableTable.copyOf(memory));
    }

    /** Target {@code table} (Spark table {@code name}) and its delete memory {@code memory}. */
    static Opened of(SparkSession spark, Table table, String memory, String name, List<String> key)
        throws Exception {
      return new Opened(table, memoryOf(spark, memory, table, name, key),
                        JavaSparkContext.fromSparkContext(spark.sparkContext()));
    }

    @Override
    public void close() {
      target.destroy(false);
      deletes.destroy(false);
    }
  }

  /** Table {@code name}'s delete memory {@code memory}, refreshed: unpartitioned, holding the key,
   * {@code _cdc_position} and {@code _cdc_source_ts} as the target does. */
  static Table memoryOf(SparkSession spark, String memory, Table table, String name, List<String> key)
      throws Exception {
    Table remembered = Spark3Util.loadIcebergTable(spark, memory);
    remembered.refresh();
    if (!remembered.spec().isUnpartitioned()) {
      throw new IllegalArgumentException("a delete memory is unpartitioned: " + memory);
    }
    List<String> shared = new ArrayList<>(key);
    shared.addAll(List.of("_cdc_position", "_cdc_source_ts"));
    for (String c : shared) {
      Types.NestedField held = remembered.schema().findField(c);
      if (held == null || !held.type().equals(table.schema().findField(c).type())) {
        throw new IllegalArgumentException("the delete memory " + memory + " does not hold " + c + " as " + name
                                           + " does");
      }
    }
    return remembered;
  }

  /** Iceberg types of a key the direct path matches exactly (Spark's values of them compare as the
   * MERGE's equality does; floats and binaries do not). */
  static final Set<Type.TypeID> KEY_TYPES = Set.of(Type.TypeID.INTEGER, Type.TypeID.LONG, Type.TypeID.STRING,
      Type.TypeID.DATE, Type.TypeID.TIMESTAMP, Type.TypeID.DECIMAL, Type.TypeID.BOOLEAN);

  /**
   * Why the direct path cannot write {@code table} exactly as the MERGE of {@code columns} (the
   * batch's data columns) keyed by {@code key} would, or null when it can: the target must be
   * unpartitioned, of format version 3 (deletion vectors), keyed by types whose values compare
   * exactly, hold every column of the batch (a MERGE fails on one it lacks) and no column beyond
   * the batch's and the metadata (a MERGE's update keeps such a column's value; a row written
   * anew could not).
   */
  public static String refusal(Table table, List<String> key, List<String> columns) {
    if (!table.spec().isUnpartitioned()) {
      return "a partitioned target";
    }
    int version = ((HasTableOperations) table).operations().current().formatVersion();
    if (version < 3) {
      return "format version " + version;
    }
    for (String k : key) {
      Types.NestedField f = table.schema().findField(k);
      if (f == null || !KEY_TYPES.contains(f.type().typeId())) {
        return "a key of type " + (f == null ? "unknown" : f.type());
      }
    }
    for (String c : columns) {
      if (table.schema().findField(c) == null) {  // the MERGE fails naming it; a row written anew would drop it
        return "a batch column the target lacks (" + c + ")";
      }
    }
    Set<String> carried = new HashSet<>(columns);
    carried.addAll(FROM_VIEW.keySet());
    for (Types.NestedField f : table.schema().columns()) {
      if (!carried.contains(f.name())) {
        return "a target column the batch does not carry (" + f.name() + ")";
      }
    }
    return null;
  }

  /** The batch view (or the events) as the task's input: the target's name, its columns in its
   * schema's order (each cast to its type), {@code _op} and {@code _deleted_position} (null for events). */
  static Dataset<Row> asInput(Dataset<Row> changes, Schema schema, String name) {
    return changes.select(inputColumns(changes, schema, name).toArray(new Column[0]));
  }

  /** The columns of {@link #asInput}'s layout, over {@code changes}. */
  static List<Column> inputColumns(Dataset<Row> changes, Schema schema, String name) {
    StructType types = SparkSchemaUtil.convert(schema);
    List<Column> columns = new ArrayList<>();
    columns.add(functions.lit(name).alias("_table"));
    for (StructField f : types.fields()) {
      columns.add(changes.col(quoted(FROM_VIEW.getOrDefault(f.name(), f.name()))).cast(f.dataType()).alias(f.name()));
    }
    columns.add(changes.col("_op"));
    columns.add(List.of(changes.columns()).contains("_deleted_position") ? changes.col("_deleted_position")
                : functions.lit(null).cast("string").alias("_deleted_position"));
    return columns;
  }

  private static String quoted(String name) {
    return "`" + name.replace("`", "``") + "`";
  }

  static void commit(Table table, Written w, Map<String, String> summary) {
    if (w.data.isEmpty() && w.deletes.isEmpty()) {
      return;  // the caller commits the summary alone
    }
    RowDelta delta = table.newRowDelta();
    if (w.base >= 0) {
      delta.validateFromSnapshot(w.base);
    }
    delta.conflictDetectionFilter(w.filter).validateDataFilesExist(w.referenced).validateDeletedFiles()
        .validateNoConflictingDataFiles().validateNoConflictingDeleteFiles();
    w.data.forEach(delta::addRows);
    w.deletes.forEach(delta::addDeletes);
    w.replaced.forEach(delta::removeDeletes);
    summary.forEach(delta::set);
    OffsetsCheck check = OffsetsCheck.of(summary);
    if (check != null) {
      delta.validateWith(check);
    }
    delta.commit();
    KeyIndex.committed(table, w.data, w.deletes, w.replaced);
  }

  /** A current row of a key: its data file and position, the position of its last change, and
   * the Kafka partition and offset it was written from (a tombstone's guard). */
  @VisibleForTesting
  record Found(String file, long pos, UTF8String position, Integer partition, Long offset) {}

  /** Where a row of {@link #asInput}'s layout for a target's {@code schema} holds the target's
   * {@code columns} (from 1), its key and metadata columns; {@code _op} follows them. */
  record Layout(StructType sparkType, int columns, int[] keyAt, DataType[] keyTypes, int positionAt,
                int partitionAt, int offsetAt) {
    static Layout of(Schema schema, List<String> key) {
      StructType sparkType = SparkSchemaUtil.convert(schema);
      int[] keyAt = new int[key.size()];
      DataType[] keyTypes = new DataType[key.size()];
      for (int i = 0; i < key.size(); i++) {
        keyAt[i] = 1 + indexOf(schema, key.get(i));
        keyTypes[i] = sparkType.fields()[keyAt[i] - 1].dataType();
      }
      return new Layout(sparkType, schema.columns().size(), keyAt, keyTypes, 1 + indexOf(schema, "_cdc_position"),
                        1 + indexOf(schema, "_cdc_kafka_partition"), 1 + indexOf(schema, "_cdc_kafka_offset"));
    }
  }

  /**
   * The task of {@link #applyEvents}: {@code rows} are the batch's events in {@link #asInput}'s layout.
   * Their delete events become one data file of the delete {@code memory} ({@code Written.memory}); their
   * last change per key, with the key's newest remembered delete as of snapshot {@code memoryBase}, is
   * written to the target as {@link #write} does.
   */
  static Written writeEvents(Table table, long base, Table memory, long memoryBase, String name,
                             List<InternalRow> rows, List<String> key, String floor) {
    Schema schema = table.schema();
    Layout layout = Layout.of(schema, key);
    int columns = layout.columns();
    int[] keyAt = layout.keyAt();
    DataType[] keyTypes = layout.keyTypes();
    Map<List<Object>, InternalRow> last = lastPerKey(rows, keyAt, keyTypes, layout.positionAt(),
        layout.partitionAt(), layout.offsetAt(), columns + 1);
    long began = System.nanoTime();
    Map<List<Object>, UTF8String> deleted = memoryBase < 0 || last.isEmpty() ? Map.of()
        : newestDeletes(memory, memoryBase, key, keyTypes, last.keySet());
    long remembered = System.nanoTime() - began;
    List<InternalRow> changes = new ArrayList<>(last.size());
    for (Map.Entry<List<Object>, InternalRow> e : last.entrySet()) {
      InternalRow row = e.getValue();
      row.update(columns + 2, deleted.get(e.getKey()));
      changes.add(row);
    }
    List<InternalRow> deletes = new ArrayList<>();
    for (InternalRow row : rows) {
      if ("d".equals(opOf(row, columns + 1)) && keyOf(row, keyAt, keyTypes) != null) {
        deletes.add(row);
      }
    }
    Written w = write(table, base, name, changes, key, floor);
    w.findNanos += remembered;
    if (!deletes.isEmpty()) {
      List<Types.NestedField> kept = memory.schema().columns();
      int[] at = new int[kept.size()];
      for (int i = 0; i < at.length; i++) {
        String field = FROM_VIEW.containsKey(kept.get(i).name()) || key.contains(kept.get(i).name())
            ? kept.get(i).name() : null;
        at[i] = field == null ? -1 : 1 + indexOf(schema, field);
      }
      w.memory = remember(memory, deletes, at);
    }
    return w;
  }

  private static String opOf(InternalRow row, int at) {
    return row.isNullAt(at) ? "" : row.getUTF8String(at).toString();
  }

  /**
   * The last change per key of {@code rows} (planning/dedupe.py's {@code last_per_key_of} in upsert
   * mode, a row of the same layout for each key): the change with the highest position (of two
   * alike, the later in Kafka); a tombstone later in that change's Kafka partition turns it into a
   * delete; a key with only tombstones keeps its latest, as a lone tombstone. A row with a null key
   * part matches no stored row and is left out, as {@link #write} leaves it.
   */
  static Map<List<Object>, InternalRow> lastPerKey(List<InternalRow> rows, int[] keyAt, DataType[] keyTypes,
                                                   int positionAt, int partitionAt, int offsetAt, int opAt) {
    Map<List<Object>, InternalRow> changes = new LinkedHashMap<>();
    Map<List<Object>, InternalRow> tombstones = new LinkedHashMap<>();
    for (InternalRow row : rows) {
      List<Object> k = keyOf(row, keyAt, keyTypes);
      if (k == null) {
        continue;
      }
      if (TOMBSTONE.equals(opOf(row, opAt))) {
        InternalRow held = tombstones.get(k);
        if (held == null || row.getLong(offsetAt) > held.getLong(offsetAt)) {
          tombstones.put(k, row);
        }
        continue;
      }
      if (row.isNullAt(positionAt)) {  // no position orders it (the dedupe's max_by skips it too)
        continue;
      }
      InternalRow held = changes.get(k);
      int newer = held == null ? 1 : row.getUTF8String(positionAt).compareTo(held.getUTF8String(positionAt));
      if (newer > 0 || newer == 0 && row.getLong(offsetAt) > held.getLong(offsetAt)) {
        changes.put(k, row);
      }
    }
    Map<List<Object>, InternalRow> last = new LinkedHashMap<>();
    for (Map.Entry<List<Object>, InternalRow> e : changes.entrySet()) {
      InternalRow change = e.getValue().copy();
      InternalRow tomb = tombstones.get(e.getKey());
      if (tomb != null && !change.isNullAt(partitionAt) && tomb.getInt(partitionAt) == change.getInt(partitionAt)
          && tomb.getLong(offsetAt) > change.getLong(offsetAt)) {
        change.update(opAt, UTF8String.fromString("d"));
      }
      last.put(e.getKey(), change);
    }
    for (Map.Entry<List<Object>, InternalRow> e : tombstones.entrySet()) {
      if (!changes.containsKey(e.getKey())) {
        InternalRow lone = e.getValue().copy();
        lone.update(opAt, UTF8String.fromString(TOMBSTONE));
        lone.setNullAt(positionAt);
        last.put(e.getKey(), lone);
      }
    }
    return last;
  }

  /** The newest remembered delete position of each of {@code keys} in the delete memory as of
   * {@code snapshot} (its rows the key filter keeps, their deletes applied). */
  static Map<List<Object>, UTF8String> newestDeletes(Table memory, long snapshot, List<String> key,
                                                     DataType[] keyTypes, Set<List<Object>> keys) {
    List<Types.NestedField> fields = new ArrayList<>();
    for (String k : key) {
      fields.add(memory.schema().findField(k));
    }
    fields.add(memory.schema().findField("_cdc_position"));
    int n = key.size();
    int[] keyAt = java.util.stream.IntStream.range(0, n).toArray();
    Map<List<Object>, UTF8String> newest = new HashMap<>();
    live(memory, snapshot, keyFilter(key, keyTypes, keys), fields, keyTypes, keys, null, (file, pos, r) -> {
      List<Object> k = keyOf(r, keyAt, keyTypes);
      if (k == null || !keys.contains(k) || r.isNullAt(n)) {
        return;
      }
      UTF8String position = r.getUTF8String(n).clone();
      UTF8String held = newest.get(k);
      if (held == null || position.compareTo(held) > 0) {
        newest.put(k, position);
      }
    });
    return newest;
  }

  /** One data file of the delete memory holding {@code deletes} (rows of {@link #asInput}'s layout,
   * {@code at} the place of each column of the memory in them, -1 for none): their key, position and
   * source time, with no moved row (the direct path takes no key change). */
  static DataFile remember(Table memory, List<InternalRow> deletes, int[] at) {
    StructType sparkType = SparkSchemaUtil.convert(memory.schema());
    TaskContext task = TaskContext.get();
    OutputFileFactory out = OutputFileFactory.builderFor(memory, task == null ? 0 : task.partitionId(),
        task == null ? 0 : task.taskAttemptId()).format(FileFormat.PARQUET).build();
    DataWriter<InternalRow> data;
    try {
      data = Parquet.writeData(out.newOutputFile()).forTable(memory).withSpec(memory.spec())
          .createWriterFunc(msg -> SparkParquetWriters.buildWriter(sparkType, msg)).overwrite().build();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    try (data) {
      for (InternalRow row : deletes) {
        Object[] values = new Object[at.length];
        for (int i = 0; i < at.length; i++) {
          values[i] = at[i] < 0 ? null : row.get(at[i], sparkType.fields()[i].dataType());
        }
        data.write(new GenericInternalRow(values));
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return data.toDataFile();
  }

  static Written write(Table table, long base, String name, Iterable<InternalRow> rows, List<String> key,
                       String floor) {
    long started = System.nanoTime();
    Schema schema = table.schema();
    Layout layout = Layout.of(schema, key);
    StructType sparkType = layout.sparkType();
    int columns = layout.columns();
    int[] keyAt = layout.keyAt();
    DataType[] keyTypes = layout.keyTypes();
    int positionAt = layout.positionAt();
    int partitionAt = layout.partitionAt();
    int offsetAt = layout.offsetAt();
    UTF8String floorAt = floor == null ? null : UTF8String.fromString(floor);
    Map<List<Object>, InternalRow> byKey = new LinkedHashMap<>();
    for (InternalRow row : rows) {
      List<Object> k = keyOf(row, keyAt, keyTypes);
      if (k != null) {  // a null key matches no row (the MERGE's equality): it only inserts
        byKey.put(k, row);
      }
    }
    Written w = new Written();
    w.table = name;
    w.base = base;
    w.filter = keyFilter(key, keyTypes, byKey.keySet());
    Map<String, PositionDeleteIndex> previous = new HashMap<>();
    Map<List<Object>, List<Found>> current = base < 0 || byKey.isEmpty() ? Map.of()
        : find(table, base, key, keyTypes, w.filter, byKey.keySet(), previous);
    w.findNanos = System.nanoTime() - started;
    TaskContext task = TaskContext.get();
    int partitionId = task == null ? 0 : task.partitionId();
    long taskId = task == null ? 0 : task.taskAttemptId();
    OutputFileFactory files = OutputFileFactory.builderFor(table, partitionId, taskId)
        .format(FileFormat.PARQUET).build();
    OutputFileFactory vectors = OutputFileFactory.builderFor(table, partitionId, taskId)
        .format(FileFormat.PUFFIN).suffix("dv").build();
    try {
      DataWriter<InternalRow> data = null;
      List<InternalRow> written = new ArrayList<>();
      BaseDVFileWriter dv = new BaseDVFileWriter(vectors, previous::get);
      Set<String> referenced = new HashSet<>();
      for (Map.Entry<List<Object>, InternalRow> e : byKey.entrySet()) {
        InternalRow row = e.getValue();
        UTF8String position = row.isNullAt(positionAt) ? null : row.getUTF8String(positionAt).clone();
        Change change = new Change(opOf(row, columns + 1), position,
            row.isNullAt(partitionAt) ? null : row.getInt(partitionAt),
            row.isNullAt(offsetAt) ? null : row.getLong(offsetAt));
        List<Found> held = current.getOrDefault(e.getKey(), List.of());
        int inserts = 0;
        for (Found h : held) {
          boolean remove = removes(change, h);
          inserts += remove && change.upsert() ? 1 : 0;  // an update: the row replaced by the change's
          if (remove) {
            dv.delete(h.file(), h.pos(), table.spec(), null);
            referenced.add(h.file());
            w.removed += 1;
          }
        }
        if (held.isEmpty() && change.upsert()) {
          UTF8String deleted = row.isNullAt(columns + 2) ? null : row.getUTF8String(columns + 2);
          inserts = inserts(change, deleted, floorAt) ? 1 : 0;
        }
        for (int n = 0; n < inserts; n++) {
          if (data == null) {
            data = Parquet.writeData(files.newOutputFile()).forTable(table).withSpec(table.spec())
                .createWriterFunc(msg -> SparkParquetWriters.buildWriter(sparkType, msg)).overwrite().build();
          }
          Object[] values = new Object[columns];
          for (int i = 0; i < columns; i++) {
            values[i] = row.get(i + 1, sparkType.fields()[i].dataType());
          }
          data.write(new GenericInternalRow(values));
          Object[] kept = new Object[keyAt.length + 4];  // as find reads it back: the key, the position, the Kafka place
          for (int i = 0; i < keyAt.length; i++) {
            kept[i] = copied(row.get(keyAt[i], keyTypes[i]));
          }
          kept[keyAt.length] = position;
          kept[keyAt.length + 1] = row.isNullAt(partitionAt) ? null : row.getInt(partitionAt);
          kept[keyAt.length + 2] = row.isNullAt(offsetAt) ? null : row.getLong(offsetAt);
          kept[keyAt.length + 3] = w.inserted;
          written.add(new GenericInternalRow(kept));
          w.inserted += 1;
        }
      }
      if (data != null) {
        data.close();
        DataFile file = data.toDataFile();
        w.data.add(file);
        KeyIndex.wrote(file, projectionOf(foundFields(schema, key)), keyAt.length, keyTypes, written);
      }
      dv.close();
      DeleteWriteResult result = dv.result();
      w.deletes.addAll(result.deleteFiles());
      w.replaced.addAll(result.rewrittenDeleteFiles());
      w.referenced.addAll(referenced);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    w.found = current.values().stream().mapToLong(List::size).sum();
    w.taskNanos = System.nanoTime() - started;
    return w;
  }

  /** A key's last change in the batch as the guards read it: its op, its position, and the Kafka
   * partition and offset it came from (each null when the row has none). */
  record Change(String op, UTF8String position, Integer partition, Long offset) {
    /** Whether it writes the key's row: a create, an update or a snapshot read. */
    boolean upsert() {
      return "c".equals(op) || "u".equals(op) || "r".equals(op);
    }
  }

  /**
   * Whether {@code change} removes {@code held}, a current row of its key (planning/merge.py's
   * matched clauses in upsert mode): a delete or an upsert when its position is above the row's (a
   * row with no position is older than any change; a change with none is newer than no row); a
   * tombstone when later than the row in the row's own Kafka partition. An upsert that removes a row
   * writes its own in the row's place. {@link #write} decides with it alone.
   */
  @VisibleForTesting
  static boolean removes(Change change, Found held) {
    UTF8String position = change.position();
    boolean newer = held.position() == null || (position != null && position.compareTo(held.position()) > 0);
    if ("d".equals(change.op())) {
      return newer;
    }
    if (TOMBSTONE.equals(change.op())) {
      return held.partition() != null && change.partition() != null && held.offset() != null
             && change.offset() != null && held.partition().intValue() == change.partition().intValue()
             && change.offset() > held.offset();
    }
    return change.upsert() && newer;
  }

  /**
   * Whether upsert {@code change} of a key no current row holds inserts it (the MERGE's not-matched
   * clause): only when its position is above the key's remembered delete {@code deleted} and the last
   * truncate's {@code floor} (each null when there is none).
   */
  @VisibleForTesting
  static boolean inserts(Change change, UTF8String deleted, UTF8String floor) {
    UTF8String position = change.position();
    boolean afterDelete = deleted == null || (position != null && position.compareTo(deleted) > 0);
    boolean afterFloor = floor == null || (position != null && position.compareTo(floor) > 0);
    return afterDelete && afterFloor;
  }

  /** A row's key as comparable values (Spark's own: UTF8String, Decimal, Long, ...); null when a
   * part of it is null. */
  static List<Object> keyOf(InternalRow row, int[] at, DataType[] types) {
    List<Object> k = new ArrayList<>(at.length);
    for (int i = 0; i < at.length; i++) {
      if (row.isNullAt(at[i])) {
        return null;
      }
      k.add(copied(row.get(at[i], types[i])));
    }
    return k;
  }

  /** A value of a row kept past it: a string copied. */
  private static Object copied(Object v) {
    return v instanceof UTF8String u ? u.clone() : v;
  }

  /** The filter that keeps the data files (and rows) that may hold {@code keys}: each key column
   * in the batch's values of it (a superset of the keys for a key of several columns). */
  static Expression keyFilter(List<String> key, DataType[] types, Set<List<Object>> keys) {
    Expression filter = Expressions.alwaysTrue();
    if (keys.isEmpty()) {
      return Expressions.alwaysFalse();
    }
    for (int i = 0; i < key.size(); i++) {
      Set<Object> values = new HashSet<>();
      for (List<Object> k : keys) {
        values.add(icebergValue(k.get(i)));
      }
      filter = Expressions.and(filter, Expressions.in(key.get(i), values.toArray()));
    }
    return filter;
  }

  /** A Spark key value as an Iceberg literal's: dates as days, timestamps as microseconds. */
  private static Object icebergValue(Object v) {
    if (v instanceof UTF8String u) {
      return u.toString();
    }
    if (v instanceof Decimal d) {
      return d.toJavaBigDecimal();
    }
    if (v instanceof Short || v instanceof Byte) {
      return ((Number) v).intValue();
    }
    return v;
  }

  /** The current rows of {@code keys} as of snapshot {@code base}: the files the key filter keeps,
   * read for the key, the position and the Kafka place only, their deletion vectors applied (kept
   * in {@code previous} for the new vectors to merge). */
  static Map<List<Object>, List<Found>> find(Table table, long base, List<String> key, DataType[] keyTypes,
                                             Expression filter, Set<List<Object>> keys,
                                             Map<String, PositionDeleteIndex> previous) {
    List<Types.NestedField> fields = foundFields(table.schema(), key);
    int n = key.size();
    int[] keyAt = java.util.stream.IntStream.range(0, n).toArray();
    Map<List<Object>, List<Found>> found = new HashMap<>();
    live(table, base, filter, fields, keyTypes, keys, previous, (file, pos, r) -> {
      List<Object> k = keyOf(r, keyAt, keyTypes);
      if (k != null && keys.contains(k)) {
        found.computeIfAbsent(k, x -> new ArrayList<>()).add(new Found(
            file, pos, r.isNullAt(n) ? null : r.getUTF8String(n).clone(),
            r.isNullAt(n + 1) ? null : r.getInt(n + 1), r.isNullAt(n + 2) ? null : r.getLong(n + 2)));
      }
    });
    return found;
  }

  /** What {@link #find} reads of a target's rows: the key, the position, the Kafka place. */
  static List<Types.NestedField> foundFields(Schema schema, List<String> key) {
    List<Types.NestedField> fields = new ArrayList<>();
    for (String k : key) {
      fields.add(schema.findField(k));
    }
    for (String m : List.of("_cdc_position", "_cdc_kafka_partition", "_cdc_kafka_offset")) {
      fields.add(schema.findField(m));
    }
    return fields;
  }

  /** {@code fields} and the row's position, as {@link #live} reads a file. */
  static Schema projectionOf(List<Types.NestedField> fields) {
    List<Types.NestedField> projected = new ArrayList<>(fields);
    projected.add(MetadataColumns.ROW_POSITION);
    return new Schema(projected);
  }

  /** A live row of a table: its data file, its position in it, and its {@code fields}. */
  interface LiveRow {
    void accept(String file, long pos, InternalRow row);
  }

  /** Each live row of {@code table} as of {@code snapshot} holding one of {@code keys} (of {@code keyTypes},
   * the first fields), in the files {@code filter} keeps (a row of another key may be given too), read
   * for {@code fields} only, its file's deletes applied; the deletes of each file that has some are
   * kept in {@code previous} when given. The files and their rows come from the {@link KeyIndex} where
   * it takes the table, else from the scan's planning and a read of each file. A row is a view of
   * the batch being read: a value kept past it is copied. */
  static void live(Table table, long snapshot, Expression filter, List<Types.NestedField> fields, DataType[] keyTypes,
                   Set<List<Object>> keys, Map<String, PositionDeleteIndex> previous, LiveRow each) {
    Schema projection = projectionOf(fields);
    Set<Integer> keyIds = new HashSet<>();
    for (int i = 0; i < keyTypes.length; i++) {
      keyIds.add(fields.get(i).fieldId());
    }
    List<KeyIndex.Live> indexed = KeyIndex.files(table, snapshot, filter, keyIds);
    if (indexed == null) {
      planned(table, snapshot, filter, projection, previous, each);
      return;
    }
    for (KeyIndex.Live live : indexed) {
      String location = live.file().location();
      PositionDeleteIndex deleted = KeyIndex.deleted(table, live);
      if (previous != null && live.vector() != null) {
        previous.put(location, deleted);
      }
      KeyIndex.Rows rows = KeyIndex.rows(table, live.file(), projection, keyTypes.length, keyTypes);
      if (rows == null) {
        read(table, live.file(), projection, filter, deleted, each);
        continue;
      }
      for (List<Object> k : keys) {
        int[] at = rows.byKey().get(k);
        for (int pos : at == null ? new int[0] : at) {
          if (!deleted.isDeleted(pos)) {
            each.accept(location, pos, rows.rows()[pos]);
          }
        }
      }
    }
  }

  /** {@link #live} through the scan's planning: each live row of the files {@code filter} keeps. */
  private static void planned(Table table, long snapshot, Expression filter, Schema projection,
                              Map<String, PositionDeleteIndex> previous, LiveRow each) {
    BaseDeleteLoader loader = new BaseDeleteLoader(f -> table.io().newInputFile(f.location(), f.fileSizeInBytes()));
    try (CloseableIterable<FileScanTask> tasks = table.newScan().useSnapshot(snapshot).filter(filter).planFiles()) {
      for (FileScanTask task : tasks) {
        DataFile file = task.file();
        PositionDeleteIndex deleted = task.deletes().isEmpty() ? PositionDeleteIndex.empty()
            : loader.loadPositionDeletes(task.deletes(), file.location());
        if (previous != null && !task.deletes().isEmpty()) {
          previous.put(file.location(), deleted);
        }
        read(table, file, projection, filter, deleted, each);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Each row of data file {@code file} that {@code deleted} keeps, read for {@code projection} (the row's
   * position its last column) in the row groups {@code filter} keeps. */
  private static void read(Table table, DataFile file, Schema projection, Expression filter,
                           PositionDeleteIndex deleted, LiveRow each) {
    int posAt = projection.columns().size() - 1;
    try (CloseableIterable<ColumnarBatch> batches = Parquet.read(table.io().newInputFile(file.location(),
            file.fileSizeInBytes()))
        .project(projection).filter(filter).recordsPerBatch(READ_BATCH_ROWS)
        .createBatchedReaderFunc(fileSchema -> VectorizedSparkParquetReaders.buildReader(projection, fileSchema,
                                                                                       Map.of()))
        .build()) {
      for (ColumnarBatch batch : batches) {
        for (java.util.Iterator<InternalRow> rows = batch.rowIterator(); rows.hasNext(); ) {
          InternalRow r = rows.next();
          long pos = r.getLong(posAt);
          if (!deleted.isDeleted(pos)) {
            each.accept(file.location(), pos, r);
          }
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** A row (a copy of its own) as a row whose values can be set, of the given column types. */
  static InternalRow generic(InternalRow row, DataType[] types) {
    Object[] values = new Object[types.length];
    for (int i = 0; i < types.length; i++) {
      values[i] = row.isNullAt(i) ? null : row.get(i, types[i]);
    }
    return new GenericInternalRow(values);
  }

  private static int indexOf(Schema schema, String name) {
    List<Types.NestedField> columns = schema.columns();
    for (int i = 0; i < columns.size(); i++) {
      if (columns.get(i).name().equals(name)) {
        return i;
      }
    }
    throw new IllegalArgumentException("no column " + name + " in " + schema);
  }
}
