"""The envelope rules of `envelope.py` as Spark expressions: the row path stays in the JVM.

Input: the Kafka source's columns (key, value, topic, partition, offset). Output: one row
per record with the key columns, the data columns in target types, and
`_op` (c/u/d/r/t, or `tombstone` for a null value), `_position`, `_txid`, `_txn_id` and
`_txn_order` (Debezium's transaction metadata: the transaction, the table's order of the
change in it; null without), `_source_ts`,
`_partition`, `_offset`, and `_error` with `_error_class` (null, or why the record is bad).
A key change is a delete of the old key (`_key_moved`) and a create of the new one whose
`_from_<i>` columns give the old key (Debezium's `__debezium.newkey`/`oldkey` headers).
"""
from __future__ import annotations

from functools import reduce
from typing import Callable

from pyspark import SparkContext
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc.decoding.envelope import Operation
from cdc.planning.position import ROW_BITS
from cdc.planning.protect import MASKED_HEADER, MASKED_UPSTREAM, hashed_upstream
from cdc.planning.sql import TOMBSTONE, q
from cdc.sources.types import Column, placeholder_sql, toastable

OPS = tuple(op.value for op in Operation)
# With partial JSON results off (see sinks/session.py), a value that does not parse into its
# column's type voids the whole payload instead of becoming a silent null.
NOT_AN_ENVELOPE = "value is not a Debezium JSON envelope"
VALUE_DOES_NOT_FIT = "a value of the envelope does not fit its column type"
NON_DATA = "non-data"  # `_op` of a heartbeat, transaction marker or schema change: ignored
OLD_KEY, NEW_KEY = "__debezium.oldkey", "__debezium.newkey"  # the headers of a key change's two events
# The JSON reader refuses a string longer than this (Jackson's default), unless told more.
JACKSON_MAX_STRING = 20_000_000
MAX_VALUE_BYTES = 32 * 1024 * 1024  # kafka.max_record_bytes's default


def json_options(max_value_bytes: int) -> dict[str, str]:
    """The JSON reader's options: a string value as long as a record may be (a text value of
    a row up to `kafka.max_record_bytes` is read, not refused)."""
    return {"maxStringLen": str(max(max_value_bytes, JACKSON_MAX_STRING))}


# A JSON converter message is {"schema": ..., "payload": ...}, in that order, compact. A quote
# inside a JSON string is escaped, so the first `,"payload":` ends the schema. A message
# written with Python's separators is found the same way; any other spacing is read by a
# regular expression (about ten times slower).
SCHEMA_ENDS = (',"payload":', ', "payload":')
SCHEMA_HEAD = r'(?s)^(\{\s*"schema"\s*:.*?)\s*,\s*"payload"\s*:'


JSON_BYTES = "cdc.direct.JsonBytes"
# An Avro batch's key and payload built from the records' structs (avro_direct.py), beside the
# JSON envelopes: null where a record goes through its envelope.
AVRO_KEY, AVRO_VALUE = "_avro_key", "_avro_value"


def from_json(column: SparkColumn, ddl: str, options: dict[str, str] | None = None,
              heads: tuple[str, ...] = ()) -> SparkColumn:
    """Spark's `from_json(column, ddl, options)` of a string or binary column, its result read
    from the bytes (jvm/direct, JsonBytes): Spark's own makes a text reader for every record,
    which costs as much as the parse of a change event. With `heads`, schema parts (oldest
    first) a value may start with: one that does is read from its payload on (`payload`)."""
    jvm = SparkContext._active_spark_context._jvm
    return SparkColumn(getattr(jvm, JSON_BYTES).column(column._jc, ddl, options or {}, list(heads)))


def schema_head() -> SparkColumn:
    """A record value's schema part, the text before its payload ("" without one);
    `head + "}"` is a message `envelope.row_fields` reads."""
    text = F.col("value").cast("string")
    compact, spaced = (F.instr(text, sep) for sep in SCHEMA_ENDS)
    return (F.when(compact > 0, F.substring(text, F.lit(1), compact - 1))
            .when(spaced > 0, F.substring(text, F.lit(1), spaced - 1))
            .otherwise(F.regexp_extract(text, SCHEMA_HEAD, 1)))


