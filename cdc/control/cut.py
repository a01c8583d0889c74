"""A consistent cut across the tables of one source: for each table, a snapshot of its
target such that every table holds exactly the effects of the same source transactions.
No I/O here: the transactions come from Debezium's transaction topic, the marks from the
targets' commit summaries (`commits.TRANSACTION`).

A table's commit is at the end of transaction X when its last change is X's last change
of the table: its order in X (`data_collection_order`) equals X's event count for the
table on the transaction topic's END. A table's topic keeps the changes in commit order
(one partition), so such a commit holds every change of the table up to and including X
and none after; it stays the table's state at every later transaction until the next one
that changes the table. A cut at X takes, for each table, that commit: the one at the end
of the last transaction up to X that changed the table, or the table's state at the
window's start (`TableCut.base`) when none did.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from cdc.errors import DecodeError


@dataclass(frozen=True)
class Transaction:
    """One END of the transaction topic, in commit order."""

    id: str
    counts: dict[str, int]  # events per data collection (`schema.table`)
    ts_ms: int | None = None
    offset: int = 0  # on the transaction topic


def transaction_key(kind: str, transaction_id: str) -> str:
    """What names one source transaction alike in its changes and its END. PostgreSQL's ids
    are `<txId>:<LSN>` with each event's own LSN (the END's is the commit's): its txId."""
    return transaction_id.split(":", 1)[0] if kind == "postgresql" else transaction_id


def transaction_end(value: bytes | dict | None, offset: int, kind: str = "postgresql") -> Transaction | None:
    """A record of the transaction topic (JSON, with or without the converter's schema, or an
    Avro record already read) as a Transaction when it is an END, named by
    `transaction_key`; None for a BEGIN. A record that is neither raises DecodeError."""
    try:
        doc = value if isinstance(value, dict) else json.loads(value) if value is not None else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "schema" in doc and "payload" in doc:
        doc = doc["payload"]
    if not isinstance(doc, dict) or doc.get("status") not in ("BEGIN", "END") or not doc.get("id"):
        raise DecodeError(f"offset {offset} of the transaction topic is not a Debezium BEGIN or END")
    if doc["status"] == "BEGIN":
        return None
    counts = {c["data_collection"]: int(c["event_count"]) for c in doc.get("data_collections") or ()}
    return Transaction(transaction_key(kind, str(doc["id"])), counts, doc.get("ts_ms"), offset)


@dataclass(frozen=True)
class At:
    """A table's state at a cut: its snapshot (None: it has none, and holds no row)."""

    snapshot: int | None


@dataclass(frozen=True)
class Mark:
    """A data commit of a table: its snapshot, and the transaction and order of its last change
    (None: its last change was in no transaction, a snapshot read)."""

    snapshot: int
    transaction: tuple[str, int] | None


@dataclass(frozen=True)
class TableCut:
    """What the cut knows of one table."""

    name: str
    collection: str  # the data collection Debezium names its changes by: schema.table
    marks: tuple[Mark, ...] = ()  # its data commits since the window's start, oldest first
    base: At | None = None  # its state at the window's start (None: not known)
    partitions: int = 1


@dataclass(frozen=True)
class Cut:
    """A read point: each table's state after `transaction` (None: at the window's start)."""

    transaction: Transaction | None
    tables: dict[str, At]


@dataclass(frozen=True)
class Outcome:
    """The latest cut of a window (None: none yet) and, for each table that holds the cut
    back from the window's last transaction or stays out of it, why."""

    cut: Cut | None
    held: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)


def next_cut(transactions: list[Transaction], tables: list[TableCut]) -> Outcome:
    """The latest transaction of `transactions` (the window: those after the previous cut,
    in commit order) at which every table of `tables` has a commit at its end, with those
    commits. A table with more than one partition has no commit order across its
    partitions: it is left out, and says so."""
    left_out = {t.name: f"its topic has {t.partitions} partitions: a consistent cut needs one"
                for t in tables if t.partitions != 1}
    inside = [t for t in tables if t.partitions == 1]
    at: dict[str, At | None] = {t.name: t.base for t in inside}
    ending = {t.name: {m.transaction: At(m.snapshot) for m in t.marks if m.transaction} for t in inside}
    waiting: dict[str, str] = {t.name: "its state before the transactions read is not known" for t in inside
                               if t.base is None}
    found = Cut(None, dict(at)) if not waiting else None  # type: ignore[arg-type]
    for x in transactions:
        for t in inside:
            count = x.counts.get(t.collection)
            if count is None:
                continue
            at[t.name] = ending[t.name].get((x.id, count))
            if at[t.name] is None:
                waiting[t.name] = f"no commit holds all of its {count} change(s) of transaction {x.id} yet"
            else:
                waiting.pop(t.name, None)
        if not waiting:
            found = Cut(x, dict(at))  # type: ignore[arg-type]
    return Outcome(found, waiting, left_out)


def still_standing(tables: dict[str, int | None], lines: dict[str, list[int]]) -> dict[str, int | None]:
    """The tables of a cut whose state there their target still holds: each name of `lines`
    (the tables read, each its target's line of history since it was created) whose snapshot
    or version at the cut is in that line, or which was empty there (None). A table whose
    target was removed, re-created, could not be read or was rolled back past its state at
    the cut is not: it stays out until a later cut takes it again, from its own history."""
    return {name: at for name, at in tables.items()
            if name in lines and (at is None or at in lines[name])}


def cut_age_s(cut_ts_ms: int | None, pending: list[Transaction], read_all: bool, now_ms: int) -> float | None:
    """How far the cut is behind its source, in seconds: the age of the oldest transaction
    it does not hold yet (`pending`: those read after it, in commit order); 0 when it holds
    every transaction there is (the transaction topic read to its end, none after the cut).
    A topic not read to its end holds later ones, not yet known: the cut's own time stands
    for them (an age no lower than the truth). None when no time is known."""
    if not pending and read_all:
        return 0.0
    since = pending[0].ts_ms if pending and pending[0].ts_ms is not None else cut_ts_ms
    return round(max(0, now_ms - since) / 1000, 3) if since is not None else None
