"""Topics in Confluent's Avro wire format: a zero magic byte, the writer schema's id in 4
bytes (big-endian), then the Avro binary encoding.

In Spark, each record is decoded with its own writer schema (`from_avro`, once per
schema id in the batch, each fetched once from the registry's Confluent-compatible API)
and given to `spark_decode` as the payload and key it parses from JSON: built from the
struct where the writer schema allows (avro_direct.py), else as the JSON envelope's text,
so both formats share one set of rules. A record that is not in this format, or whose
schema the registry does not know, becomes a text that is no envelope: it goes to the dead
letters like any bad record.
"""
from __future__ import annotations

import functools
import io
import json
import threading
import time

import requests
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from cdc.config.clients import HttpClient, http_client
from cdc.decoding import avro_direct
from cdc.decoding.spark_decode import AVRO_KEY, AVRO_VALUE
from cdc.errors import ConfigError, DecodeError, DependencyError

HEADER_BYTES = 5
NOT_AVRO = "not a Confluent Avro record"
UNKNOWN = -1  # the schema id of a record the registry has no schema for


class SchemaRegistry:
    """Writer schemas by id from a Confluent-compatible registry (`GET /schemas/ids/<id>`),
    cached for the life of the process (a schema id never changes meaning)."""

    def __init__(self, url: str, timeout_s: float = 15, http: HttpClient = HttpClient()):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.http = http
        self._schemas: dict[int, str | None] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, settings, timeout_s: float = 15) -> "SchemaRegistry":
        """The client of the configured registry with its credentials and TLS trust."""
        return cls(settings.registry_url, timeout_s, http_client(settings, settings.schema_registry, "schema_registry"))

    def schema(self, schema_id: int, attempts: int = 3, sleep=time.sleep) -> str | None:
        """The schema's JSON text, or None when the registry has no schema of that id. A
        registry may answer 404 for an id registered a moment ago (replicas catch up), so
        an unknown id is asked for again before its records count as bad, and is never
        remembered as unknown."""
        with self._lock:
            if schema_id in self._schemas:
                return self._schemas[schema_id]
        for attempt in range(attempts):
            try:
                r = requests.get(f"{self.url}/schemas/ids/{int(schema_id)}", timeout=self.timeout_s,
                                 auth=self.http.auth, verify=self.http.verify)
            except requests.RequestException as e:
                raise DependencyError(f"the schema registry at {self.url} is unreachable: {e}",
                                      hint="start it (`cdc stack up`) or set schema_registry.url in cdc.yaml") from None
            if r.status_code in (401, 403):
                raise ConfigError(f"the schema registry at {self.url} refused cdc's credentials (HTTP {r.status_code})",
                                  hint="check schema_registry.username and password (or password_file) in cdc.yaml")
            if r.ok:
                text = r.json()["schema"]
                with self._lock:
                    self._schemas[schema_id] = text
                return text
            if r.status_code != 404:
                raise DependencyError(f"the schema registry at {self.url} answered HTTP {r.status_code} for schema "
                                      f"{schema_id}: {r.text[:300]}")
            if attempt + 1 < attempts:
                sleep(1.0)
        return None


@functools.lru_cache(maxsize=256)
def _parsed(schema_text: str):
    import fastavro

    return fastavro.parse_schema(json.loads(schema_text))


def record_value(value: bytes, offset: int, registry: SchemaRegistry) -> dict:
    """One Confluent Avro record's value read by its writer schema (fastavro), for the few
    records cdc reads in Python (the transaction topic's); `offset` names it in the error of
    a record that is not Avro or whose schema the registry does not have."""
    import fastavro

    if value is None or len(value) < HEADER_BYTES or value[0] != 0:
        raise DecodeError(f"offset {offset}: {NOT_AVRO}")
    writer = int.from_bytes(value[1:HEADER_BYTES], "big")
    text = registry.schema(writer)
    if text is None:
        raise DecodeError(f"offset {offset}: the schema registry has no schema {writer}")
    return fastavro.schemaless_reader(io.BytesIO(value[HEADER_BYTES:]), _parsed(text))


