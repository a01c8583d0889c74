"""A registration's target as the commands that read metadata only find it (pyiceberg or
delta-rs): its properties, newest summary with offsets, location, snapshot and dead letters."""
from __future__ import annotations

import json
from itertools import chain

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.serializers import FromInputFile

from cdc.config.models import Settings, TableRegistration
from cdc.control import commits
from cdc.planning import dead_letters
from cdc.sinks import delta


def last_committed(table) -> dict | None:
    """The newest summary with cdc offsets in the current snapshot's ancestry, found in the
    table's previous metadata files when an expiry from outside removed it (after a rewrite,
    whose commit carries none: commits.newest_with_offsets)."""
    snap = table.current_snapshot()
    if snap is None:
        return None
    def current(sid: int):
        return _summary_and_parent(table.snapshot_by_id(sid))
    return commits.newest_with_offsets(snap.snapshot_id, chain([current], _previous_metadata(table)))


def _summary_and_parent(snap) -> tuple[dict, int | None] | None:
    if snap is None:
        return None
    return (snap.summary.additional_properties if snap.summary else {}), snap.parent_snapshot_id


def _previous_metadata(table):
    """Lookups of the snapshots each of the table's previous metadata files holds, newest
    file first, each file read when taken (at most commits.PREVIOUS_METADATA_READ); a file
    that cannot be read is passed over."""
    for entry in reversed(table.metadata.metadata_log[-commits.PREVIOUS_METADATA_READ:]):
        try:
            meta = FromInputFile.table_metadata(table.io.new_input(entry.metadata_file))
        except (OSError, ValueError):  # removed by hand, or not metadata: an older file may still hold it
            continue
        yield lambda sid, meta=meta: _summary_and_parent(meta.snapshot_by_id(sid))


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


SEARCHED_COMMITS = 500  # the newest commits looked through for one at a reconciler's barrier


def commit_at(settings: Settings, catalog, reg: TableRegistration, topic: str, offsets: dict[int, int]) -> dict | None:
    """The target's state at the commit whose offsets of `topic` end exactly at `offsets`
    (control/barrier.py): {"snapshot_id": the newest snapshot (Delta: version) before the
    next commit with offsets, so that what was written with none since (an operator's
    DELETE, a repair, a rewrite) counts}; None when its newest commits hold none."""
    def exact(summary: dict | None) -> bool | None:
        """Whether a commit's offsets are the barrier's (None: it carries none)."""
        if not summary or commits.OFFSETS not in summary:
            return None
        found = commits.parse_offsets(summary).get(topic, {})
        return all(found.get(p, 0) == offsets.get(p, 0) for p in set(found) | set(offsets))

    empty = not any(offsets.values())  # a topic with no record: the target as it is holds the count
    if reg.sink == "delta":
        table = delta.open_table(delta.location(settings, reg.target))
        if empty and table is not None:
            return {"snapshot_id": table.version()}
        top = None
        for commit in table.history(SEARCHED_COMMITS) if table is not None else []:
            top = int(commit["version"]) if top is None else top
            meta = commit.get("userMetadata")
            found = exact(json.loads(meta)) if meta else None
            if found:
                return {"snapshot_id": top}
            if found is False:
                top = None  # the commits above hold changes past the barrier
        return None
    try:
        table = catalog.load_table(reg.target)
    except NoSuchTableError:
        return None
    snap, top = table.current_snapshot(), None
    if empty:
        return {"snapshot_id": snap.snapshot_id if snap else None}
    for _ in range(SEARCHED_COMMITS):
        if snap is None:
            return None
        top = snap.snapshot_id if top is None else top
        found = exact(snap.summary.additional_properties if snap.summary else None)
        if found:
            return {"snapshot_id": top}
        if found is False:
            top = None
        if snap.parent_snapshot_id and table.snapshot_by_id(snap.parent_snapshot_id) is None:
            # An expiry from outside cut the history below commits with none: the offsets they
            # stand on are in the previous metadata files (last_committed).
            return {"snapshot_id": top} if top is not None and exact(last_committed(table)) else None
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return None
