"""Every `cdc reconcile` run, appended to an Iceberg table of the catalog
(`cdc_meta.reconcile_history`), so counts and lag can be followed over time (the HTML
report charts them) with any engine."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from cdc.sinks.iceberg import ensure_namespace

HISTORY = "cdc_meta.reconcile_history"

SCHEMA = Schema(
    NestedField(1, "run_id", StringType(), required=False, doc="one id per `cdc reconcile` run"),
    NestedField(2, "checked_at", TimestamptzType(), required=False),
    NestedField(3, "table_name", StringType(), required=False, doc="the registered table"),
    NestedField(4, "status", StringType(), required=False, doc="OK, DRIFT or IN-FLIGHT"),
    NestedField(5, "source_rows", LongType(), required=False),
    NestedField(6, "target_rows", LongType(), required=False),
    NestedField(7, "lag", LongType(), required=False, doc="Kafka records not yet applied"),
    NestedField(8, "dead_letters", LongType(), required=False),
    NestedField(9, "source_position", StringType(), required=False),
    NestedField(10, "target_position", StringType(), required=False),
    NestedField(11, "deep_missing", LongType(), required=False, doc="--deep: keys missing in the target"),
    NestedField(12, "deep_extra", LongType(), required=False, doc="--deep: keys only in the target"),
    NestedField(13, "deep_different", LongType(), required=False, doc="--deep: keys whose row differs"),
    NestedField(14, "deep_duplicate", LongType(), required=False, doc="--deep: keys more than once on a side"),
)
ARROW = pa.schema([
    ("run_id", pa.string()), ("checked_at", pa.timestamp("us", tz="UTC")), ("table_name", pa.string()),
    ("status", pa.string()), ("source_rows", pa.int64()), ("target_rows", pa.int64()), ("lag", pa.int64()),
    ("dead_letters", pa.int64()), ("source_position", pa.string()), ("target_position", pa.string()),
    ("deep_missing", pa.int64()), ("deep_extra", pa.int64()), ("deep_different", pa.int64()),
    ("deep_duplicate", pa.int64()),
])


def _table(catalog):
    try:
        table = catalog.load_table(HISTORY)
    except NoSuchTableError:
        ensure_namespace(catalog, HISTORY.split(".")[0])
        return catalog.create_table(HISTORY, schema=SCHEMA)
    missing = [f for f in SCHEMA.fields if f.name not in {c.name for c in table.schema().fields}]
    if missing:  # written by an older cdc: the columns added since
        with table.update_schema() as update:
            for f in missing:
                update.add_column(f.name, f.field_type, doc=f.doc)
    return table


def record(catalog, run_id: str, rows: list[dict]) -> None:
    """Append one run's rows (as `reconcile_table` returns them)."""
    def deep(r: dict, kind: str):
        return r["deep"][kind] if r.get("deep", {}).get("compared") else None

    data = [{
        "run_id": run_id, "checked_at": dt.datetime.fromisoformat(r["checked_at"].replace("Z", "+00:00")),
        "table_name": r["table"], "status": r["status"], "source_rows": r["source_rows"],
        "target_rows": r["target_rows"], "lag": r["lag"], "dead_letters": r["dead_letters"],
        "source_position": r["source_position"], "target_position": r["target_position"],
        "deep_missing": deep(r, "missing"), "deep_extra": deep(r, "extra"), "deep_different": deep(r, "different"),
        "deep_duplicate": deep(r, "duplicate"),
    } for r in rows]
    _table(catalog).append(pa.Table.from_pylist(data, schema=ARROW))


def read(catalog, tables: list[str]) -> dict[str, list[dict]]:
    """Earlier runs of `tables`, oldest first, per table."""
    try:
        history = catalog.load_table(HISTORY)
    except NoSuchTableError:
        return {t: [] for t in tables}
    rows = history.scan(selected_fields=("checked_at", "table_name", "status", "source_rows", "target_rows",
                                         "lag")).to_arrow().to_pylist()
    out: dict[str, list[dict]] = {t: [] for t in tables}
    for r in sorted(rows, key=lambda r: r["checked_at"]):
        if r["table_name"] in out:
            out[r["table_name"]].append(r)
    return out