def schema_id(col: str) -> SparkColumn:
    """The writer schema id of a record in the wire format; null for anything else."""
    c = F.col(col)
    framed = (F.length(c) > HEADER_BYTES - 1) & (F.substring(c, 1, 1) == F.lit(bytes([0])))
    return F.when(framed, F.conv(F.hex(F.substring(c, 2, 4)), 16, 10).cast("bigint"))


def batch_schema_ids(batch: DataFrame) -> set[int]:
    """The schema ids of the batch's keys and values (one small aggregation)."""
    rows = batch.select(F.explode(F.array(schema_id("key"), schema_id("value"))).alias("id")) \
        .where(F.col("id").isNotNull()).distinct().collect()
    return {int(r["id"]) for r in rows}


def _records(col: str, schemas: dict[int, str]) -> dict[str, SparkColumn]:
    """A column for each writer schema of `col`, its records' structs (`from_avro`, null for
    a record of another schema): each decoded once however many fields are read of it."""
    ids, payload = schema_id(col), F.expr(f"substring({col}, {HEADER_BYTES + 1})")
    return {f"_avro_{col}_{sid}": F.when(ids == F.lit(sid), from_avro(payload, text, {"mode": "PERMISSIVE"}))
            for sid, text in schemas.items()}


def _as_envelope(col: str, schemas: dict[int, str], built: str | None = None) -> SparkColumn:
    """`{"payload": <the record as JSON>}`, null for a null record, NOT_AVRO for a record
    that cannot be decoded; "{}" where the column `built` holds the record built already."""
    decoded = F.lit(None).cast("string")
    for name in _records(col, schemas):
        decoded = F.when(F.col(name).isNotNull(), F.to_json(F.col(name))).otherwise(decoded)
    # A body that does not fit its schema decodes (PERMISSIVE) to null or to a record of nulls.
    envelope = (F.when(F.col(col).isNull(), F.lit(None).cast("string"))
                .when(decoded.isNotNull() & (decoded != F.lit("{}")), F.concat(F.lit('{"payload":'), decoded, F.lit("}")))
                .otherwise(F.lit(NOT_AVRO)))
    return envelope if built is None else F.when(F.col(built).isNotNull(), F.lit("{}")).otherwise(envelope)


def _built(col: str, schemas: dict[int, str], build, ddl: str) -> SparkColumn:
    """The records of `col` built straight from their structs (`build(schema)`, avro_direct.py)
    where their writer schema allows, else null."""
    out = F.lit(None).cast(ddl)
    for (sid, text), name in zip(schemas.items(), _records(col, schemas)):
        if (make := build(json.loads(text))) is not None:
            out = F.when(F.col(name).isNotNull(), make(F.col(name))).otherwise(out)
    return out


def batch_schemas(batch: DataFrame, registry: SchemaRegistry) -> dict[int, str]:
    """The writer schemas (id: text) of the batch's keys and values that the registry has."""
    return {sid: text for sid in sorted(batch_schema_ids(batch)) if (text := registry.schema(sid)) is not None}


def as_envelopes(batch: DataFrame, keys: dict[int, str], values: dict[int, str],
                 shape: avro_direct.Shape | None = None) -> DataFrame:
    """The batch with `key` and `value` as JSON envelopes (text), decoded by the writer
    schemas given for each (id: text; a record of another id is NOT_AVRO), and the writer
    schema ids of the value and the key as VALUE_SCHEMA_ID and KEY_SCHEMA_ID; with the
    decoded `shape`, also the key and payload built from the records' structs (AVRO_KEY,
    AVRO_VALUE: `spark_decode.decoder(built=True)`); no Spark action."""
    records = {**_records("key", keys), **_records("value", values)}
    out = batch.withColumns({VALUE_SCHEMA_ID: schema_id("value"), KEY_SCHEMA_ID: schema_id("key"), **records})
    if shape is not None:
        out = out.withColumns({
            AVRO_KEY: _built("key", keys, lambda s: avro_direct.key(s, shape), shape.key_ddl),
            AVRO_VALUE: _built("value", values, lambda s: avro_direct.payload(s, shape), shape.payload_ddl)})
    built = (AVRO_KEY, AVRO_VALUE) if shape is not None else (None, None)
    return out.withColumns({"key": _as_envelope("key", keys, built[0]),
                            "value": _as_envelope("value", values, built[1])}).drop(*records)


