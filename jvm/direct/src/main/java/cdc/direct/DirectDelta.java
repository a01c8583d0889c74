package cdc.direct;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.MetadataColumns;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.BaseDeleteLoader;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.data.parquet.GenericParquetReaders;
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
import org.apache.iceberg.spark.data.SparkParquetWriters;
import org.apache.iceberg.types.Types;
import org.apache.spark.HashPartitioner;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Tuple2;

/**
 * The direct path's prototype (bench/direct.py): the last change per key of many upsert-mode,
 * unpartitioned Iceberg targets, applied in one Spark job and committed as one RowDelta per
 * target, with no query plan per target. A task per target finds the current rows of its keys
 * (the data files the key filter keeps, their deletion vectors applied), writes one data file of
 * the rows to insert and the deletion vectors of the rows replaced or deleted (merged with the
 * file's previous vector); the driver commits each target's files.
 *
 * <p>Input: column 0 the target's name, then the target's columns in its schema's order, then
 * {@code _op} (c, u, r or d) and {@code _deleted_position} (the delete memory's newest position
 * of the key, or null). The guards are MERGE's of planning/merge.py for upsert mode without a
 * truncate floor, tombstones or unchanged values.
 */
public final class DirectDelta {
  private DirectDelta() {}

  /** One target's files, written by its task, committed by the driver. */
  static final class Written implements Serializable {
    String table;
    long base;
    List<DataFile> data = new ArrayList<>();
    List<DeleteFile> deletes = new ArrayList<>();
    List<DeleteFile> replaced = new ArrayList<>();
    List<String> referenced = new ArrayList<>();
    long found;
    long taskNanos;
  }

