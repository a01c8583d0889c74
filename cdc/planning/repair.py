"""What `cdc repair` does about the keys `reconcile --deep` found differing. No I/O here.

- A key the source holds (missing from the target, or different there) is read again from
  the source by Debezium's incremental snapshot, filtered to those keys
  (`additional-conditions`). The job applies each read as a change at its source position,
  so it lands after every change the target holds and before every later one; Debezium's
  watermarks drop a read that a change made meanwhile overtakes.
- A key only the target holds (`extra`) is deleted from the target, and only while its
  row is still the one that was compared (the same `_cdc_position`); its delete is
  remembered at that position, so a change older than the row never brings it back and a
  later one applies.
- A key the target holds twice (`duplicate`) loses every copy, then is read again.

A history target's versions are not rewritten: an extra key's current version, and each
current version of a duplicate key, is closed at the repair's time (as a delete closes it),
and each read becomes a new current version that closes the one it replaces. A damaged
version stays in the key's history, closed.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from cdc.errors import ConfigError
from cdc.planning.bootstrap import ROW_POSITION
from cdc.planning.drift import DIFFERENT, DUPLICATE, EXTRA, MISSING, differences
from cdc.planning.merge import MOVED
from cdc.planning.sql import q

MAX_KEYS = 10_000  # beyond this many differing keys, a bootstrap refills the table for less


@dataclass(frozen=True)
class RepairPlan:
    """The keys to read again from the source, and the target's rows to delete first."""

    table: str
    reread: tuple[dict, ...] = ()  # missing, different and duplicate keys
    delete: tuple[dict, ...] = ()  # extra keys: deleted where their row is the compared one
    clear: tuple[dict, ...] = ()  # duplicate keys: every copy deleted before the read

    @property
    def empty(self) -> bool:
        return not (self.reread or self.delete or self.clear)

    def counts(self) -> dict[str, int]:
        return {"reread": len(self.reread), "delete": len(self.delete), "clear": len(self.clear)}


def plan_repair(table: str, found: dict, mode: str, max_keys: int = MAX_KEYS) -> RepairPlan:
    """The plan for the differences `found` (report/deep.py's result, listing every key)."""
    total = differences(found)
    if total > max_keys:
        raise ConfigError(f"table {table}: {total:,} keys differ, more than a repair takes ({max_keys:,})",
                          hint=f"refill the table with `cdc bootstrap --table {table}`, or raise --max-keys",
                          table=table)
    if len(found["keys"]) < total:
        raise ValueError(f"{total} keys differ, {len(found['keys'])} listed: the compare's limit was too low")
    by_kind: dict[str, list[dict]] = {MISSING: [], EXTRA: [], DIFFERENT: [], DUPLICATE: []}
    for k in found["keys"]:
        by_kind[k["kind"]].append(k["key"])
    return RepairPlan(table, tuple(by_kind[MISSING] + by_kind[DIFFERENT] + by_kind[DUPLICATE]),
                      tuple(by_kind[EXTRA]), tuple(by_kind[DUPLICATE]))


def key_filter(key: tuple[str, ...], keys: list[dict], ident: Callable[[str], str],
               literal: Callable[[str, object], str]) -> str:
    """A source SQL condition true for exactly these keys: `ident` quotes a column,
    `literal(column, value)` renders a value (both the source's own)."""
    if len(key) == 1:
        return f"{ident(key[0])} IN ({', '.join(literal(key[0], k[key[0]]) for k in keys)})"
    return " OR ".join("(" + " AND ".join(f"{ident(c)} = {literal(c, k[c])}" for c in key) + ")" for k in keys)


def snapshot_signals(collection: str, key: tuple[str, ...], keys: list[dict], ident, literal,
                     max_chars: int | None) -> list[str]:
    """The `data` of the `execute-snapshot` signals that read `keys` of `collection` again,
    each within `max_chars` (the signal table's column; None: unbounded)."""
    def data(part: list[dict]) -> str:
        return json.dumps({"data-collections": [collection], "type": "incremental",
                           "additional-conditions": [{"data-collection": collection,
                                                      "filter": key_filter(key, part, ident, literal)}]})

    signals, part = [], []
    for k in keys:
        if part and max_chars is not None and len(data([*part, k])) > max_chars:
            signals.append(data(part))
            part = []
        part.append(k)
        if max_chars is not None and len(data(part)) > max_chars:
            raise ConfigError(f"one key of {collection} does not fit the signal table's data column "
                              f"({max_chars} characters)", hint="widen the signal table's data column (text)")
    if part:
        signals.append(data(part))
    return signals


def _on(key: tuple[str, ...]) -> str:
    return " AND ".join(f"t.{q(k)} <=> s.{q(k)}" for k in key)


# How a row stops being live, by mode: deleted, marked deleted, or its version closed.
_GONE = {"upsert": "DELETE", "soft_delete": "UPDATE SET t._cdc_deleted = true, t._cdc_op = 'd'",
         "history": "UPDATE SET t._cdc_valid_to = current_timestamp(), t._cdc_current = false"}
_LIVE = {"upsert": "", "soft_delete": "", "history": " AND t._cdc_current"}


def delete_extras_sql(target: str, rows_view: str, key: tuple[str, ...], mode: str) -> str:
    """Delete (soft_delete: mark deleted; history: close) the target's live rows of
    `rows_view` (key and `_cdc_position`, as compared) that are still the compared ones."""
    return (f"MERGE INTO {target} t USING {q(rows_view)} s ON {_on(key)} "
            f"AND t._cdc_position <=> s._cdc_position{_LIVE[mode]} WHEN MATCHED THEN {_GONE[mode]}")


def remember_extras_sql(deletes: str, rows_view: str, key: tuple[str, ...]) -> str:
    """Remember the deletes of `rows_view`'s keys at their compared rows' positions (a row
    without one, written by another tool, at the lowest position)."""
    keys = ", ".join(q(k) for k in key)
    return (f"INSERT INTO {deletes} ({keys}, _cdc_position, _cdc_source_ts, {MOVED}) SELECT {keys}, "
            f"coalesce(_cdc_position, '{ROW_POSITION}'), current_timestamp(), CAST(NULL AS STRING) FROM {q(rows_view)}")


def clear_sql(target: str, keys_view: str, key: tuple[str, ...], mode: str = "upsert") -> str:
    """Delete every row of the target whose key is in `keys_view` (history: close each of
    its current versions)."""
    if mode == "history":
        return f"MERGE INTO {target} t USING {q(keys_view)} s ON {_on(key)}{_LIVE[mode]} WHEN MATCHED THEN {_GONE[mode]}"
    return f"MERGE INTO {target} t USING {q(keys_view)} s ON {_on(key)} WHEN MATCHED THEN DELETE"
