"""The Spark decoder follows the reference rules of decoding/envelope.py record for record."""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from cdc.decoding import envelope
from cdc.decoding.spark_decode import NOT_AN_ENVELOPE, TOMBSTONE, VALUE_DOES_NOT_FIT, decode
from cdc.errors import DecodeError
from cdc.sources.types import Column
from tests.events import Topic

KAFKA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                    StructField("topic", StringType()), StructField("partition", IntegerType()),
                    StructField("offset", LongType())])


def test_positions_and_ops_match_the_reference(spark):
    cols = (Column("id", "int", nullable=False), Column("v", "string"))
    t = Topic(partition=3)
    t.change("r", {"id": 1, "v": "snap"}, None, 500)
    t.change("u", {"id": 1, "v": "x"}, 600, 700)
    t.change("u", {"id": 2, "v": "y"}, 600, 700)  # shares the LSN above
    t.change("d", {"id": 1, "v": "x"}, 800, 810)
    t.tombstone({"id": 1})
    t.truncate(900, 910)
    records = t.take()
    got = decode(spark.createDataFrame(records, KAFKA), cols, ("id",)).orderBy("_offset").collect()
    for rec, row in zip(records, got):
        ref = envelope.decode(rec[0], rec[1], rec[3], rec[4], ("id",))
        assert row["_op"] == (TOMBSTONE if ref.is_tombstone else ref.op.value)
        assert row["_position"] == ref.position
        assert row["_error"] is None


def test_wire_values_become_target_types(spark):
    cols = (Column("id", "int", nullable=False), Column("d", "date"), Column("ts", "timestamp_us"),
            Column("ms", "timestamp_ms"), Column("tz", "timestamptz"), Column("b", "binary"),
            Column("n", "decimal", True, 12, 3))
    t = Topic()
    t.change("c", {"id": 1, "d": 19723, "ts": 1704067200123456, "ms": 1704067200123,
                   "tz": "2024-01-01T10:00:00.5Z", "b": "AAEC", "n": 1234.5}, 1, 2)
    row = decode(spark.createDataFrame(t.take(), KAFKA), cols, ("id",)).first()
    assert row["d"] == dt.date(2024, 1, 1)
    assert row["ts"] == dt.datetime(2024, 1, 1, 0, 0, 0, 123456)
    assert row["ms"] == dt.datetime(2024, 1, 1, 0, 0, 0, 123000)
    assert row["tz"].replace(tzinfo=None) == dt.datetime(2024, 1, 1, 10, 0, 0, 500000)
    assert bytes(row["b"]) == b"\x00\x01\x02"
    assert row["n"] == Decimal("1234.500")


def test_bad_records_are_flagged_not_dropped(spark):
    cols = (Column("id", "int", nullable=False), Column("v", "string"))
    t = Topic()
    t.raw(json.dumps({"schema": {}, "payload": {"id": 1}}).encode(), b"garbage")
    t.raw(None, json.dumps({"schema": {}, "payload": {"op": "c", "after": {"id": 1},
                                                      "source": {"lsn": 5}}}).encode())
    t.raw(json.dumps({"schema": {}, "payload": {"id": 1}}).encode(),
          json.dumps({"schema": {}, "payload": {"op": "c", "after": {"id": 1}, "source": {}}}).encode())
    key = json.dumps({"schema": {}, "payload": {"id": 1}}).encode()
    t.raw(key, json.dumps({"schema": {}, "payload": {"after": {"id": 1}, "source": {"lsn": 5}}}).encode())
    n = Column("n", "decimal", True, 5, 2)
    t2 = Topic()
    t2.raw(key, json.dumps({"schema": {}, "payload": {"op": "c", "after": {"id": 1, "n": "abc"},
                                                       "source": {"lsn": 5}}}).encode())
    errors = [r["_error"] for r in decode(spark.createDataFrame(t.take(), KAFKA), cols, ("id",))
              .orderBy("_offset").collect()]
    errors += [r["_error"] for r in decode(spark.createDataFrame(t2.take(), KAFKA), (cols[0], n), ("id",)).collect()]
    assert errors == [NOT_AN_ENVELOPE, "record has no key", "record has no source position", "unknown op null",
                      "value of column(s) n does not fit the column's type"]


