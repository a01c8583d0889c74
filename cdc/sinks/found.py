"""A registration's target as the commands that read metadata only find it (pyiceberg or
delta-rs): its properties, newest summary with offsets, location, snapshot and dead letters."""
from __future__ import annotations

from pyiceberg.exceptions import NoSuchTableError

from cdc.config.models import Settings, TableRegistration
from cdc.control import commits
from cdc.planning import dead_letters
from cdc.sinks import delta


def last_committed(table) -> dict | None:
    """The newest summary with cdc offsets in the current snapshot's ancestry."""
    snap = table.current_snapshot()
    while snap is not None:
        props = snap.summary.additional_properties if snap.summary else {}
        if commits.OFFSETS in props:
            return props
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return None


def _iceberg(catalog, reg: TableRegistration) -> dict | None:
    """What status reads of an Iceberg target (None: there is none)."""
    try:
        table = catalog.load_table(reg.target)
    except NoSuchTableError:
        return None
    snap = table.current_snapshot()
    try:
        dead = catalog.load_table(reg.target + dead_letters.SUFFIX).scan().count()
    except NoSuchTableError:
        dead = 0
    return {"properties": table.properties, "summary": last_committed(table), "location": table.metadata.location,
            "snapshot_id": snap.snapshot_id if snap else None, "snapshot_ms": snap.timestamp_ms if snap else None,
            "dead_letters": dead}


def _delta(settings: Settings, reg: TableRegistration) -> dict | None:
    """The same of a Delta target: its version stands for the snapshot."""
    table = delta.open_table(delta.location(settings, reg.target))
    if table is None:
        return None
    letters = delta.open_table(delta.location(settings, reg.target, dead_letters.SUFFIX))
    newest = table.history(1)[0]
    return {"properties": delta.properties(table), "summary": delta.last_committed(table),
            "location": table.table_uri, "snapshot_id": table.version(), "snapshot_ms": newest.get("timestamp"),
            "dead_letters": delta.live_rows(letters, "upsert") if letters is not None else 0}


def found_target(settings: Settings, catalog, reg: TableRegistration) -> dict | None:
    """The table's target as status reads it (its properties, newest summary, ...), or None."""
    return _delta(settings, reg) if reg.sink == "delta" else _iceberg(catalog, reg)
