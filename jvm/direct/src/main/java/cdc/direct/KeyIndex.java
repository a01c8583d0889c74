package cdc.direct;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.SnapshotChanges;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.BaseDeleteLoader;
import org.apache.iceberg.deletes.PositionDeleteIndex;
import org.apache.iceberg.expressions.Expression;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.spark.data.vectorized.VectorizedSparkParquetReaders;
import org.apache.iceberg.util.ContentFileUtil;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Where the direct path finds a key's current row without planning a scan or reading the table:
 * kept in the JVM that runs the batch task, for each table its live data files and their deletion
 * vectors as of a snapshot, and for each data file read once its rows' keys (and the few columns
 * a lookup reads) by key. Data files and deletion vectors never change once written, so a file's
 * rows stay right for as long as the file lives; the live files are moved to a later snapshot by
 * reading only the manifests of the snapshots in between, and built again from the table (one
 * scan's planning) when the snapshot asked for does not follow the one held: after a restart, a
 * rollback, or more than {@link #MAX_STEPS} commits by others. A table with delete files other than
 * deletion vectors is not indexed (the caller plans its scan as before).
 */
public final class KeyIndex {
  private KeyIndex() {}

  static final int MAX_STEPS = 64;  // snapshots read one by one before building anew
  static final int KEPT_TABLES = 1024;  // tables whose live files are held
  static final long ROW_BYTES = 330;  // a row held, by its objects' sizes (a long key, a position of 57 characters)
  static final long KEPT_ROWS = Runtime.getRuntime().maxMemory() / 12 / ROW_BYTES;  // rows held over all files
  static final long FILE_ROWS = KEPT_ROWS / 4;  // a larger file is read each time, not held
  static final int KEPT_VECTORS = 4096;

  /** Files read for their rows (a file read again after it was let go counts again). */
  static final AtomicLong READS = new AtomicLong();
  /** Live files built from a whole scan's planning rather than moved snapshot by snapshot. */
  static final AtomicLong BUILDS = new AtomicLong();
  /** Snapshots whose manifests were read to move live files (not this process's own commits). */
  static final AtomicLong STEPS = new AtomicLong();

  /** The data files read for their rows, the live files built from a scan's planning and the
   * snapshots read to move them, so far. */
  public static long[] counts() {
    return new long[] {READS.get(), BUILDS.get(), STEPS.get()};
  }

  /** A live data file and its deletion vector (null for none). */
  record Live(DataFile file, DeleteFile vector) {}

  /** One table's live files as of {@code snapshot}, by location. */
  private static final class Files {
    long snapshot = -1;
    Map<String, Live> live;  // null: not built, or the table holds deletes the index does not take
    boolean refused;  // as of snapshot: it does
    Set<Integer> keyIds = Set.of();  // the columns whose stats each file is held with
  }

  /** One file's rows for one projection: the rows (a copy each) by position, positions by key. */
  record Rows(InternalRow[] rows, Map<List<Object>, int[]> byKey) {
    /** {@code rows}, in the file's order, their key the first {@code keyCount} columns. */
    static Rows of(List<InternalRow> rows, int keyCount, DataType[] keyTypes) {
      Map<List<Object>, int[]> byKey = new HashMap<>();
      int[] keyAt = java.util.stream.IntStream.range(0, keyCount).toArray();
      for (int pos = 0; pos < rows.size(); pos++) {
        List<Object> k = DirectDelta.keyOf(rows.get(pos), keyAt, keyTypes);
        if (k != null) {
          int[] at = byKey.get(k);
          int[] more = at == null ? new int[1] : java.util.Arrays.copyOf(at, at.length + 1);
          more[more.length - 1] = pos;
          byKey.put(k, more);
        }
      }
      return new Rows(rows.toArray(new InternalRow[0]), byKey);
    }
  }

  private static final Map<String, Files> TABLES = lru(KEPT_TABLES);
  private static final Map<String, PositionDeleteIndex> VECTORS = lru(KEPT_VECTORS);
  private static final Map<String, Rows> ROWS = new LinkedHashMap<>(16, 0.75f, true);
  private static long rowsKept;

  private static <V> Map<String, V> lru(int most) {
    return new LinkedHashMap<>(16, 0.75f, true) {
      @Override
      protected boolean removeEldestEntry(Map.Entry<String, V> eldest) {
        return size() > most;
      }
    };
  }

  /**
   * Table {@code table}'s live data files as of {@code snapshot} that {@code filter}'s metrics may
   * keep, each with its deletion vector; null when the table holds delete files other than deletion
   * vectors. Each file is held with the stats of the columns {@code keyIds} only (the filter's).
   */
  static List<Live> files(Table table, long snapshot, Expression filter, Set<Integer> keyIds) {
    Files held;
    synchronized (TABLES) {
      held = TABLES.computeIfAbsent(idOf(table), t -> new Files());
    }
    Map<String, Live> live;
    synchronized (held) {
      held.keyIds = keyIds;
      if (held.snapshot != snapshot || held.live == null && !held.refused) {
        held.live = held.live == null || held.snapshot < 0 ? null
            : moved(table, held.live, held.snapshot, snapshot, keyIds);
        if (held.live == null) {
          held.live = built(table, snapshot, keyIds);
        }
        held.snapshot = snapshot;
        held.refused = held.live == null;
      }
      live = held.live;
      if (live == null) {
        return null;
      }
      org.apache.iceberg.expressions.InclusiveMetricsEvaluator metrics =
          new org.apache.iceberg.expressions.InclusiveMetricsEvaluator(table.schema(), filter);
      List<Live> kept = new ArrayList<>();
      for (Live l : live.values()) {
        if (metrics.eval(l.file())) {
          kept.add(l);
        }
      }
      return kept;
    }
  }

  /** {@code live} (as of snapshot {@code from}) moved to snapshot {@code to} through the manifests of
   * the snapshots between; null when {@code to} does not follow {@code from} within {@link #MAX_STEPS}
   * or a snapshot between adds deletes other than deletion vectors. */
  private static Map<String, Live> moved(Table table, Map<String, Live> live, long from, long to,
                                         Set<Integer> keyIds) {
    List<Snapshot> steps = new ArrayList<>();
    Snapshot s = table.snapshot(to);
    while (s != null && s.snapshotId() != from && steps.size() < MAX_STEPS) {
      steps.add(s);
      s = s.parentId() == null ? null : table.snapshot(s.parentId());
    }
    if (s == null || s.snapshotId() != from) {
      return null;
    }
    Map<String, Live> next = new HashMap<>(live);
    for (int i = steps.size() - 1; i >= 0; i--) {
      STEPS.incrementAndGet();
      SnapshotChanges step = SnapshotChanges.builderFor(table).snapshot(steps.get(i)).build();
      if (!changed(next, step.removedDataFiles(), step.removedDeleteFiles(), step.addedDataFiles(),
                   step.addedDeleteFiles(), keyIds)) {
        return null;
      }
    }
    return next;
  }

  /** {@code live} changed by one snapshot's files; false when it adds deletes other than deletion
   * vectors. */
  private static boolean changed(Map<String, Live> live, Iterable<DataFile> removedData,
                                 Iterable<DeleteFile> removedDeletes, Iterable<DataFile> addedData,
                                 Iterable<DeleteFile> addedDeletes, Set<Integer> keyIds) {
    for (DataFile f : removedData) {
      live.remove(f.location());
    }
    for (DeleteFile d : removedDeletes) {
      Live l = ContentFileUtil.isDV(d) ? live.get(d.referencedDataFile()) : null;
      if (l != null && l.vector() != null && ContentFileUtil.dvDesc(l.vector()).equals(ContentFileUtil.dvDesc(d))) {
        live.put(l.file().location(), new Live(l.file(), null));
      }
    }
    for (DataFile f : addedData) {
      live.put(f.location(), new Live(f.copyWithStats(keyIds), null));
    }
    for (DeleteFile d : addedDeletes) {
      if (!ContentFileUtil.isDV(d)) {
        return false;
      }
      Live l = live.get(d.referencedDataFile());
      if (l != null) {
        live.put(l.file().location(), new Live(l.file(), d));
      }
    }
    return true;
  }

  /**
   * After this process's commit to {@code table} of data files {@code data} and deletion vectors
   * {@code added}, which replace {@code removed}: the live files, when held as of the new snapshot's
   * parent (no other commit came between), moved to it without reading its manifests.
   */
  static void committed(Table table, List<DataFile> data, List<DeleteFile> added, List<DeleteFile> removed) {
    Files held;
    synchronized (TABLES) {
      held = TABLES.get(idOf(table));
    }
    Snapshot now = held == null ? null : table.currentSnapshot();
    if (now == null) {
      return;
    }
    synchronized (held) {
      if (held.live == null || held.snapshot != (now.parentId() == null ? -1 : now.parentId())) {
        return;
      }
      Map<String, Live> next = new HashMap<>(held.live);
      if (changed(next, List.of(), removed, data, added, held.keyIds)) {
        held.live = next;
        held.snapshot = now.snapshotId();
      }
    }
  }

  /**
   * Data file {@code file}, just written with {@code rows} (of {@code projection}: the key's
   * {@code keyCount} columns first, the row's position last, in the order written), held as if read.
   */
  static void wrote(DataFile file, Schema projection, int keyCount, DataType[] keyTypes, List<InternalRow> rows) {
    if (rows.size() > FILE_ROWS) {
      return;
    }
    held(file.location() + " " + projection.asStruct(), Rows.of(rows, keyCount, keyTypes));
  }

  private static String idOf(Table table) {
    return table.uuid() + " " + table.location();
  }

  /** Table {@code table}'s live files as of {@code snapshot}, from a scan's planning; null when one
   * has deletes other than a deletion vector. */
  private static Map<String, Live> built(Table table, long snapshot, Set<Integer> keyIds) {
    Map<String, Live> live = new HashMap<>();
    if (snapshot < 0) {  // an empty table
      return live;
    }
    BUILDS.incrementAndGet();
    try (CloseableIterable<FileScanTask> tasks = table.newScan().useSnapshot(snapshot).includeColumnStats()
        .planFiles()) {
      for (FileScanTask task : tasks) {
        List<DeleteFile> deletes = task.deletes();
        if (deletes.size() > 1 || deletes.size() == 1 && !ContentFileUtil.isDV(deletes.get(0))) {
          return null;
        }
        live.put(task.file().location(),
                 new Live(task.file().copyWithStats(keyIds), deletes.isEmpty() ? null : deletes.get(0)));
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return live;
  }

  /** The rows deletion vector {@code vector} removes from data file {@code file}, each vector read
   * once. */
  static PositionDeleteIndex deleted(Table table, Live live) {
    if (live.vector() == null) {
      return PositionDeleteIndex.empty();
    }
    String id = ContentFileUtil.dvDesc(live.vector());
    synchronized (VECTORS) {
      PositionDeleteIndex held = VECTORS.get(id);
      if (held != null) {
        return held;
      }
    }
    PositionDeleteIndex read = new BaseDeleteLoader(f -> table.io().newInputFile(f.location(), f.fileSizeInBytes()))
        .loadPositionDeletes(List.of(live.vector()), live.file().location());
    synchronized (VECTORS) {
      VECTORS.put(id, read);
    }
    return read;
  }

  /**
   * Data file {@code file}'s rows read for {@code projection} (its first {@code keyCount} columns a
   * key of {@code keyTypes}, its last the row's position), by key; read once and held while rows
   * are kept, or null for a file over {@link #FILE_ROWS} rows (its caller reads it each time).
   */
  static Rows rows(Table table, DataFile file, Schema projection, int keyCount, DataType[] keyTypes) {
    if (file.recordCount() > FILE_ROWS) {
      return null;
    }
    String id = file.location() + " " + projection.asStruct();
    synchronized (ROWS) {
      Rows held = ROWS.get(id);
      if (held != null) {
        return held;
      }
    }
    READS.incrementAndGet();
    List<InternalRow> read = new ArrayList<>((int) file.recordCount());
    int posAt = projection.columns().size() - 1;
    try (CloseableIterable<ColumnarBatch> batches = Parquet.read(table.io().newInputFile(file.location(),
            file.fileSizeInBytes()))
        .project(projection).recordsPerBatch(DirectDelta.READ_BATCH_ROWS)
        .createBatchedReaderFunc(fileSchema -> VectorizedSparkParquetReaders.buildReader(projection, fileSchema,
                                                                                       Map.of()))
        .build()) {
      for (ColumnarBatch batch : batches) {
        for (Iterator<InternalRow> it = batch.rowIterator(); it.hasNext(); ) {
          InternalRow r = it.next().copy();
          if (r.getLong(posAt) != read.size()) {
            throw new IllegalStateException("rows of " + file.location() + " read out of order");
          }
          read.add(r);
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    Rows rows = Rows.of(read, keyCount, keyTypes);
    held(id, rows);
    return rows;
  }

  /** {@code rows} held as {@code id}'s, the least recently used let go while more than
   * {@link #KEPT_ROWS} are held. */
  private static void held(String id, Rows rows) {
    synchronized (ROWS) {
      if (ROWS.putIfAbsent(id, rows) == null) {
        rowsKept += rows.rows().length;
      }
      for (Iterator<Rows> it = ROWS.values().iterator(); rowsKept > KEPT_ROWS && it.hasNext(); ) {
        rowsKept -= it.next().rows().length;
        it.remove();
      }
    }
  }
}