def test_error_classes_tell_garbage_from_values_that_do_not_fit(spark):
    cols = (Column("id", "int", nullable=False), Column("i", "int"), Column("r", "string", nullable=False))
    key = json.dumps({"schema": {}, "payload": {"id": 1}}).encode()
    t = Topic()
    for after in ({"id": 1, "i": 3_000_000_000, "r": "x"}, {"id": 1, "i": "abc", "r": "x"},
                  {"id": 1, "i": 1, "r": None}, {"id": 1, "i": 1, "r": "ok"}):
        t.raw(key, json.dumps({"schema": {}, "payload": {"op": "c", "after": after, "source": {"lsn": 5}}}).encode())
    t.raw(key, b"\x00\x01")
    rows = decode(spark.createDataFrame(t.take(), KAFKA), cols, ("id",)).orderBy("_offset").collect()
    assert [(r["_error_class"], r["_error"]) for r in rows] == [
        ("value-does-not-fit", VALUE_DOES_NOT_FIT), ("value-does-not-fit", VALUE_DOES_NOT_FIT),
        ("value-does-not-fit", "no value for required column(s) r"), (None, None),
        ("not-an-envelope", NOT_AN_ENVELOPE)]


NON_DATA_MESSAGES = [
    ({"serverName": "src"}, {"ts_ms": 1700000000000}),  # heartbeat
    ({"id": "571:53195829"}, {"status": "BEGIN", "id": "571:53195829", "event_count": None, "ts_ms": 1}),
    ({"id": "571:53195829"}, {"status": "END", "id": "571:53195829", "event_count": 2,
                              "data_collections": [{"data_collection": "s.t", "event_count": 2}], "ts_ms": 1}),
    ({"databaseName": "db"}, {"source": {"lsn": 5}, "databaseName": "db", "ddl": "ALTER TABLE t ADD c int",
                              "tableChanges": [{"type": "ALTER", "id": "s.t"}]}),
]


def test_heartbeats_transaction_markers_and_schema_changes_are_ignored(spark):
    from cdc.decoding.spark_decode import NON_DATA

    t = Topic()
    for key, value in NON_DATA_MESSAGES:
        t.raw(json.dumps({"schema": {}, "payload": key}).encode(), json.dumps({"schema": {}, "payload": value}).encode())
    rows = decode(spark.createDataFrame(t.take(), KAFKA), (Column("id", "int", nullable=False),), ("id",)).collect()
    assert [(r["_op"], r["_error"]) for r in rows] == [(NON_DATA, None)] * len(NON_DATA_MESSAGES)


def test_mariadb_positions_and_durations_match_the_reference(spark):
    cols = (Column("id", "int", nullable=False), Column("t", "duration_us"), Column("b", "bits"))
    t = Topic()
    rows = [("r", "binlog.000009", 7920, 0, 47655123456), ("c", "binlog.000010", 4, 0, -45296000000),
            ("u", "binlog.000010", 900, 1, 3020399000000), ("u", "binlog.000010", 1000, 0, None)]
    for op, file, pos, row, micros in rows:
        t.raw(json.dumps({"schema": {}, "payload": {"id": pos}}).encode(), json.dumps({"schema": {}, "payload": {
            "op": op, "before": None, "after": {"id": pos, "t": micros, "b": "AQI="},
            "source": {"file": file, "pos": pos, "row": row, "ts_ms": 1_700_000_000_000}}}).encode())
    records = t.take()
    got = decode(spark.createDataFrame(records, KAFKA), cols, ("id",), "mariadb").orderBy("_offset").collect()
    for rec, row in zip(records, got):
        assert row["_position"] == envelope.decode(rec[0], rec[1], rec[3], rec[4], ("id",), "mariadb").position
        assert row["_error"] is None and bytes(row["b"]) == b"\x02\x01"  # most significant byte first
    assert [r["t"] for r in got] == ["13:14:15.123456", "-12:34:56.000000", "838:59:59.000000", None]
    assert sorted(got, key=lambda r: r["_position"]) == got  # file 9 < file 10; pos 900 < 1000 as numbers