VALUE_SCHEMA_ID, KEY_SCHEMA_ID = "value_schema_id", "key_schema_id"
UNSEEN = -2  # `judged_schema` of a record whose key or value has a writer schema not decoded before


def judged_schema(decoded) -> SparkColumn:
    """Over `as_envelopes`'s rows: the value's writer schema id, by which a batch decoded with
    the schemas judged before tells a record of another (as a JSON record's fingerprint
    does), or UNSEEN when the key's or the value's writer schema is not among `decoded` (ids;
    null for a value not in the wire format, a tombstone's)."""
    key, value, ids = F.col(KEY_SCHEMA_ID), F.col(VALUE_SCHEMA_ID), sorted(decoded)
    return F.when((key.isNull() | key.isin(*ids)) & (value.isNull() | value.isin(*ids)), value).otherwise(F.lit(UNSEEN))


def first_schemas(batch: DataFrame, registry: SchemaRegistry) -> tuple[dict[int, str], dict[int, str]]:
    """The writer schemas (id: text) of the batch's first record with a value, its key's and
    its value's, then its value's alone; empty when there is none or the registry lacks
    one (a small Spark job reading one record)."""
    first = (batch.where(schema_id("value").isNotNull())
             .select(schema_id("key").alias("key"), schema_id("value").alias("value")).limit(1).collect())
    if not first:
        return {}, {}
    ids = [first[0]["value"], *([first[0]["key"]] if first[0]["key"] is not None else [])]
    schemas = {int(sid): registry.schema(int(sid)) for sid in ids}
    if any(text is None for text in schemas.values()):
        return {}, {}
    return schemas, {int(first[0]["value"]): schemas[int(first[0]["value"])]}


def value_schemas(batch: DataFrame, registry: SchemaRegistry) -> list[tuple[int, str]]:
    """The distinct writer schemas (id, text) of the batch's values, oldest first (by the
    last offset each appears at)."""
    ids = (batch.where(schema_id("value").isNotNull()).groupBy(schema_id("value").alias("id"))
           .agg(F.max("offset").alias("last")).collect())
    return [(int(r["id"]), text) for r in sorted(ids, key=lambda r: r["last"])
            if (text := registry.schema(int(r["id"]))) is not None]


# Avro primitive -> Kafka Connect schema type (Confluent's AvroData; `connect.type` refines int).
_CONNECT_TYPES = {"int": "int32", "long": "int64", "float": "float32", "double": "float64", "boolean": "boolean",
                  "string": "string", "bytes": "bytes", "array": "array", "record": "struct", "map": "map",
                  "enum": "string", "fixed": "bytes"}


def row_fields(schema_text: str) -> list[dict]:
    """The fields of an envelope schema's row as a JSON converter's schema gives them:
    field, type (Connect's), name (the logical type) and parameters. The row's record is
    defined where first used (`before`); later uses name it only."""
    envelope = json.loads(schema_text)
    rows = [_non_null(f["type"]) for f in (envelope.get("fields", []) if isinstance(envelope, dict) else [])
            if f.get("name") in ("before", "after")]
    row = next((r for r in rows if isinstance(r, dict) and r.get("type") == "record"), None)
    if row is None:
        return []
    out = []
    for f in row.get("fields", []):
        t = _non_null(f["type"])
        t = t if isinstance(t, dict) else {"type": t}
        connect = t.get("connect.type") or _CONNECT_TYPES.get(t["type"], t["type"])
        out.append({"field": f["name"], "type": connect, "name": t.get("connect.name"),
                    "parameters": t.get("connect.parameters") or {}})
    return out


def _non_null(t):
    """The type of an optional field (Avro union with null)."""
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        return rest[0] if len(rest) == 1 else t
    return t