  /**
   * Apply {@code changes} to {@code tables} (Spark names), keyed by {@code key}: one job, then one
   * RowDelta a target carrying {@code summary}, {@code committers} targets at once. Returns, per
   * target in order: the CPU nanoseconds of its commit (its committing thread's), the wall
   * nanoseconds of its commit, its task's wall nanoseconds, the rows found; then a last row: the
   * wall nanoseconds of loading the targets, of the job, of the commits.
   */
  public static long[][] apply(SparkSession spark, List<String> tables, Dataset<Row> changes, String key,
                               Map<String, String> summary, int committers) throws Exception {
    long began = System.nanoTime();
    Map<String, Table> loaded = new LinkedHashMap<>();
    HashMap<String, Table> copies = new HashMap<>();
    HashMap<String, Long> bases = new HashMap<>();
    for (String name : tables) {
      Table table = Spark3Util.loadIcebergTable(spark, name);
      table.refresh();
      loaded.put(name, table);
      copies.put(name, SerializableTable.copyOf(table));
      bases.put(name, table.currentSnapshot() == null ? -1L : table.currentSnapshot().snapshotId());
    }
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    Broadcast<HashMap<String, Table>> shared = jsc.broadcast(copies);
    Broadcast<HashMap<String, Long>> sharedBases = jsc.broadcast(bases);
    long loadedAt = System.nanoTime();
    int parts = Math.max(1, Math.min(tables.size(), spark.sparkContext().defaultParallelism()));
    JavaRDD<InternalRow> rows = changes.queryExecution().toRdd().toJavaRDD();
    List<Written> written;
    if (tables.size() == 1) {  // one target: its rows in one task, with no shuffle
      String name = tables.get(0);
      written = rows.coalesce(1).mapPartitions(it -> {
        List<InternalRow> copied = new ArrayList<>();
        it.forEachRemaining(r -> copied.add(r.copy()));
        return List.of(write(shared.value().get(name), sharedBases.value().get(name), name, copied, key)).iterator();
      }).collect();
    } else {
      written = rows.mapToPair(r -> new Tuple2<>(r.getUTF8String(0).toString(), r.copy()))
          .groupByKey(new HashPartitioner(parts))
          .map(group -> write(shared.value().get(group._1()), sharedBases.value().get(group._1()), group._1(),
                              group._2(), key))
          .collect();
    }
    shared.destroy(false);
    sharedBases.destroy(false);
    long writtenAt = System.nanoTime();
    ThreadMXBean threads = ManagementFactory.getThreadMXBean();
    Map<String, long[]> out = new ConcurrentHashMap<>();
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, committers));
    try {
      List<Future<?>> done = new ArrayList<>();
      for (Written w : written) {
        done.add(pool.submit(() -> {
          long cpu = threads.getCurrentThreadCpuTime();
          long wall = System.nanoTime();
          commit(loaded.get(w.table), w, summary);
          out.put(w.table, new long[] {threads.getCurrentThreadCpuTime() - cpu, System.nanoTime() - wall,
                                       w.taskNanos, w.found});
        }));
      }
      for (Future<?> f : done) {
        f.get();
      }
    } finally {
      pool.shutdown();
    }
    long[][] result = new long[tables.size() + 1][];
    for (int i = 0; i < tables.size(); i++) {
      result[i] = out.getOrDefault(tables.get(i), new long[] {0L, 0L, 0L, 0L});
    }
    result[tables.size()] = new long[] {loadedAt - began, writtenAt - loadedAt, System.nanoTime() - writtenAt, 0L};
    return result;
  }

  static void commit(Table table, Written w, Map<String, String> summary) {
    if (w.data.isEmpty() && w.deletes.isEmpty()) {
      return;
    }
    RowDelta delta = table.newRowDelta();
    if (w.base >= 0) {
      delta.validateFromSnapshot(w.base);
    }
    delta.validateDataFilesExist(w.referenced).validateDeletedFiles()
        .validateNoConflictingDataFiles().validateNoConflictingDeleteFiles();
    w.data.forEach(delta::addRows);
    w.deletes.forEach(delta::addDeletes);
    w.replaced.forEach(delta::removeDeletes);
    summary.forEach(delta::set);
    delta.commit();
  }

  /** A current row of a key: its data file, position, and the position of its last change. */
  private record Found(String file, long pos, String position) {}

  static Written write(Table table, long base, String name, Iterable<InternalRow> rows, String key) {
    long started = System.nanoTime();
    Schema schema = table.schema();
    StructType sparkType = SparkSchemaUtil.convert(schema);
    int columns = schema.columns().size();
    int keyAt = 1 + indexOf(schema, key);
    int positionAt = 1 + indexOf(schema, "_cdc_position");
    DataType keyType = sparkType.fields()[keyAt - 1].dataType();
    Map<Object, InternalRow> byKey = new LinkedHashMap<>();
    for (InternalRow row : rows) {
      byKey.put(javaValue(row.get(keyAt, keyType)), row);
    }
    Written w = new Written();
    w.table = name;
    w.base = base;
    Map<String, PositionDeleteIndex> previous = new HashMap<>();
    Map<Object, Found> current = base < 0 ? Map.of() : find(table, base, key, byKey.keySet(), previous);
    w.found = current.size();
    TaskContext task = TaskContext.get();
    int partitionId = task == null ? 0 : task.partitionId();
    long taskId = task == null ? 0 : task.taskAttemptId();
    OutputFileFactory files = OutputFileFactory.builderFor(table, partitionId, taskId)
        .format(FileFormat.PARQUET).build();
    OutputFileFactory vectors = OutputFileFactory.builderFor(table, partitionId, taskId)
        .format(FileFormat.PUFFIN).suffix("dv").build();
    try {
      DataWriter<InternalRow> data = null;
      BaseDVFileWriter dv = new BaseDVFileWriter(vectors, previous::get);
      Set<String> referenced = new HashSet<>();
      for (Map.Entry<Object, InternalRow> e : byKey.entrySet()) {
        InternalRow row = e.getValue();
        String op = row.getUTF8String(columns + 1).toString();
        String position = row.isNullAt(positionAt) ? null : row.getUTF8String(positionAt).toString();
        Found held = current.get(e.getKey());
        boolean upsert = !"d".equals(op);
        boolean insert;
        if (held != null) {
          boolean newer = held.position() == null || (position != null && position.compareTo(held.position()) > 0);
          if (!newer) {
            continue;
          }
          dv.delete(held.file(), held.pos(), table.spec(), null);
          referenced.add(held.file());
          insert = upsert;
        } else {
          String deleted = row.isNullAt(columns + 2) ? null : row.getUTF8String(columns + 2).toString();
          insert = upsert && (deleted == null || (position != null && position.compareTo(deleted) > 0));
        }
        if (insert) {
          if (data == null) {
            data = Parquet.writeData(files.newOutputFile()).forTable(table).withSpec(table.spec())
                .createWriterFunc(msg -> SparkParquetWriters.buildWriter(sparkType, msg)).overwrite().build();
          }
          Object[] values = new Object[columns];
          for (int i = 0; i < columns; i++) {
            values[i] = row.get(i + 1, sparkType.fields()[i].dataType());
          }
          data.write(new GenericInternalRow(values));
        }
      }
      if (data != null) {
        data.close();
        w.data.add(data.toDataFile());
      }
      dv.close();
      DeleteWriteResult result = dv.result();
      w.deletes.addAll(result.deleteFiles());
      w.replaced.addAll(result.rewrittenDeleteFiles());
      w.referenced.addAll(referenced);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    w.taskNanos = System.nanoTime() - started;
    return w;
  }

  /** The current rows of {@code keys} as of snapshot {@code base}: the files the key filter keeps,
   * read for the key and the position only, their deletion vectors applied (kept in {@code previous}
   * for the new vectors to merge). */
  static Map<Object, Found> find(Table table, long base, String key, Set<Object> keys,
                                 Map<String, PositionDeleteIndex> previous) {
    Expression filter = Expressions.in(key, keys.toArray());
    Types.NestedField keyField = table.schema().findField(key);
    Types.NestedField positionField = table.schema().findField("_cdc_position");
    Schema projection = new Schema(keyField, positionField, MetadataColumns.ROW_POSITION);
    BaseDeleteLoader loader = new BaseDeleteLoader(f -> table.io().newInputFile(f.location(), f.fileSizeInBytes()));
    Map<Object, Found> found = new HashMap<>();
    try (CloseableIterable<FileScanTask> tasks = table.newScan().useSnapshot(base).filter(filter).planFiles()) {
      for (FileScanTask task : tasks) {
        DataFile file = task.file();
        PositionDeleteIndex deleted = task.deletes().isEmpty() ? PositionDeleteIndex.empty()
            : loader.loadPositionDeletes(task.deletes(), file.location());
        if (!task.deletes().isEmpty()) {
          previous.put(file.location(), deleted);
        }
        try (CloseableIterable<Record> records = Parquet.read(table.io().newInputFile(file.location(),
                file.fileSizeInBytes()))
            .project(projection).filter(filter)
            .createReaderFunc(fileSchema -> GenericParquetReaders.buildReader(projection, fileSchema)).build()) {
          for (Record r : records) {
            long pos = (Long) r.get(2);
            Object k = javaValue(r.get(0));
            if (!keys.contains(k) || deleted.isDeleted(pos)) {
              continue;
            }
            Object position = r.get(1);
            found.put(k, new Found(file.location(), pos, position == null ? null : position.toString()));
          }
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return found;
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

  private static Object javaValue(Object v) {
    return v instanceof UTF8String || v instanceof CharSequence ? v.toString() : v;
  }
}
