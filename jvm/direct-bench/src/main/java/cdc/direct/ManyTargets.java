package cdc.direct;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.Table;
import org.apache.spark.HashPartitioner;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;

import scala.Tuple2;

/**
 * The direct path's prototype as bench/direct.py measures it: the last change per key of many
 * upsert-mode targets applied in one Spark job, a task a target writing as {@link DirectDelta}'s
 * task does, without the delete memory (a change's remembered delete arrives in its row), then one
 * RowDelta a target. Not in cdc-direct.jar: jvm/direct-bench builds it into
 * {@code bench/cdc-direct-bench.jar}, which only the benchmark and its test put on the driver's
 * class path (in package {@code cdc.direct}, beside the classes it writes with).
 */
public final class ManyTargets {
  private ManyTargets() {}

  /**
   * Apply {@code changes} to {@code tables} (Spark names), keyed by {@code key}: one job, then one
   * RowDelta a target carrying {@code summary}, {@code committers} targets at once. Input: column 0
   * the target's name, then the target's columns in its schema's order, then {@code _op} and
   * {@code _deleted_position}. Returns, per target in order: the CPU nanoseconds of its commit (its
   * committing thread's), the wall nanoseconds of its commit, its task's wall nanoseconds, the rows
   * found; then a last row: the wall nanoseconds of loading the targets, of the job, of the commits.
   */
  public static long[][] apply(SparkSession spark, List<String> tables, Dataset<Row> changes, String key,
                               Map<String, String> summary, int committers) throws Exception {
    List<String> keys = List.of(key);
    long began = System.nanoTime();
    Map<String, Table> loaded = new LinkedHashMap<>();
    HashMap<String, Table> copies = new HashMap<>();
    HashMap<String, Long> bases = new HashMap<>();
    for (String name : tables) {
      Table table = DirectDelta.loaded(spark, name);
      loaded.put(name, table);
      copies.put(name, SerializableTable.copyOf(table));
      bases.put(name, DirectDelta.snapshotOf(table));
    }
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    Broadcast<HashMap<String, Table>> shared = jsc.broadcast(copies);
    Broadcast<HashMap<String, Long>> sharedBases = jsc.broadcast(bases);
    long loadedAt = System.nanoTime();
    int parts = Math.max(1, Math.min(tables.size(), spark.sparkContext().defaultParallelism()));
    JavaRDD<InternalRow> rows = changes.queryExecution().toRdd().toJavaRDD();
    List<DirectDelta.Written> written;
    if (tables.size() == 1) {  // one target: its rows in one task, with no shuffle
      String name = tables.get(0);
      written = rows.coalesce(1).mapPartitions(it -> {
        List<InternalRow> copied = new ArrayList<>();
        it.forEachRemaining(r -> copied.add(r.copy()));
        return List.of(DirectDelta.write(shared.value().get(name), sharedBases.value().get(name), name, copied,
                                         keys, null)).iterator();
      }).collect();
    } else {
      written = rows.mapToPair(r -> new Tuple2<>(r.getUTF8String(0).toString(), r.copy()))
          .groupByKey(new HashPartitioner(parts))
          .map(group -> DirectDelta.write(shared.value().get(group._1()), sharedBases.value().get(group._1()),
                                          group._1(), group._2(), keys, null))
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
      for (DirectDelta.Written w : written) {
        done.add(pool.submit(() -> {
          long cpu = threads.getCurrentThreadCpuTime();
          long wall = System.nanoTime();
          DirectDelta.commit(loaded.get(w.table), w, summary);
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
}
