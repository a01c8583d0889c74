"""An Avro record's struct (`from_avro`) taken straight into the decoded payload and key,
without the JSON envelope's text in between.

`avro.as_envelopes` turns a record into the JSON envelope `spark_decode` parses: writing
that text and parsing it again are half of the decoding. For a writer schema whose every
field the target reads comes in the Avro type the JSON reader would give it (or an int into
a BIGINT), the payload and the key are built from the struct itself, the same values in the
same types (bytes as their base64 text, as the JSON converter writes them); a writer schema
with any other (a logical type, a union, a narrower type) keeps the JSON envelope, as does
a record whose struct did not decode.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Callable

from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

from cdc.decoding.spark_decode import key_schema, payload_schema
from cdc.sources.types import ARRAY_ELEMENTS, Column

_PRIMITIVE = {"int": "INT", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE", "boolean": "BOOLEAN",
              "string": "STRING", "bytes": "BINARY", "fixed": "BINARY"}
# A field of the first type read into a column of the second: the same value either way.
_WIDER = {("INT", "BIGINT"), ("BINARY", "STRING")}
# The payload's source and transaction fields spark_decode reads, with their types there.
_SOURCE = {"lsn": "BIGINT", "sequence": "STRING", "ts_ms": "BIGINT", "txId": "BIGINT", "file": "STRING",
           "pos": "BIGINT", "row": "INT"}
_TRANSACTION = {"id": "STRING", "data_collection_order": "BIGINT"}

Build = Callable[[SparkColumn], SparkColumn]


@dataclass(frozen=True)
class Shape:
    """What the decoded payload and key hold: the target's columns, its key, and the columns
    read from the wire as text (`spark_decode.masked_as_text`)."""

    columns: tuple[Column, ...]
    key: tuple[str, ...]
    text: tuple[str, ...] = ()

    @property
    def payload_ddl(self) -> str:
        return payload_schema(self.columns, self.text)

    @property
    def key_ddl(self) -> str:
        return key_schema(tuple(c for c in self.columns if c.name in self.key))[len("STRUCT<payload: "):-1]

    def wire(self, names: tuple[str, ...] | None = None) -> dict[str, str]:
        """Each column's type on the wire (of `names` only, if given)."""
        return {c.name: "STRING" if c.name in self.text else c.wire_type for c in self.columns
                if names is None or c.name in names}


def _non_null(t):
    """The type of an optional field (a union with null); None for a union of several."""
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        return rest[0] if len(rest) == 1 else None
    return t


def spark_type(t) -> str | None:
    """The Spark type `from_avro` gives an Avro type, where it is one the JSON reader gives
    the same value in (None: a logical type, a record, a union of several)."""
    t = _non_null(t)
    if isinstance(t, str):
        return _PRIMITIVE.get(t)
    if not isinstance(t, dict) or "logicalType" in t:
        return None
    if t.get("type") == "array":
        element = spark_type(t.get("items"))
        return f"ARRAY<{element}>" if element in ARRAY_ELEMENTS.values() else None
    return "STRING" if t.get("type") == "enum" else _PRIMITIVE.get(t.get("type"))


def _types(avro_fields: list[dict]) -> dict[str, str | None]:
    return {f.get("name"): spark_type(f.get("type")) for f in avro_fields}


def _takeable(avro_fields: list[dict], wanted: dict[str, str]) -> bool:
    """Whether each `wanted` field (name: Spark type) the record has comes in that type (or
    one `_WIDER` than it)."""
    found = _types(avro_fields)
    return all(found[name] == wire or (found[name], wire) in _WIDER for name, wire in wanted.items() if name in found)


def _fields(record: SparkColumn, avro_fields: list[dict], wanted: dict[str, str]) -> list[SparkColumn]:
    """The `wanted` fields of an Avro record's struct in their types, one the record lacks null."""
    found = _types(avro_fields)

    def field(name: str, wire: str) -> SparkColumn:
        if name not in found:
            return F.lit(None).cast(wire)
        value = record.getField(name)
        return F.base64(value) if (found[name], wire) == ("BINARY", "STRING") else value.cast(wire)
    return [field(name, wire).alias(name) for name, wire in wanted.items()]


def _record(t) -> dict | None:
    t = _non_null(t)
    return t if isinstance(t, dict) and t.get("type") == "record" else None


def payload(envelope, shape: Shape) -> Build | None:
    """How a record of the value writer schema `envelope` (parsed JSON) becomes the decoded
    payload (`shape.payload_ddl`); None when it keeps the JSON envelope."""
    top = {f.get("name"): f.get("type") for f in envelope.get("fields", [])} if _record(envelope) else {}
    row = next((r for r in (_record(top.get("before")), _record(top.get("after"))) if r is not None), None)
    source, transaction = _record(top.get("source")), _record(top.get("transaction"))
    if row is None or source is None or spark_type(top.get("op")) != "STRING":
        return None
    names = (row.get("name"), f"{row.get('namespace')}.{row.get('name')}")
    if any(_non_null(top.get(image)) is not row and _non_null(top.get(image)) not in names
           for image in ("before", "after")):  # each the row's record, or its name
        return None
    if ("transaction" in top and transaction is None) or not (
            _takeable(row["fields"], shape.wire()) and _takeable(source["fields"], _SOURCE)
            and _takeable(transaction["fields"] if transaction else [], _TRANSACTION)):
        return None
    empty_transaction = f"STRUCT<{', '.join(f'{k}: {v}' for k, v in _TRANSACTION.items())}>"

    def build(r: SparkColumn) -> SparkColumn:
        images = [F.when(r.getField(i).isNotNull(), F.struct(*_fields(r.getField(i), row["fields"], shape.wire())))
                  .alias(i) for i in ("before", "after")]
        txn = (F.when(r.getField("transaction").isNotNull(),
                      F.struct(*_fields(r.getField("transaction"), transaction["fields"], _TRANSACTION)))
               if transaction else F.lit(None).cast(empty_transaction))
        # A body that does not fit its schema decodes (PERMISSIVE) to null or a record of nulls.
        return F.when(r.isNotNull() & r.getField("op").isNotNull(), F.struct(
            *images, F.struct(*_fields(r.getField("source"), source["fields"], _SOURCE)).alias("source"),
            r.getField("op").alias("op"), txn.alias("transaction"))).cast(shape.payload_ddl)
    return build


def key(schema, shape: Shape) -> Build | None:
    """How a record of the key writer schema `schema` (parsed JSON) becomes the decoded key;
    None when it keeps the JSON envelope. A record lacking a key column's value keeps it too."""
    wanted = shape.wire(shape.key)
    if _record(schema) is None or not _takeable(schema["fields"], wanted) or \
            wanted.keys() - {f.get("name") for f in schema["fields"]}:
        return None

    def build(r: SparkColumn) -> SparkColumn:
        present = reduce(lambda a, b: a & b, [r.getField(k).isNotNull() for k in wanted], r.isNotNull())
        return F.when(present, F.struct(*_fields(r, schema["fields"], wanted))).cast(shape.key_ddl)
    return build
