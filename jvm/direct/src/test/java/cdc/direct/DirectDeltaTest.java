package cdc.direct;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;

/** The direct path's decisions without Spark or a table: the last change per key (planning/dedupe.py's
 * rules in upsert mode) and the MERGE's guards (planning/merge.py) that {@link DirectDelta#write} applies. */
class DirectDeltaTest {
  // A row of the task's layout for a target (id bigint, v string, _cdc_position string,
  // _cdc_kafka_partition int, _cdc_kafka_offset bigint): the target's name, its columns, _op, _deleted_position.
  static final int[] KEY_AT = {1};
  static final DataType[] KEY_TYPES = {DataTypes.LongType};
  static final int POSITION_AT = 3;
  static final int PARTITION_AT = 4;
  static final int OFFSET_AT = 5;
  static final int OP_AT = 6;

  static InternalRow row(Long id, String v, String op, String position, Integer partition, long offset) {
    return new GenericInternalRow(new Object[] {UTF8String.fromString("t"), id, utf8(v), utf8(position), partition,
                                                offset, utf8(op), null});
  }

  static UTF8String utf8(String s) {
    return s == null ? null : UTF8String.fromString(s);
  }

  static Map<List<Object>, InternalRow> last(InternalRow... rows) {
    return DirectDelta.lastPerKey(new ArrayList<>(Arrays.asList(rows)), KEY_AT, KEY_TYPES, POSITION_AT, PARTITION_AT,
                                  OFFSET_AT, OP_AT);
  }

  /** Each key's last change as (value, op, position, offset). */
  static Map<Long, List<Object>> summary(Map<List<Object>, InternalRow> last) {
    Map<Long, List<Object>> out = new java.util.LinkedHashMap<>();
    last.forEach((k, r) -> out.put((Long) k.get(0), Arrays.asList(
        r.isNullAt(2) ? null : r.getUTF8String(2).toString(), r.getUTF8String(OP_AT).toString(),
        r.isNullAt(POSITION_AT) ? null : r.getUTF8String(POSITION_AT).toString(), r.getLong(OFFSET_AT))));
    return out;
  }

  @Nested
  class LastPerKey {
    @Test
    void theHighestPositionWinsWhateverTheOrder() {
      Map<Long, List<Object>> last = summary(last(
          row(1L, "b", "u", "0002", 0, 12), row(1L, "c", "u", "0003", 0, 10), row(1L, "a", "c", "0001", 0, 11),
          row(2L, "x", "c", "0005", 0, 13)));
      assertThat(last).containsExactly(
          Map.entry(1L, Arrays.asList("c", "u", "0003", 10L)), Map.entry(2L, Arrays.asList("x", "c", "0005", 13L)));
    }

    @Test
    void ofTwoAtOnePositionTheLaterInKafkaWins() {
      assertThat(summary(last(row(1L, "later", "u", "0007", 0, 21), row(1L, "earlier", "u", "0007", 0, 20))))
          .containsExactly(Map.entry(1L, Arrays.asList("later", "u", "0007", 21L)));
      assertThat(summary(last(row(1L, "earlier", "u", "0007", 0, 20), row(1L, "later", "u", "0007", 0, 21))))
          .containsExactly(Map.entry(1L, Arrays.asList("later", "u", "0007", 21L)));
    }

    @Test
    void positionsCompareAsStringsByteForByte() {  // the MERGE compares them as strings, padded by the decode
      assertThat(summary(last(row(1L, "nine", "u", "09", 0, 1), row(1L, "ten", "u", "10", 0, 2))).get(1L))
          .containsExactly("ten", "u", "10", 2L);
      assertThat(summary(last(row(1L, "nine", "u", "9", 0, 1), row(1L, "ten", "u", "10", 0, 2))).get(1L))
          .containsExactly("nine", "u", "9", 1L);
    }

    @Test
    void aDeleteIsALastChangeLikeAnother() {
      assertThat(summary(last(row(1L, "a", "c", "0001", 0, 1), row(1L, null, "d", "0002", 0, 2))).get(1L))
          .containsExactly(null, "d", "0002", 2L);
    }

    @Test
    void aRowWithoutAPositionOrWithANullKeyIsLeftOut() {
      assertThat(summary(last(row(1L, "a", "u", "0001", 0, 1), row(1L, "none", "u", null, 0, 9),
                              row(null, "nokey", "c", "0009", 0, 10))))
          .containsExactly(Map.entry(1L, Arrays.asList("a", "u", "0001", 1L)));
    }

    @Test
    void aLaterTombstoneInTheChangesPartitionMakesItADelete() {
      assertThat(summary(last(row(1L, "a", "u", "0005", 0, 10), row(1L, null, DirectDelta.TOMBSTONE, null, 0, 11)))
                     .get(1L))
          .containsExactly("a", "d", "0005", 10L);
    }

    @Test
    void aTombstoneEarlierOrInAnotherPartitionLeavesTheChange() {
      assertThat(summary(last(row(1L, null, DirectDelta.TOMBSTONE, null, 0, 9), row(1L, "a", "u", "0005", 0, 10)))
                     .get(1L))
          .containsExactly("a", "u", "0005", 10L);
      assertThat(summary(last(row(1L, "a", "u", "0005", 0, 10), row(1L, null, DirectDelta.TOMBSTONE, null, 1, 11)))
                     .get(1L))
          .containsExactly("a", "u", "0005", 10L);
    }

    @Test
    void aKeyWithOnlyTombstonesKeepsItsLatestAsALoneTombstoneAfterTheChanges() {
      Map<Long, List<Object>> last = summary(last(
          row(7L, null, DirectDelta.TOMBSTONE, null, 0, 30), row(7L, null, DirectDelta.TOMBSTONE, null, 0, 31),
          row(1L, "a", "c", "0001", 0, 5)));
      assertThat(last).containsExactly(Map.entry(1L, Arrays.asList("a", "c", "0001", 5L)),
                                       Map.entry(7L, Arrays.asList(null, DirectDelta.TOMBSTONE, null, 31L)));
    }