def test_a_record_whose_key_and_row_disagree_is_bad(spark):
    """The Kafka key decides where a change goes: a row saying another key, or no key, is a
    dead letter, never applied under the Kafka key."""
    cols = (Column("id", "int", nullable=False), Column("v", "string"))
    key = json.dumps({"schema": {}, "payload": {"id": 3}}).encode()
    t = Topic()
    for op, row in (("c", {"id": 4, "v": "x"}), ("u", {"v": "no key"}), ("d", {"id": 5}), ("u", {"id": 3, "v": "ok"})):
        part = "before" if op == "d" else "after"
        t.raw(key, json.dumps({"schema": {}, "payload": {"op": op, part: row, "source": {"lsn": 5}}}).encode())
    records = t.take()
    rows = decode(spark.createDataFrame(records, KAFKA), cols, ("id",)).orderBy("_offset").collect()
    expected = "the record's Kafka key and its row disagree on key column(s) id"
    assert [(r["_error_class"], r["_error"]) for r in rows] == [("key-mismatch", expected)] * 3 + [(None, None)]
    for rec in records[:3]:  # the reference rules say the same
        try:
            envelope.decode(rec[0], rec[1], rec[3], rec[4], ("id",))
        except Exception as e:  # noqa: BLE001
            assert expected in str(e)
        else:
            raise AssertionError("the reference accepted a record whose key and row disagree")


def test_schema_part_is_found_whatever_the_spacing(spark):
    """The converter's compact form, Python's separators and any other spacing give one schema part."""
    from cdc.decoding.envelope import row_fields
    from cdc.decoding.spark_decode import schema_head

    message = {"schema": {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "payload", "type": "string"}]}]}, "payload": {"op": "c", "after": {"payload": ', "payload": x'}}}
    forms = [json.dumps(message, separators=(",", ":")), json.dumps(message), json.dumps(message, indent=2)]
    rows = [(None, f.encode(), "t", 0, i) for i, f in enumerate(forms)]
    heads = [r[0] for r in spark.createDataFrame(rows, KAFKA).orderBy("offset").select(schema_head()).collect()]
    assert [row_fields(h + "}") for h in heads] == [[{"field": "payload", "type": "string", "name": None,
                                                      "parameters": None}]] * 3


def test_a_record_starting_with_a_known_schema_part_gets_the_fingerprint_a_search_gives(spark):
    """Records matched by a known schema part, and those searched for their payload (Python's
    spacing, another schema, one naming a field `payload`, no schema, a tombstone) get one
    fingerprint per schema part; the batch's distinct schema parts are the same whatever is known."""
    from pyspark.sql import functions as F

    from cdc.decoding.spark_decode import schema_fingerprint, schema_head, schema_heads, value_schemas

    def message(fields, op="c"):
        return {"schema": {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
            {"field": f, "type": "string"} for f in fields]}]}, "payload": {"op": op, "after": {"id": 1}}}
    compact = lambda m: json.dumps(m, separators=(",", ":"))  # noqa: E731
    values = [compact(message(["id"])), compact(message(["id"], "u")), json.dumps(message(["id"])),
              compact(message(["id", "payload"])), '{"payload":{"op":"c"}}', None, compact(message(["id"], "d"))]
    rows = [(None, v.encode() if v else None, "t", 0, i) for i, v in enumerate(values)]
    batch = spark.createDataFrame(rows, KAFKA)
    searched = [r[0] for r in batch.orderBy("offset").select(schema_fingerprint()).collect()]
    assert searched[0] == searched[1] == searched[6] and searched[5] is None and len(set(searched) - {None}) == 4
    first = schema_heads(batch.orderBy("offset"))
    assert list(first) == [searched[0]]
    assert [r[0] for r in batch.orderBy("offset").select(schema_fingerprint(first)).collect()] == searched
    heads = {r[0] for r in batch.where(F.col("value").isNotNull()).select(schema_head()).collect()}
    expected = value_schemas(batch, {})
    assert [fp for fp, _ in expected] == [searched[i] for i in (2, 3, 4, 6)]  # by the last offset of each
    assert value_schemas(batch, first) == expected == value_schemas(batch)
    assert {head for _, head in expected} == heads


