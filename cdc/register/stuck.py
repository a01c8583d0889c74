"""A PostgreSQL source's capture stuck on a change of one table that Debezium can never
produce (columns that differ only by case, a type it refuses): the change is in the WAL
for good, and taking the table out of the connector's include list does not help, since
Debezium reads every published relation's description first. Once the table is out of
the publication, the connector is moved past the transactions that still carry it
(Connect's offsets API), so the other tables capture again; what else those transactions
changed is named, for `cdc bootstrap`.

The transactions are found by peeking at the replication slot (pgoutput, protocol 1),
which neither advances it nor needs the connector; `plan_skip` decides from them, with
no I/O."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import psycopg

from cdc.errors import ConnectorError, SourceError
from cdc.waiting import poll_until


@dataclass
class Transaction:
    """A decoded transaction: its id, where its commit record starts and ends, and the
    tables ("schema.table") it changed."""

    xid: int
    commit_lsn: int = 0
    end_lsn: int = 0
    tables: set[str] = field(default_factory=set)


def _string(data: bytes, at: int) -> tuple[str, int]:
    end = data.index(b"\0", at)
    return data[at:end].decode("utf-8", "replace"), end + 1


def transactions(messages) -> list[Transaction]:
    """The transactions of pgoutput protocol-1 messages (each the bytes of one), in commit
    order: Begin (B), Relation (R) names a relation id, Insert/Update/Delete (I, U, D) and
    Truncate (T) change relations, Commit (C) ends the transaction."""
    names: dict[int, str] = {}
    out: list[Transaction] = []
    current: Transaction | None = None
    for data in messages:
        kind = data[:1]
        if kind == b"B":
            _final_lsn, _ts, xid = struct.unpack_from(">qqI", data, 1)
            current = Transaction(xid)
        elif kind == b"R":
            (relid,) = struct.unpack_from(">I", data, 1)
            schema, at = _string(data, 5)
            table, _ = _string(data, at)
            names[relid] = f"{schema}.{table}"
        elif kind in (b"I", b"U", b"D") and current is not None:
            (relid,) = struct.unpack_from(">I", data, 1)
            current.tables.add(names.get(relid, f"relation {relid}"))
        elif kind == b"T" and current is not None:
            (count,) = struct.unpack_from(">I", data, 1)
            for relid in struct.unpack_from(f">{count}I", data, 6):
                current.tables.add(names.get(relid, f"relation {relid}"))
        elif kind == b"C" and current is not None:
            _flags, current.commit_lsn, current.end_lsn = struct.unpack_from(">bqq", data, 1)
            out.append(current)
            current = None
    return out


@dataclass(frozen=True)
class Skip:
    """Where the connector resumes (`to_lsn`: the end of the last transaction that changes
    the stuck table), how many transactions it passes, and the other tables they changed."""

    to_lsn: int
    skipped: int
    others: tuple[str, ...]


def plan_skip(txs: list[Transaction], committed_lsn: int, table: str) -> Skip | None:
    """Past every transaction after `committed_lsn` (the connector's committed offset) up to
    the last one that changes `table` ("schema.table"); None when none does."""
    pending = [t for t in txs if t.commit_lsn > committed_lsn]
    stuck = [i for i, t in enumerate(pending) if table in t.tables]
    if not stuck:
        return None
    passed = pending[:stuck[-1] + 1]
    others = sorted({name for t in passed for name in t.tables} - {table})
    return Skip(passed[-1].end_lsn, len(passed), tuple(others))


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def peek(conn: psycopg.Connection, slot: str, publication: str, timeout_s: float = 60) -> list[Transaction]:
    """The transactions the slot still holds for the publication, once no process reads
    the slot (the connector's task has failed)."""
    def unread() -> bool:
        active = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        return active != (True,)

    if not poll_until(unread, timeout_s):
        raise SourceError(f"replication slot {slot} is still read by a process after {timeout_s:.0f}s",
                          hint="stop the connector (`cdc capture restart` shows it), then run the command again")
    with conn.transaction(), conn.cursor(name="cdc_peek") as cur:  # read as it comes, not all at once
        cur.itersize = 1000
        cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                    "'publication_names', %s)", (slot, publication))
        return transactions(bytes(data) for (data,) in cur)


def committed_lsn(offset: dict) -> int:
    """The commit a Debezium PostgreSQL offset has processed up to."""
    return int(offset.get("lsn_commit") or offset.get("lsn") or 0)


def moved_offset(offset: dict, skip: Skip) -> dict:
    """The offset that resumes streaming at `skip.to_lsn`: the WAL position search and its
    per-event bookkeeping dropped, so Debezium streams from there."""
    kept = {k: v for k, v in offset.items() if k not in ("lsn_proc", "lsn_commit", "lsn_events_processed",
                                                           "messageType")}
    return {**kept, "lsn": skip.to_lsn}


def check_skippable(offsets: list[dict]) -> dict:
    """The connector's one committed offset, which must be a streaming one."""
    if len(offsets) != 1 or "lsn" not in (offsets[0].get("offset") or {}):
        raise ConnectorError(f"the connector's committed offsets are not one PostgreSQL streaming position: {offsets}",
                             hint="see docs/operations.md, 'A change capture can never produce'")
    return offsets[0]