def schema_fingerprint(known: dict[int, str] | None = None) -> SparkColumn:
    """A record value's schema part as a 64-bit hash (null for a tombstone): the decode pass
    collects them, so a batch whose schemas were all seen before is read once. `known`:
    fingerprints with their schema parts (`schema_heads`); a record that starts with one of
    them is given its fingerprint without its text being searched for the payload, which
    costs more than the rest of its decoding (the schema part is most of a record)."""
    return F.when(F.col("value").isNotNull(), F.coalesce(_known_head(known), F.xxhash64(schema_head())))


def _starts_with(head: str) -> SparkColumn:
    """Whether a record value starts with the schema part `head`, written compact."""
    return F.col("value").cast("string").startswith(head + SCHEMA_ENDS[0])


def _known_head(known: dict[int, str] | None) -> SparkColumn:
    """The fingerprint of the `known` schema part a record value starts with (null for none)."""
    return reduce(lambda acc, item: F.when(_starts_with(item[1]), F.lit(item[0]).cast("bigint")).otherwise(acc),
                  (known or {}).items(), F.lit(None).cast("bigint"))


def schema_heads(batch: DataFrame) -> dict[int, str]:
    """The fingerprint and schema part of the batch's first record value (none for a batch
    of tombstones): a small Spark job reading one record (about 0.1 s), once per process."""
    first = (batch.where(F.col("value").isNotNull()).select(schema_head().alias("schema")).limit(1)
             .select(F.xxhash64("schema").alias("fingerprint"), "schema").collect())
    return {r["fingerprint"]: r["schema"] for r in first}


def value_schemas(batch: DataFrame, known: dict[int, str] | None = None) -> list[tuple[int, str]]:
    """The distinct schema parts (`schema_head`) of a batch's values with their fingerprints,
    oldest first (by the last offset each appears at). Records starting with a `known` schema
    part (or, with none known, the first record's) are matched by it, the others searched."""
    known = dict(known or schema_heads(batch))
    match = _known_head(known)
    found = (batch.where(F.col("value").isNotNull())
             .groupBy(match.alias("known"), F.when(match.isNull(), schema_head()).alias("schema"))
             .agg(F.max("offset").alias("last"))
             .select("known", "schema", "last", F.xxhash64("schema").alias("fingerprint")).collect())
    return [(r["known"], known[r["known"]]) if r["known"] is not None else (r["fingerprint"], r["schema"])
            for r in sorted(found, key=lambda r: r["last"])]


def refusal(by: SparkColumn, refused: dict) -> SparkColumn | None:
    """Why a record's schema is refused, matched by `by` (its schema part or writer schema
    id) against `refused` (null: it is not; None: nothing is refused)."""
    if not refused:
        return None
    return reduce(lambda acc, item: F.when(by == F.lit(item[0]), F.lit(item[1])).otherwise(acc),
                  refused.items(), F.lit(None).cast("string"))


def _struct_ddl(columns: tuple[Column, ...], text: tuple[str, ...] = ()) -> str:
    return ", ".join(f"{q(c.name)}: {'STRING' if c.name in text else c.wire_type}" for c in columns)


def masked_as_text(columns: tuple[Column, ...], masked: tuple[str, ...]) -> tuple[str, ...]:
    """The masked columns read from the wire as text: the connector may have replaced their
    value by its hash (any kind but arrays, which it leaves to the job)."""
    return tuple(c.name for c in columns if c.name in masked and c.kind != "array")


def payload_schema(columns: tuple[Column, ...], text: tuple[str, ...] = ()) -> str:
    row = f"STRUCT<{_struct_ddl(columns, text)}>"
    return (f"STRUCT<before: {row}, after: {row}, "
            f"source: STRUCT<lsn: BIGINT, sequence: STRING, ts_ms: BIGINT, txId: BIGINT, "
            f"file: STRING, pos: BIGINT, row: INT>, op: STRING, "
            f"transaction: STRUCT<id: STRING, data_collection_order: BIGINT>>")


