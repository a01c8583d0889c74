"""The dead-letter table of a target: records that could not be decoded or applied, kept
with their raw bytes, where they were and why (design rule 8). Built from names alone."""
from __future__ import annotations

from cdc.planning.merge import table_ref
from cdc.planning.sql import q

SUFFIX = "__cdc_dead_letters"

COLUMNS = (
    ("topic", "STRING"),
    ("partition", "INT"),
    ("offset", "BIGINT"),
    ("key", "BINARY"),  # raw Kafka key
    ("value", "BINARY"),  # raw Kafka value (null for a tombstone)
    ("error_class", "STRING"),  # not-an-envelope, value-does-not-fit, unknown-op, missing-key, null-key-part,
    #                             key-mismatch, mask-key-mismatch, record-too-large, ...
    ("error_message", "STRING"),
    ("failed_at", "TIMESTAMP"),
    ("batch_id", "BIGINT"),
    ("job", "STRING"),
)


def dead_letters_ref(catalog: str, target: str) -> str:
    return table_ref(catalog, target + SUFFIX)


def table_sql(ref: str, clause: str) -> str:
    """The dead-letter table's CREATE TABLE; `clause` gives its format (USING ... TBLPROPERTIES ...)."""
    cols = ", ".join(f"{q(n)} {t}" for n, t in COLUMNS)
    return f"CREATE TABLE IF NOT EXISTS {ref} ({cols}) {clause}"


def record_sql(ref: str, view: str) -> str:
    """Add the view's dead letters; a record already there (a re-run batch) is not added twice."""
    on = " AND ".join(f"t.{q(c)} = s.{q(c)}" for c in ("topic", "partition", "offset"))
    cols = ", ".join(q(n) for n, _ in COLUMNS)
    return (f"MERGE INTO {ref} t USING {q(view)} s ON {on}\n"
            f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({', '.join('s.' + q(n) for n, _ in COLUMNS)})")
