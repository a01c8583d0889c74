package cdc.direct;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DataFiles;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileMetadata;
import org.apache.iceberg.Metrics;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.expressions.Expression;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.hadoop.HadoopTables;
import org.apache.iceberg.types.Conversions;
import org.apache.iceberg.types.Types;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The key index's live files of a table (files by their key bounds, moved snapshot by snapshot,
 * built anew when a snapshot does not follow) and its rows of a file by key. The tables are Hadoop
 * tables in a temporary directory whose data and delete files are metadata only: nothing reads them. */
class KeyIndexTest {
  static final Schema SCHEMA = new Schema(Types.NestedField.required(1, "id", Types.LongType.get()),
                                          Types.NestedField.optional(2, "_cdc_position", Types.StringType.get()));
  static final Set<Integer> KEY_IDS = Set.of(1);
  static final DataType[] KEY_TYPES = {DataTypes.LongType};

  @TempDir
  Path dir;

  Table table(String name, int formatVersion) {
    return new HadoopTables(new Configuration()).create(SCHEMA, PartitionSpec.unpartitioned(),
        Map.of("format-version", Integer.toString(formatVersion)), dir.resolve(name).toString());
  }

  static DataFile data(String name, long low, long high) {
    ByteBuffer lower = Conversions.toByteBuffer(Types.LongType.get(), low);
    ByteBuffer upper = Conversions.toByteBuffer(Types.LongType.get(), high);
    return DataFiles.builder(PartitionSpec.unpartitioned()).withPath("/data/" + name + ".parquet")
        .withFormat(FileFormat.PARQUET).withFileSizeInBytes(100).withRecordCount(high - low + 1)
        .withMetrics(new Metrics(high - low + 1, null, null, null, null, Map.of(1, lower), Map.of(1, upper)))
        .build();
  }

  static DeleteFile vector(DataFile of, long offset) {
    return FileMetadata.deleteFileBuilder(PartitionSpec.unpartitioned()).ofPositionDeletes()
        .withFormat(FileFormat.PUFFIN).withPath("/data/" + offset + "-deletes.puffin").withFileSizeInBytes(200)
        .withRecordCount(1).withReferencedDataFile(of.location()).withContentOffset(offset).withContentSizeInBytes(40)
        .build();
  }

  static long snapshot(Table t) {
    t.refresh();
    return t.currentSnapshot().snapshotId();
  }

  /** The live files {@code filter} keeps as of {@code snapshot}: each file's name (with its vector's offset). */
  static Map<String, Long> files(Table t, long snapshot, Expression filter) {
    List<KeyIndex.Live> live = KeyIndex.files(t, snapshot, filter, KEY_IDS);
    if (live == null) {
      return null;
    }
    Map<String, Long> out = new TreeMap<>();
    for (KeyIndex.Live l : live) {
      String name = l.file().location().replace("/data/", "").replace(".parquet", "");
      out.put(name, l.vector() == null ? -1L : l.vector().contentOffset());
    }
    return out;
  }

  static long[] counts() {
    return KeyIndex.counts();  // reads, builds, steps
  }

  @Test
  void aFileIsKeptOnlyWhenItsKeyBoundsMayHoldTheKeys() {
    Table t = table("bounds", 3);
    t.newAppend().appendFile(data("low", 1, 10)).appendFile(data("high", 20, 30)).commit();
    long s = snapshot(t);
    long[] before = counts();
    assertThat(files(t, s, Expressions.in("id", 5L))).containsOnlyKeys("low");
    assertThat(files(t, s, Expressions.in("id", 25L, 26L))).containsOnlyKeys("high");
    assertThat(files(t, s, Expressions.in("id", 15L))).isEmpty();
    assertThat(files(t, s, Expressions.alwaysTrue())).containsOnlyKeys("low", "high");
    assertThat(counts()[1] - before[1]).as("built once for its snapshot").isEqualTo(1);
  }

  @Test
  void anotherWritersSnapshotsAreFollowedThroughTheirManifests() {
    Table t = table("follow", 3);
    DataFile low = data("low", 1, 10);
    t.newAppend().appendFile(low).appendFile(data("high", 20, 30)).commit();
    files(t, snapshot(t), Expressions.alwaysTrue());
    long[] before = counts();
    t.newAppend().appendFile(data("more", 1, 3)).commit();
    DeleteFile first = vector(low, 4);
    t.newRowDelta().addDeletes(first).commit();
    assertThat(files(t, snapshot(t), Expressions.alwaysTrue())).containsExactlyInAnyOrderEntriesOf(
        Map.of("low", 4L, "high", -1L, "more", -1L));
    DeleteFile second = vector(low, 100);  // the vector merged with the first, which it replaces
    t.newRowDelta().validateFromSnapshot(snapshot(t)).addDeletes(second).removeDeletes(first).commit();
    t.newDelete().deleteFile(data("high", 20, 30)).commit();
    assertThat(files(t, snapshot(t), Expressions.alwaysTrue())).containsExactlyInAnyOrderEntriesOf(
        Map.of("low", 100L, "more", -1L));
    long[] after = counts();
    assertThat(after[1] - before[1]).as("built again").isZero();
    assertThat(after[2] - before[2]).as("snapshots read").isEqualTo(4);
  }

