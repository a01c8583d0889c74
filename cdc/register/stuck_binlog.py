"""A MariaDB source's capture stuck on a statement of one table that Debezium can never
read (DDL its parser refuses, such as a column of type INET6): Debezium parses every DDL
of the binary log, for every table, before its include list filters it, so taking the
table out of capture does not help. Once the table is out, the connector is moved past
that statement's transaction: its offset's GTID set (where a MariaDB connector resumes)
gets the transaction's GTID, through Connect's offsets API.

The statement is found with SHOW BINLOG EVENTS after the GTID the connector has
processed; `plan_skip` decides from the events, with no I/O."""
from __future__ import annotations

import re
from dataclasses import dataclass

import pymysql

from cdc.errors import ConnectorError, SourceError

GTID = re.compile(r"\bGTID (\d+)-(\d+)-(\d+)\b")
NOT_DDL = re.compile(r"^\s*(?:BEGIN|COMMIT|XA\s|SAVEPOINT|ROLLBACK)", re.I)
EVENTS_AT_ONCE = 10_000  # SHOW BINLOG EVENTS rows read at a time


@dataclass(frozen=True)
class Event:
    """One binary log event as SHOW BINLOG EVENTS lists it."""

    file: str
    pos: int
    kind: str  # Gtid, Query, Table_map, Write_rows_v1, Xid, ...
    end_pos: int
    info: str


@dataclass(frozen=True)
class Skip:
    """Where the connector resumes: after transaction `gtid` ("domain-server-seq"),
    whose statement `statement` ends at `file`:`end_pos`."""

    gtid: str
    file: str
    end_pos: int
    statement: str


def _gtids(text: str) -> dict[int, tuple[int, int]]:
    """A GTID set ("0-1-23,1-2-5") by domain: (server, sequence)."""
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        domain, server, seq = (int(x) for x in part.split("-"))
        out[domain] = (server, seq)
    return out


def _names(info: str, schema: str, table: str) -> bool:
    """Whether a statement names the table: `schema`.`table`, schema.table, or the table
    alone after `use schema`."""
    text = info.replace("`", "")
    if re.search(rf"(?<![\w.]){re.escape(schema)}\.{re.escape(table)}(?!\w)", text, re.I):
        return True
    used = re.match(r"\s*use\s+(\w+)\s*;", text, re.I)
    return bool(used and used.group(1).lower() == schema.lower()
                and re.search(rf"(?<![\w.]){re.escape(table)}(?!\w)", text[used.end():], re.I))


def plan_skip(events: list[Event], processed: str, schema: str, table: str) -> Skip | None:
    """Past the first DDL statement that names `schema`.`table` in a transaction after the
    connector's `processed` GTID set; None when there is none."""
    done = _gtids(processed)
    current = None
    for e in events:
        found = GTID.search(e.info) if e.kind == "Gtid" else None
        if found:
            domain, server, seq = (int(x) for x in found.groups())
            current = (domain, server, seq) if seq > done.get(domain, (0, 0))[1] else None
        elif e.kind == "Query" and current is not None and not NOT_DDL.match(e.info) and _names(e.info, schema, table):
            return Skip("-".join(str(x) for x in current), e.file, e.end_pos, e.info)
    return None


def moved_offset(offset: dict, skip: Skip) -> dict:
    """The offset that resumes after `skip`'s transaction: its GTID in the set (in place of
    its domain's), the position after its statement, the per-event bookkeeping dropped."""
    gtids = _gtids(offset.get("gtids", ""))
    domain, server, seq = (int(x) for x in skip.gtid.split("-"))
    gtids[domain] = (server, seq)
    kept = {k: v for k, v in offset.items() if k not in ("event", "row", "gtids", "file", "pos")}
    return {**kept, "gtids": ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(gtids.items())),
            "file": skip.file, "pos": skip.end_pos}


def events_after(conn: pymysql.Connection, file: str, pos: int) -> list[Event]:
    """The binary log's events from `file`:`pos` on, through the later log files."""
    with conn.cursor() as cur:
        try:
            cur.execute("SHOW BINARY LOGS")
        except pymysql.MySQLError as e:
            raise SourceError(f"cannot list the binary logs: {e}",
                              hint="the source's user needs the BINLOG MONITOR privilege") from None
        files = [row[0] for row in cur.fetchall()]
        if file not in files:
            raise ConnectorError(f"the connector's binary log file {file} is no longer on the server",
                                 hint="see docs/operations.md, 'A change capture can never produce'")
        out = []
        for name in files[files.index(file):]:
            start, offset = (pos if name == file else 4), 0
            while True:
                cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT %s, %s",
                            (name, start, offset, EVENTS_AT_ONCE))
                rows = cur.fetchall()
                out += [Event(r[0], int(r[1]), r[2], int(r[4]), r[5] or "") for r in rows]
                if len(rows) < EVENTS_AT_ONCE:
                    break
                offset += EVENTS_AT_ONCE
        return out


def check_skippable(offsets: list[dict]) -> dict:
    """The connector's one committed offset, which must be a MariaDB streaming one."""
    if len(offsets) != 1 or not {"file", "pos"} <= set(offsets[0].get("offset") or {}):
        raise ConnectorError(f"the connector's committed offsets are not one MariaDB binary log position: {offsets}",
                             hint="see docs/operations.md, 'A change capture can never produce'")
    return offsets[0]