def payload(schema: str, known: dict[int, str] | None = None, max_value_bytes: int = MAX_VALUE_BYTES) -> SparkColumn:
    """A record value's payload parsed as `schema` (`payload_schema`). A value starting with
    one of the `known` schema parts (`schema_heads`) is parsed without it: `{` and the text
    from its `,"payload":` on make the same message but for the schema part, most of the
    record, which is then not read again."""
    return from_json(F.col("value"), f"STRUCT<payload: {schema}>", json_options(max_value_bytes),
                     tuple((known or {}).values())).getField("payload")


def key_schema(key_columns: tuple[Column, ...]) -> str:
    return f"STRUCT<payload: STRUCT<{_struct_ddl(key_columns)}>>"


def _hex(expr: SparkColumn, width: int) -> SparkColumn:
    """Upper-case hex digits, `width` of them (`_lower_hex` turns a concatenation of them to lower
    case at once, without `lower`, which loads ICU's case tables)."""
    return F.lpad(F.hex(expr), width, "0")


def _lower_hex(expr: SparkColumn) -> SparkColumn:
    return F.translate(expr, "ABCDEF", "abcdef")


def _transaction_key(kind: str) -> SparkColumn:
    """control/cut.py's `transaction_key` of the change's transaction id."""
    tx = F.col("_v.transaction.id")
    return F.substring_index(tx, ":", 1) if kind == "postgresql" else tx


def _position_parts(kind: str) -> tuple[SparkColumn, SparkColumn]:
    """(commit part, event part) of a record's position (planning/position.py); the event
    part is null when the record has none."""
    if kind == "mariadb":
        file_index = F.expr(r"try_cast(regexp_extract(_v.source.file, '\\.([0-9]+)$', 1) AS BIGINT)")
        row = F.least(F.coalesce(F.col("_v.source.row"), F.lit(0)), F.lit((1 << ROW_BITS) - 1)).cast("bigint")
        event = F.when(file_index.isNotNull() & F.col("_v.source.pos").isNotNull(),
                       F.shiftleft(F.col("_v.source.pos"), ROW_BITS).bitwiseOR(row))
        return F.coalesce(file_index, F.lit(0)), event
    seq = from_json(F.col("_v.source.sequence"), "ARRAY<STRING>")
    commit_lsn = F.coalesce(F.try_element_at(seq, F.lit(1)).try_cast("bigint"), F.lit(0))
    event_lsn = F.coalesce(F.try_element_at(seq, F.lit(2)).try_cast("bigint"), F.col("_v.source.lsn"))
    return commit_lsn, event_lsn


def _header(name: str) -> SparkColumn:
    """The value of a record's header `name` as text (null when absent)."""
    found = F.filter("headers", lambda h: h["key"] == F.lit(name))
    return F.try_element_at(found, F.lit(1)).getField("value").cast("string")


def decode(raw: DataFrame, columns: tuple[Column, ...], key: tuple[str, ...], kind: str = "postgresql",
           refused: SparkColumn | None = None, schema: SparkColumn | None = None,
           masked: tuple[str, ...] = ()) -> DataFrame:
    """`raw` decoded (see `decoder`)."""
    return decoder(columns, key, kind, refused, schema, masked, "headers" in raw.columns,
                   built=AVRO_VALUE in raw.columns)(raw)


