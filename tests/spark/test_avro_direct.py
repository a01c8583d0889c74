"""An Avro record's struct built straight into the decoded key and payload gives the rows
its JSON envelope gives, value for value, bad records included; a writer schema with a
field the JSON reader would read otherwise (a double into a FLOAT) keeps the envelope."""
from __future__ import annotations

import io
import json
import struct

import fastavro
from pyspark.sql import functions as F

from cdc.decoding.avro import as_envelopes
from cdc.decoding.avro_direct import Shape
from cdc.decoding.spark_decode import AVRO_KEY, AVRO_VALUE, decode
from cdc.sources.types import Column
from tests.spark.test_decode import KAFKA

ROW_FIELDS = [
    {"name": "id", "type": "int"},
    {"name": "big", "type": ["null", "long"], "default": None},
    {"name": "small", "type": ["null", "int"], "default": None},  # into a BIGINT column
    {"name": "f", "type": ["null", "float"], "default": None},
    {"name": "d", "type": ["null", "double"], "default": None},
    {"name": "flag", "type": ["null", "boolean"], "default": None},
    {"name": "v", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}], "default": None},
    {"name": "mood", "type": ["null", {"type": "enum", "name": "mood", "symbols": ["ok", "sad"]}], "default": None},
    {"name": "day", "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date"}], "default": None},
    {"name": "n", "type": ["null", "string"], "default": None},  # a decimal as text
    {"name": "extra", "type": ["null", "string"], "default": None},  # no column of the target
]
SOURCE = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql", "fields": [
    {"name": "version", "type": "string"}, {"name": "ts_ms", "type": "long"},
    {"name": "sequence", "type": ["null", "string"], "default": None},
    {"name": "txId", "type": ["null", "long"], "default": None}, {"name": "lsn", "type": ["null", "long"], "default": None}]}
BLOCK = {"type": "record", "name": "block", "namespace": "event", "fields": [
    {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
    {"name": "data_collection_order", "type": "long"}]}


def envelope(fields: list[dict]) -> dict:
    row = {"type": "record", "name": "Value", "namespace": "it.s.t", "fields": fields}
    return {"type": "record", "name": "Envelope", "namespace": "it.s.t", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": SOURCE}, {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", BLOCK], "default": None}]}


KEY = {"type": "record", "name": "Key", "namespace": "it.s.t", "fields": [{"name": "id", "type": "int"}]}
SCHEMAS = {1: KEY, 2: envelope(ROW_FIELDS),
           3: envelope(ROW_FIELDS + [{"name": "b", "type": ["null", "bytes"], "default": None}]),
           4: envelope([f if f["name"] != "f" else {"name": "f", "type": ["null", "double"], "default": None}
                        for f in ROW_FIELDS])}
COLUMNS = (Column("id", "int", nullable=False), Column("big", "long"), Column("small", "long"), Column("f", "float"),
           Column("d", "double"), Column("flag", "boolean"), Column("v", "string"),
           Column("tags", "array", element="string"), Column("mood", "string"), Column("day", "date"),
           Column("n", "decimal", True, 12, 3), Column("missing", "string"), Column("b", "binary"))


def framed(schema_id: int, doc: dict) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(SCHEMAS[schema_id]), doc)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def change(op: str, before: dict | None, after: dict | None, lsn: int, schema_id: int = 2,
           transaction: dict | None = None, **source) -> bytes:
    return framed(schema_id, {"before": before, "after": after, "op": op, "ts_ms": 1, "transaction": transaction,
                              "source": {"version": "3", "ts_ms": 1700000000000 + lsn, "lsn": lsn, **source}})


def row(i: int, **values) -> dict:
    return {"id": i, "big": None, "small": None, "f": None, "d": None, "flag": None, "v": None, "tags": None,
            "mood": None, "day": None, "n": None, "extra": None, **values}


def test_an_avro_records_struct_decodes_as_its_json_envelope(spark):
    full = row(1, big=2 ** 63 - 1, small=-2 ** 31, f=float("nan"), d=-0.0, flag=True,
               v='quote " backslash \\ tab \t, é, 😀', tags=["a", None, ""], mood="sad", day=19723, n="-1234.5",
               extra="x")
    records = [
        (framed(1, {"id": 1}), change("c", None, full, 10, sequence='["8","10"]', txId=7)),
        (framed(1, {"id": 1}), change("u", full, row(1, f=float("inf"), d=1e308, tags=[], v=""), 20)),
        (framed(1, {"id": 2}), change("r", None, row(2, f=1.1, d=0.1, n="0.0004"), 30)),  # too many digits
        (framed(1, {"id": 2}), change("d", row(2), None, 40, transaction={"id": "7:40", "total_order": 3,
                                                                     "data_collection_order": 2})),
        (framed(1, {"id": 3}), change("c", None, {**row(3), "b": bytes(range(256)) * 3}, 50, schema_id=3)),
        (framed(1, {"id": 2}), None),  # a tombstone
        (framed(1, {"id": 4}), b"\x00" + struct.pack(">I", 2) + b"\xff" * 7),  # a body not of its schema
        (framed(1, {"id": 4}), b"\x00" + struct.pack(">I", 9) + b"\x02"),  # a schema not given
        (b"\x00" + struct.pack(">I", 1) + b"\xff", change("c", None, row(5), 60)),  # a key not of its schema
        (framed(1, {"id": 6}), change("c", None, row(7), 70)),  # the key and the row disagree
        (framed(1, {"id": 8}), change("x", None, row(8), 80)),  # an unknown op
        (framed(1, {"id": 9}), change("c", None, row(9, f=0.1), 90, schema_id=4)),  # read through its envelope
    ]
    raw = spark.createDataFrame([(k, v, "t", 0, i) for i, (k, v) in enumerate(records)], KAFKA)
    texts = {sid: json.dumps(s) for sid, s in SCHEMAS.items()}
    values = {sid: t for sid, t in texts.items() if sid != 1}
    shape = Shape(COLUMNS, ("id",))
    built = as_envelopes(raw, texts, values, shape)
    assert sorted(r["_offset"] for r in built.where(F.col(AVRO_VALUE).isNotNull()).select(
        F.col("offset").alias("_offset")).collect()) == [0, 1, 2, 3, 4, 8, 9, 10]  # no bad ones, nor schema 4
    assert built.where(F.col(AVRO_KEY).isNull() & F.col("key").isNotNull()).select("offset").collect() == [(8,)]
    through_json = decode(as_envelopes(raw, texts, values), COLUMNS, ("id",)).orderBy("_offset").collect()
    direct = decode(built, COLUMNS, ("id",)).orderBy("_offset").collect()
    assert [repr(r) for r in direct] == [repr(r) for r in through_json]
    errors = [r["_error_class"] for r in direct]
    assert errors == [None, None, "value-does-not-fit", None, None, None, "not-an-envelope", "not-an-envelope",
                      "missing-key", "key-mismatch", "unknown-op", None], errors
    first = direct[0]
    assert (first["big"], first["small"], first["v"], first["tags"], first["mood"], first["_txid"]) == (
        2 ** 63 - 1, -2 ** 31, full["v"], ["a", None, ""], "sad", 7)
    assert bytes(direct[4]["b"]) == bytes(range(256)) * 3 and direct[11]["f"] == float.fromhex("0x1.99999ap-4")