def test_a_record_starting_with_a_known_schema_part_decodes_as_when_read_whole(spark):
    """A record of a known schema part is parsed from where its payload begins, a byte offset
    whatever characters the part holds: each record decodes as when read whole, and records
    of another spacing, a value that does not fit and a tombstone are read whole as before."""
    from cdc.decoding.spark_decode import decoder, schema_heads

    cols = (Column("id", "int", nullable=False), Column("v", "string"))
    schema = {"type": "struct", "name": "ünïcödé.Envelope", "fields": [
        {"field": "after", "type": "struct", "fields": [{"field": "v", "type": "string", "doc": "naïve ✓"}]}]}
    compact = lambda payload: json.dumps({"schema": schema, "payload": payload},  # noqa: E731
                                         separators=(",", ":"), ensure_ascii=False).encode()
    t = Topic()
    t.change("c", {"id": 1, "v": "é"}, 100, 110)
    t.change("u", {"id": 1, "v": "x"}, 120, 130)
    t.change("c", {"id": 2, "v": "y"}, 140, 150)  # left in Python's spacing
    t.change("d", {"id": 1, "v": "x"}, 160, 170)
    t.tombstone({"id": 2})
    t.raw(b'{"schema":{},"payload":{"id":3}}', compact({"op": "c", "after": {"id": "three"}, "source": {"lsn": 5}}))
    records = [(k, compact(json.loads(v)["payload"]) if v is not None and i != 2 else v, *rest)
               for i, (k, v, *rest) in enumerate(t.take())]
    batch = spark.createDataFrame(records, KAFKA)
    heads = schema_heads(batch.orderBy("offset"))
    assert len(heads) == 1 and "ünïcödé" in next(iter(heads.values()))
    whole = decoder(cols, ("id",), headers=False)(batch).orderBy("_offset").collect()
    known = decoder(cols, ("id",), headers=False, heads=heads)(batch).orderBy("_offset").collect()
    assert known == whole
    assert [(r["_op"], r["id"], r["v"]) for r in whole[:5]] == [
        ("c", 1, "é"), ("u", 1, "x"), ("c", 2, "y"), ("d", 1, "x"), (TOMBSTONE, 2, None)]
    assert whole[5]["_error"] is not None