  @Test
  void aRemovedVectorLeavesItsFileWhole() {
    Table t = table("removed", 3);
    DataFile low = data("low", 1, 10);
    DeleteFile dv = vector(low, 4);
    t.newRowDelta().addRows(low).addDeletes(dv).commit();
    assertThat(files(t, snapshot(t), Expressions.alwaysTrue())).containsEntry("low", 4L);
    t.newRowDelta().removeDeletes(dv).commit();
    assertThat(files(t, snapshot(t), Expressions.alwaysTrue())).containsEntry("low", -1L);
  }

  @Test
  void aSnapshotThatDoesNotFollowIsBuiltAnew() {
    Table t = table("rollback", 3);
    t.newAppend().appendFile(data("first", 1, 10)).commit();
    long first = snapshot(t);
    t.newAppend().appendFile(data("second", 11, 20)).commit();
    long second = snapshot(t);
    files(t, second, Expressions.alwaysTrue());
    long[] before = counts();
    assertThat(files(t, first, Expressions.alwaysTrue())).containsOnlyKeys("first");
    assertThat(counts()[1] - before[1]).isEqualTo(1);
  }

  @Test
  void thisProcesssOwnCommitMovesTheFilesWithoutReadingItsManifests() {
    Table t = table("own", 3);
    DataFile low = data("low", 1, 10);
    t.newAppend().appendFile(low).commit();
    files(t, snapshot(t), Expressions.alwaysTrue());
    DataFile added = data("added", 11, 12);
    DeleteFile dv = vector(low, 8);
    t.newRowDelta().addRows(added).addDeletes(dv).commit();
    t.refresh();
    KeyIndex.committed(t, List.of(added), List.of(dv), List.of());
    long[] before = counts();
    assertThat(files(t, snapshot(t), Expressions.alwaysTrue())).containsExactlyInAnyOrderEntriesOf(
        Map.of("low", 8L, "added", -1L));
    assertThat(counts()[2] - before[2]).as("snapshots read").isZero();
    assertThat(counts()[1] - before[1]).as("built again").isZero();
  }

  @Test
  void aTableWithDeleteFilesOtherThanVectorsIsNotIndexed() {
    Table t = table("positions", 2);
    DataFile low = data("low", 1, 10);
    DeleteFile positions = FileMetadata.deleteFileBuilder(PartitionSpec.unpartitioned()).ofPositionDeletes()
        .withFormat(FileFormat.PARQUET).withPath("/data/positions.parquet").withFileSizeInBytes(10).withRecordCount(1)
        .build();
    t.newRowDelta().addRows(low).addDeletes(positions).commit();
    assertThat(files(t, snapshot(t), Expressions.alwaysTrue())).isNull();

    Table later = table("positions-later", 2);
    later.newAppend().appendFile(low).commit();
    assertThat(files(later, snapshot(later), Expressions.alwaysTrue())).containsOnlyKeys("low");
    later.newRowDelta().addDeletes(positions).commit();
    assertThat(files(later, snapshot(later), Expressions.alwaysTrue())).isNull();
  }

  static InternalRow row(Long id, String position, long pos) {
    return new GenericInternalRow(new Object[] {id, position == null ? null : UTF8String.fromString(position), pos});
  }

  @Test
  void aFilesRowsAreFoundByKeyWithEveryPositionOfARepeatedKey() {
    List<InternalRow> rows = List.of(row(7L, "a", 0), row(8L, "b", 1), row(null, "c", 2), row(7L, "d", 3));
    KeyIndex.Rows byKey = KeyIndex.Rows.of(rows, 1, KEY_TYPES);
    assertThat(byKey.rows()).hasSize(4);
    assertThat(byKey.byKey()).containsOnlyKeys(List.of(7L), List.of(8L));
    assertThat(byKey.byKey().get(List.of(7L))).containsExactly(0, 3);
    assertThat(byKey.byKey().get(List.of(8L))).containsExactly(1);
  }

  @Test
  void aFileJustWrittenIsHeldAsIfRead() {
    DataFile file = data("written-" + System.nanoTime(), 1, 2);
    Schema projection = DirectDelta.projectionOf(Arrays.asList(SCHEMA.findField("id"), SCHEMA.findField("_cdc_position")));
    KeyIndex.wrote(file, projection, 1, KEY_TYPES, List.of(row(1L, "p1", 0), row(2L, "p2", 1)));
    long reads = counts()[0];
    KeyIndex.Rows held = KeyIndex.rows(null, file, projection, 1, KEY_TYPES);  // no table: nothing to read
    assertThat(held.byKey().get(List.of(2L))).containsExactly(1);
    assertThat(held.rows()[1].getUTF8String(1).toString()).isEqualTo("p2");
    assertThat(counts()[0]).as("files read").isEqualTo(reads);
  }
}