    @Test
    void theInputRowsAreNotChanged() {
      InternalRow change = row(1L, "a", "u", "0005", 0, 10);
      last(change, row(1L, null, DirectDelta.TOMBSTONE, null, 0, 11));
      assertThat(change.getUTF8String(OP_AT).toString()).isEqualTo("u");
    }
  }

  static DirectDelta.Change change(String op, String position, Integer partition, Long offset) {
    return new DirectDelta.Change(op, utf8(position), partition, offset);
  }

  static DirectDelta.Found held(String position, Integer partition, Long offset) {
    return new DirectDelta.Found("file.parquet", 0, utf8(position), partition, offset);
  }

  @Nested
  class Guards {
    @Test
    void anUpsertReplacesOnlyARowOfALowerPosition() {
      for (String op : List.of("c", "u", "r")) {
        assertThat(DirectDelta.removes(change(op, "0005", 0, 10L), held("0004", 0, 9L))).as(op).isTrue();
        assertThat(DirectDelta.removes(change(op, "0005", 0, 10L), held("0005", 0, 9L))).as(op).isFalse();
        assertThat(DirectDelta.removes(change(op, "0005", 0, 10L), held("0006", 0, 9L))).as(op).isFalse();
      }
    }

    @Test
    void aRowWithoutAPositionIsOlderThanAnyChangeAndAChangeWithoutOneNewerThanNoRow() {
      assertThat(DirectDelta.removes(change("u", "0001", 0, 1L), held(null, null, null))).isTrue();
      assertThat(DirectDelta.removes(change("u", null, 0, 1L), held(null, null, null))).isTrue();
      assertThat(DirectDelta.removes(change("u", null, 0, 1L), held("0001", 0, 0L))).isFalse();
      assertThat(DirectDelta.removes(change("d", null, 0, 1L), held("0001", 0, 0L))).isFalse();
    }

    @Test
    void aDeleteRemovesOnlyARowOfALowerPosition() {
      assertThat(DirectDelta.removes(change("d", "0005", 0, 10L), held("0004", 0, 9L))).isTrue();
      assertThat(DirectDelta.removes(change("d", "0005", 0, 10L), held("0005", 0, 9L))).isFalse();
      assertThat(DirectDelta.removes(change("d", "0004", 0, 10L), held("0005", 0, 9L))).isFalse();
    }

    @Test
    void aTombstoneRemovesARowWrittenEarlierInItsKafkaPartitionWhateverThePositions() {
      String t = DirectDelta.TOMBSTONE;
      assertThat(DirectDelta.removes(change(t, null, 2, 10L), held("9999", 2, 9L))).isTrue();
      assertThat(DirectDelta.removes(change(t, null, 2, 10L), held("0001", 2, 10L))).isFalse();
      assertThat(DirectDelta.removes(change(t, null, 2, 10L), held("0001", 2, 11L))).isFalse();
      assertThat(DirectDelta.removes(change(t, null, 2, 10L), held("0001", 1, 9L))).isFalse();
      assertThat(DirectDelta.removes(change(t, null, 2, 10L), held("0001", null, null))).isFalse();  // a row not from Kafka
      assertThat(DirectDelta.removes(change(t, null, null, null), held("0001", 2, 9L))).isFalse();
    }

    @Test
    void partitionsCompareByValueNotByBox() {
      String t = DirectDelta.TOMBSTONE;
      assertThat(DirectDelta.removes(new DirectDelta.Change(t, null, Integer.valueOf(1000), 10L),
                                     new DirectDelta.Found("f", 0, null, Integer.valueOf(1000), 9L))).isTrue();
    }

    @Test
    void anUnknownOpRemovesNothing() {
      assertThat(DirectDelta.removes(change("", "0009", 0, 10L), held("0001", 0, 1L))).isFalse();
      assertThat(DirectDelta.removes(change("x", "0009", 0, 10L), held(null, null, null))).isFalse();
      assertThat(change("d", "0009", 0, 10L).upsert()).isFalse();
      assertThat(change(DirectDelta.TOMBSTONE, null, 0, 10L).upsert()).isFalse();
    }

    @Test
    void anInsertMustBeNewerThanTheKeysRememberedDelete() {
      assertThat(DirectDelta.inserts(change("c", "0005", 0, 10L), null, null)).isTrue();
      assertThat(DirectDelta.inserts(change("c", "0005", 0, 10L), utf8("0004"), null)).isTrue();
      assertThat(DirectDelta.inserts(change("c", "0005", 0, 10L), utf8("0005"), null)).isFalse();
      assertThat(DirectDelta.inserts(change("c", "0005", 0, 10L), utf8("0006"), null)).isFalse();
      assertThat(DirectDelta.inserts(change("c", null, 0, 10L), utf8("0001"), null)).isFalse();
    }

    @Test
    void anInsertMustBeNewerThanTheLastTruncate() {
      assertThat(DirectDelta.inserts(change("u", "0005", 0, 10L), null, utf8("0004"))).isTrue();
      assertThat(DirectDelta.inserts(change("u", "0005", 0, 10L), null, utf8("0005"))).isFalse();
      assertThat(DirectDelta.inserts(change("u", "0003", 0, 10L), null, utf8("0004"))).isFalse();
      assertThat(DirectDelta.inserts(change("u", "0005", 0, 10L), utf8("0001"), utf8("0006"))).isFalse();
      assertThat(DirectDelta.inserts(change("r", null, 0, 10L), null, utf8("0001"))).isFalse();
    }
  }
}