def test_a_value_up_to_the_record_limit_is_read_and_a_longer_one_named(spark):
    """A text value longer than the JSON reader's default (20,000,000 characters) decodes
    when the record limit allows it; a record over the limit is bad for its size, not as
    'not an envelope'."""
    from cdc.decoding.spark_decode import JACKSON_MAX_STRING, decoder

    cols = (Column("id", "int", nullable=False), Column("v", "string"))
    t = Topic()
    long_text = "ab" * ((JACKSON_MAX_STRING + 1_000) // 2)
    t.change("c", {"id": 1, "v": long_text}, 1, 2)
    records = t.take()
    limit = len(records[0][1]) + 100
    row = decoder(cols, ("id",), headers=False, max_value_bytes=limit)(spark.createDataFrame(records, KAFKA)).first()
    assert row["_error"] is None and row["v"] == long_text
    short = decoder(cols, ("id",), headers=False, max_value_bytes=JACKSON_MAX_STRING - 1)
    row = short(spark.createDataFrame(records, KAFKA)).first()
    assert row["_error_class"] == "record-too-large", row["_error"]
    assert f"bytes are over kafka.max_record_bytes ({JACKSON_MAX_STRING - 1})" in row["_error"]


def test_json_read_from_bytes_gives_spark_from_json_result(spark):
    """`from_json` of the decoding (read from the bytes by jvm/direct's JsonBytes) gives Spark's
    own `from_json` result for every kind of input: well-formed messages, values that do not
    fit, truncated or malformed JSON, bytes that are not UTF-8 (an encoded surrogate, an
    overlong form, a lone continuation byte), a byte order mark, leading spaces, NUL bytes, an
    empty value, arrays, and a message whose known schema part is cut off."""
    from pyspark.sql import functions as F

    from cdc.decoding.spark_decode import from_json

    ddl = "STRUCT<payload: STRUCT<op: STRING, n: BIGINT, d: DOUBLE, s: STRING, a: ARRAY<STRING>, " \
          "m: MAP<STRING, STRING>, x: STRUCT<y: DECIMAL(10,2)>>>"
    head = '{"schema":{"type":"struct","name":"é"}'
    values = [
        b'{"payload":{"op":"c","n":1,"d":1.5,"s":"\xc3\xa9\xe2\x9c\x93","a":["1","2"],"m":{"k":"v"},'
        b'"x":{"y":12.345}}}',
        (head + ',"payload":{"op":"u","n":9223372036854775807,"s":"\\u00e9\\ud83d\\ude00"}}').encode(),
        (head + ',"payload":{"op":"u","n":"not a number"}}').encode(),
        (head + ', "payload":{"op":"u","n":2}}').encode(),  # another spacing: read whole
        (head[:-3] + ',"payload":{"op":"u"}}').encode(),  # not the known part
        (head + ',"payload":{"op":"u","n":').encode(),  # cut short
        b'{"payload":{"op":"c","s":"\xed\xa0\x80"}}',  # an encoded surrogate
        b'{"payload":{"op":"c","s":"\xc0\xaf"}}',  # an overlong form
        b'{"payload":{"op":"c","s":"\x80"}}',  # a lone continuation byte
        b'{"payload":{"op":"c","s":"\xf4\x90\x80\x80"}}',  # past U+10FFFF
        b'\xef\xbb\xbf{"payload":{"op":"c"}}',  # a byte order mark
        b'  {"payload":{"op":"c"}}',
        b'{\x00"payload":{"op":"c"}}',
        b'{"payload":{"op":"c","s":"a\x00b"}}',
        b'{"payload":{"op":"c","s":"tab\there"}}',
        b'{"payload":{"op":"c"}} trailing',
        b'[{"payload":{"op":"c"}}]',
        b'{"payload":null}',
        b'{}', b'', b'null', b'garbage', None,
    ]
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i INT, value BINARY")
    options = {"maxStringLen": "20000000"}
    got = df.select("i", from_json(F.col("value"), ddl, options, (head,)).alias("j")).orderBy("i").collect()
    spark_payload = F.when(F.col("value").cast("string").startswith(head + ',"payload":'),
                           F.from_json(F.expr(f"concat(X'7B', substr(value, {len(head.encode()) + 2}))")
                                       .cast("string"), ddl, options)) \
        .otherwise(F.from_json(F.col("value").cast("string"), ddl, options))
    want = df.select("i", spark_payload.alias("j")).orderBy("i").collect()
    assert got == want
    assert got[1]["j"]["payload"]["n"] == 2 ** 63 - 1 and got[2]["j"]["payload"] is None
    arrays = spark.createDataFrame([('["1","2"]',), ("[]",), ("[1, {}]",), ("x",), (None,)], "s STRING")
    assert arrays.select(from_json(F.col("s"), "ARRAY<STRING>")).collect() == \
        arrays.select(F.from_json(F.col("s"), "ARRAY<STRING>")).collect()


def test_a_key_with_a_null_part_is_set_aside_as_what_it_is(spark):
    """A `key:` column that allows NULL (refused at registration; a table keyed so before)
    gives records whose key has a NULL part: `null-key-part`, naming the column, as the
    reference says; a record with no key at all stays `missing-key`."""
    cols = (Column("a", "int"), Column("b", "string"), Column("v", "string"))
    t = Topic(key_columns=("a", "b"))
    t.change("r", {"a": None, "b": "y", "v": "1"}, None, 500)
    t.change("r", {"a": 2, "b": None, "v": "2"}, None, 510)
    t.change("c", {"a": None, "b": None, "v": "3"}, 600, 610)
    t.change("d", {"a": 2, "b": None, "v": "2"}, 700, 710)
    t.tombstone({"a": 2, "b": None})
    value = t.change("c", {"a": 1, "b": "x", "v": "ok"}, 800, 810)[1]
    t.records.pop()
    t.raw(None, value)  # a change without a key
    t.raw(json.dumps({"schema": {}, "payload": {"id": 1}}).encode(), value)  # keyed by other columns
    records = t.take()
    got = decode(spark.createDataFrame(records, KAFKA), cols, ("a", "b")).orderBy("_offset").collect()
    assert [(r["_error_class"], r["_error"]) for r in got] == [
        ("null-key-part", "key column a is NULL"), ("null-key-part", "key column b is NULL"),
        ("null-key-part", "key columns a, b are NULL"), ("null-key-part", "key column b is NULL"),
        ("null-key-part", "key column b is NULL"), ("missing-key", "record has no key"),
        ("missing-key", "record has no key")]
    for rec, row in zip(records, got):  # the reference tells the same apart
        try:
            envelope.decode(rec[0], rec[1], rec[3], rec[4], ("a", "b"))
        except DecodeError as e:
            assert ("NULL" in str(e)) == (row["_error_class"] == "null-key-part"), (str(e), row["_error_class"])
        else:
            raise AssertionError(f"offset {rec[4]} decoded")