def decoder(columns: tuple[Column, ...], key: tuple[str, ...], kind: str = "postgresql",
            refused: SparkColumn | None = None, schema: SparkColumn | None = None,
            masked: tuple[str, ...] = (), headers: bool = True,
            heads: dict[int, str] | None = None,
            max_value_bytes: int = MAX_VALUE_BYTES, built: bool = False) -> Callable[[DataFrame], DataFrame]:
    """The decoding of the Kafka source's rows (with their `headers` column or without), its
    expressions built once: a job keeps it between batches, and each batch then costs a few
    calls into the JVM instead of a thousand. `refused`: over the raw rows, why a record's
    schema is one the target cannot take (`refusal`), null when it can: such records are bad
    (`schema-refused`). `schema`: over the raw rows, the record's schema
    (`schema_fingerprint`), kept as `_schema`. `masked`: the columns to be hashed
    (`protect.mask_columns`), given as the text of their target value, or as the hash where
    the connector made it. `heads`: schema parts the records are likely to start with
    (`payload`). `max_value_bytes`: `kafka.max_record_bytes`, what the longest string of a
    value may be (a longer value that does not parse may hold a longer one: a bad record,
    `record-too-large`). `built`: the rows carry AVRO_KEY and AVRO_VALUE, taken where not null
    (their envelopes are then not parsed)."""
    kept = [schema.alias("_schema")] if schema is not None else []
    key_cols = tuple(c for c in columns if c.name in key)
    by_name = {c.name: c for c in columns}
    text = masked_as_text(columns, masked)
    parsed_key = from_json(F.col("key"), key_schema(key_cols)).getField("payload")
    parsed_value = payload(payload_schema(columns, text), heads, max_value_bytes)
    envelope = [
        (F.coalesce(F.col(AVRO_KEY), parsed_key) if built else parsed_key).alias("_k"),
        (F.coalesce(F.col(AVRO_VALUE), parsed_value) if built else parsed_value).alias("_v"),
        F.col("key").isNull().alias("_null_key"), F.col("value").isNull().alias("_null_value"), F.col("value"),
        F.octet_length("value").alias("_value_bytes"),
        F.col("partition").alias("_partition"), F.col("offset").alias("_offset"),
        (_header(OLD_KEY) if headers else F.lit(None).cast("string")).alias("_old_key"),
        (_header(NEW_KEY).isNotNull() if headers else F.lit(False)).alias("_new_key"),
        *([_header(MASKED_HEADER).alias(MASKED_UPSTREAM)] if headers else []),
        (refused if refused is not None else F.lit(None).cast("string")).alias("_refused"), *kept,
    ]
    # Only a record without a typed op is read again, loosely, every field as text: an
    # envelope whose values do not fit still has an op; heartbeats, transaction markers and
    # schema changes have none. A change event, nearly every record, is parsed once.
    loose_value = F.when(
        ~F.col("_null_value") & (F.col("_v").isNull() | F.col("_v.op").isNull()),
        F.from_json(F.col("value").cast("string"), "STRUCT<payload: MAP<STRING, STRING>>",
                    json_options(max_value_bytes)).getField("payload"))
    loose = F.col("_loose")
    non_data = loose.getItem("op").isNull() & (
        (loose.getItem("status").isin("BEGIN", "END") & loose.getItem("id").isNotNull())  # transaction metadata
        | loose.getItem("ddl").isNotNull() | loose.getItem("tableChanges").isNotNull()  # schema change
        | (F.size(F.map_keys(loose)) == 1) & loose.getItem("ts_ms").isNotNull())  # heartbeat
    op = (F.when(F.col("_null_value"), F.lit(TOMBSTONE)).when(F.coalesce(non_data, F.lit(False)), F.lit(NON_DATA))
          .otherwise(F.col("_v.op")))
    commit_lsn, event_lsn = _position_parts(kind)
    pos = _lower_hex(F.concat(_hex(commit_lsn, 16), _hex(event_lsn, 16), F.when(F.col("_op") == "r", "0").otherwise("1"),
                              _hex(F.col("_partition"), 8), _hex(F.col("_offset"), 16)))
    position = F.when(event_lsn.isNotNull(), pos)
    row = F.when(F.col("_op") == "d", F.col("_v.before")).otherwise(F.col("_v.after"))
    # An unchanged TOASTed value arrives as a placeholder: flagged, and never taken as data.
    toast = {c.name: i for i, c in enumerate(toastable(columns, key))}
    unavailable = {name: F.coalesce(row.getField(name) == F.expr(placeholder_sql(by_name[name])), F.lit(False))
                   for name in toast}
    data = [(F.col("_k").getField(c.name) if c.name in key else
             F.when(unavailable[c.name], F.lit(None)).otherwise(row.getField(c.name)) if c.name in toast else
             row.getField(c.name)).alias(c.name) for c in columns]
    flags = [unavailable[name].alias(f"_unavailable_{i}") for name, i in toast.items()]
    # A key change: the old key of the new key's create (null when its header does not parse).
    old_key = from_json(F.col("_old_key"), f"STRUCT<{_struct_ddl(key_cols)}>")
    moved_from = F.col("_old_key").isNotNull() & (F.col("_op") == "c")
    moved = [(moved_from, "_moved_from")] + [(F.when(moved_from, old_key.getField(k)), f"_from_{i}")
                                              for i, k in enumerate(key)]
    moved.append((F.col("_new_key") & (F.col("_op") == "d"), "_key_moved"))
    key_missing = reduce(lambda a, b: a | b, [F.col("_k").getField(k).isNull() for k in key], F.col("_k").isNull())
    # A key with a NULL part (a key column the source allows NULL in) is no missing key: the
    # record has a key, and its row holds NULL in each key column the key lacks (a record
    # without a row, a tombstone, has its key alone).
    part_null = [F.col("_k").getField(k).isNull() for k in key]
    null_part = ~F.col("_null_key") & F.when(
        row.isNotNull(), reduce(lambda a, b: a & b, [~n | row.getField(k).isNull() for n, k in zip(part_null, key)])
    ).otherwise(F.col("_k").isNotNull())
    several = reduce(lambda a, b: a + b, [n.cast("int") for n in part_null]) > 1
    null_part_message = F.concat(F.when(several, F.lit("key columns ")).otherwise(F.lit("key column ")),
                                 F.concat_ws(", ", *[F.when(n, F.lit(k)) for n, k in zip(part_null, key)]),
                                 F.when(several, F.lit(" are NULL")).otherwise(F.lit(" is NULL")))
    # The Kafka key decides where a change goes: its row must say the same key (a row
    # without the key's columns disagrees too).
    disagree = [F.when(~F.col("_k").getField(k).eqNullSafe(row.getField(k)), F.lit(k)) for k in key]
    key_disagrees = F.concat_ws(", ", *disagree)
    upsert = F.col("_op").isin("c", "u", "r")
    # A required target column without a value (TOASTed placeholders excepted: they keep the stored one).
    required = [c.name for c in columns if not c.nullable and c.name not in key]
    missing = [F.when(row.getField(n).isNull(), F.lit(n)) for n in required]
    missing_required = F.concat_ws(", ", *missing) if missing else F.lit("")
    unread = ~F.col("_null_value") & F.col("_v").isNull()
    checks = [
        (F.col("_refused").isNotNull(), "schema-refused", F.col("_refused")),
        (unread & (F.col("_value_bytes") > max(max_value_bytes, JACKSON_MAX_STRING)), "record-too-large",
         F.concat(F.lit("the value's "), F.col("_value_bytes").cast("string"),
                  F.lit(f" bytes are over kafka.max_record_bytes ({max_value_bytes}), the longest value the decoder "
                        f"reads: raise it in cdc.yaml, then `cdc replay` this record's offsets"))),
        (~F.col("_null_value") & F.col("_v").isNull() & loose.getItem("op").isNotNull(),
         "value-does-not-fit", F.lit(VALUE_DOES_NOT_FIT)),
        (~F.col("_null_value") & F.col("_v").isNull() & (F.coalesce(F.col("_op"), F.lit("")) != NON_DATA),
         "not-an-envelope",
         F.lit(NOT_AN_ENVELOPE)),
        (F.col("_op") == NON_DATA, None, None),  # recognised, and ignored
        (F.col("_op").isNull() | ~F.col("_op").isin(*OPS, TOMBSTONE), "unknown-op",
         F.concat(F.lit("unknown op "), F.coalesce(F.col("_op"), F.lit("null")))),
        ((F.col("_op") != "t") & key_missing & null_part, "null-key-part", null_part_message),
        ((F.col("_op") != "t") & key_missing, "missing-key", F.lit("record has no key")),
        (F.col("_op").isin("c", "u", "r", "d") & row.isNotNull() & (key_disagrees != ""), "key-mismatch",
         F.concat(F.lit("the record's Kafka key and its row disagree on key column(s) "), key_disagrees)),
        ((F.col("_op") != TOMBSTONE) & F.col("_position").isNull(), "no-position",
         F.lit("record has no source position")),
        (upsert & F.col("_v.after").isNull(), "no-after-row", F.lit("change has no 'after' row")),
        (upsert & (missing_required != ""), "value-does-not-fit",
         F.concat(F.lit("no value for required column(s) "), missing_required)),
    ]
    error, error_class = F.lit(None).cast("string"), F.lit(None).cast("string")
    for cond, cls, message in reversed(checks):  # the first check that holds names the error
        error = F.when(cond, message if message is not None else F.lit(None).cast("string")).otherwise(error)
        error_class = F.when(cond, F.lit(cls).cast("string")).otherwise(error_class)
    fields = [
        *data, *flags, *[c.alias(name) for c, name in moved],
        F.col("_op"), F.col("_position"), F.col("_v.source.txId").alias("_txid"),
        _transaction_key(kind).alias("_txn_id"), F.col("_v.transaction.data_collection_order").alias("_txn_order"),
        F.timestamp_millis(F.col("_v.source.ts_ms")).alias("_source_ts"),
        F.col("_partition"), F.col("_offset"),
        error.alias("_error"), error_class.alias("_error_class"), *[F.col("_schema") for _ in kept],
        *([F.col(MASKED_UPSTREAM)] if headers else []),
    ]
    names = [*(c.name for c in columns), *(f"_unavailable_{i}" for i in toast.values()), *(n for _, n in moved),
             "_op", "_position", "_txid", "_txn_id", "_txn_order", "_source_ts", "_partition", "_offset",
             "_error", "_error_class",
             *(["_schema"] if kept else []), *([MASKED_UPSTREAM] if headers else [])]
    # Wire values into target types (dates, timestamps, bytes); a changed row with a value
    # that has no exact target value (a decimal NaN, overflow or extra digits) is bad.
    upstream = {c: hashed_upstream(c) if headers else F.lit(False) for c in text}
    wire_of = {c.name: _from_text(c) if c.name in text else q(c.name) for c in columns}
    lost = [F.when(~upstream.get(c.name, F.lit(False)) & F.expr(c.does_not_fit(wire_of[c.name])), F.lit(c.name))
            for c in columns if c.does_not_fit("x")]
    lost += [F.when(~upstream[c] & F.col(c).isNotNull() & F.expr(f"{wire_of[c]} IS NULL"), F.lit(c))
             for c in text if by_name[c].wire_type != "STRING"]
    checked = None  # the fields with the values that do not fit named in `_error`
    if lost:
        lost_names = F.concat_ws(", ", *lost)
        bad = F.col("_error").isNull() & F.col("_op").isin("c", "u", "r") & (lost_names != "")
        replaced = {"_error_class": F.when(bad, F.lit("value-does-not-fit")).otherwise(F.col("_error_class")),
                    "_error": F.when(bad, F.concat(F.lit("value of column(s) "), lost_names,
                                                   F.lit(" does not fit the column's type"))).otherwise(F.col("_error"))}
        checked = [replaced[n].alias(n) if n in replaced else F.col(q(n)) for n in names]
    wire = {**by_name, **{f"_from_{i}": by_name[k] for i, k in enumerate(key)}}
    masked_value = {c: F.when(upstream[c], F.col(q(c))).otherwise(F.expr(f"CAST({by_name[c].convert(wire_of[c])} "
                                                                        f"AS STRING)")) for c in text}
    typed = [masked_value[c].alias(c) if c in masked_value else
             F.expr(wire[c].convert(q(c))).alias(c) if c in wire else F.col(q(c)) for c in names]

    def run(raw: DataFrame) -> DataFrame:
        # The record's value is read by the loose parse alone, then dropped: every projection that
        # carried it would hold a copy of it.
        df = (raw.select(*envelope).select("*", loose_value.alias("_loose")).drop("value")
              .select("*", op.alias("_op")).select("*", position.alias("_position")).select(*fields))
        return (df if checked is None else df.select(*checked)).select(*typed)
    return run


def _from_text(column: Column) -> str:
    """Spark SQL: the wire value of a masked column read as text (null when it is none)."""
    if column.wire_type == "STRING":
        return q(column.name)
    return f"try_cast({q(column.name)} AS {column.wire_type})"
