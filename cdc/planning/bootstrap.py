"""What a bootstrap records, and which change events its rows already hold. No I/O here.

A JDBC bootstrap reads the source inside one exported PostgreSQL snapshot. The snapshot's
transaction horizon (`pg_current_snapshot()`: xmin, xmax, in-progress xids) says exactly
which transactions its rows reflect; Debezium stamps every change with its transaction id
(`source.txId`). A change of a transaction the snapshot sees is already in the bootstrap
rows and is dropped; every other change applies on top. The WAL position read inside the
snapshot bounds the check: a change whose preceding commit lies past it (the first
element of `source.sequence`) is newer than the snapshot whatever its id, so xid
wrap-around never matters.

The source is read in chunks of key ranges, each appended in its own commit. A bootstrap
that is interrupted resumes with the chunks not yet committed, read in a new snapshot;
each chunk records the snapshot it was read in, and the check is made per key range.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from cdc.errors import ApplyError
from cdc.planning.position import encode
from cdc.planning.sql import q
from cdc.sources.types import parse_lsn

PROPERTY = "cdc.bootstrap"  # table property: the bootstrap's plan and state (JSON)
START = "cdc.bootstrap-start"  # snapshot summary: the commit that emptied the target
CHUNK = "cdc.bootstrap-chunk"  # snapshot summary: one chunk's index and source snapshot
RUNNING, DONE = "running", "done"
METHODS = ("jdbc", "debezium")
ROW_POSITION = encode(0, 0, 0, 0, 0)  # bootstrap rows yield to every change not dropped
XID_SPACE = 1 << 32
INTEGER_KINDS = ("int", "long")


@dataclass(frozen=True)
class SourceSnapshot:
    """A PostgreSQL snapshot's horizon (32-bit xids, as Debezium reports them) and the WAL
    position read inside it."""

    lsn: int
    xmin: int
    xmax: int
    xip: tuple[int, ...] = ()

    @classmethod
    def parse(cls, current_snapshot: str, wal_lsn: str) -> "SourceSnapshot":
        """From `pg_current_snapshot()::text` (`xmin:xmax:xip,...`) and `pg_current_wal_lsn()::text`."""
        xmin, xmax, xip = current_snapshot.split(":")
        return cls(parse_lsn(wal_lsn), int(xmin) % XID_SPACE, int(xmax) % XID_SPACE,
                   tuple(sorted(int(x) % XID_SPACE for x in xip.split(",") if x)))

    def sees(self, txid: int, commit_lsn: int) -> bool:
        """Whether the snapshot holds the changes of transaction `txid`, whose events carry
        `commit_lsn` (the first element of their `source.sequence`)."""
        if commit_lsn > self.lsn:
            return False
        return _precedes(txid, self.xmin) or (_precedes(txid, self.xmax) and txid not in self.xip)

    def sees_sql(self, txid: str, commit_lsn_hex: str) -> str:
        """`sees` as a Spark SQL expression over a transaction id and a 16-digit hex commit LSN."""
        def precedes(a: str, b: int) -> str:
            return f"(pmod({b} - {a}, {XID_SPACE}) BETWEEN 1 AND {XID_SPACE // 2 - 1})"

        running = f" AND {txid} NOT IN ({', '.join(map(str, self.xip))})" if self.xip else ""
        return (f"({txid} IS NOT NULL AND {commit_lsn_hex} <= '{self.lsn:016x}' AND "
                f"({precedes(txid, self.xmin)} OR ({precedes(txid, self.xmax)}{running})))")

    @property
    def position(self) -> str:
        """The source position up to which the snapshot reflects the source."""
        return encode(self.lsn, 0, 0, 0, 0)


def _precedes(a: int, b: int) -> bool:
    """PostgreSQL's modular xid order: `a` is older than `b`."""
    return 0 < (b - a) % XID_SPACE < XID_SPACE // 2


@dataclass(frozen=True)
class Chunk:
    """A key range of the first key column, `lo <= key < hi` (None: unbounded), committed
    as one unit; `splits` cut it into ranges read in parallel."""

    lo: int | None = None
    hi: int | None = None
    splits: tuple[int, ...] = ()

    def where_sql(self, column: str, quote=q) -> str:
        return _range_sql(quote(column), self.lo, self.hi)

    def parts_sql(self, column: str, quote=q) -> list[str]:
        """One condition per parallel read; together they cover the chunk exactly once."""
        edges = [self.lo, *self.splits, self.hi]
        return [_range_sql(quote(column), edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def _range_sql(column: str, lo: int | None, hi: int | None) -> str:
    parts = ([f"{column} >= {int(lo)}"] if lo is not None else []) + ([f"{column} < {int(hi)}"] if hi is not None else [])
    return " AND ".join(parts) or "TRUE"


def chunk_count(rows: int, chunk_rows: int) -> int:
    return max(1, math.ceil(rows / chunk_rows))


def plan_chunks(quantiles: list[int], chunks: int) -> list[Chunk]:
    """Up to `chunks` key ranges cut at `quantiles` of the key (from a sample, so ranges
    hold about equal rows whatever the keys' spread); the quantiles inside a range split it
    for parallel reads. The outer ranges are open: every key belongs to exactly one."""
    cuts = sorted(set(quantiles))
    intervals = len(cuts) + 1  # (-inf, c0), [c0, c1), ..., [c_last, +inf)
    per = math.ceil(intervals / max(1, chunks))
    out = []
    for first in range(0, intervals, per):
        end = first + per  # intervals first .. end-1
        out.append(Chunk(cuts[first - 1] if first else None, cuts[end - 1] if end - 1 < len(cuts) else None,
                         tuple(cuts[first:end - 1])))
    return out


@dataclass
class Bootstrap:
    """The plan and progress of one table's bootstrap, kept in the target's properties."""

    id: str
    method: str
    state: str
    offsets: dict[int, int]  # where streaming takes over: Kafka's end offsets before the first snapshot
    topic_id: str | None = None
    key_column: str | None = None  # the first key column, when chunks are key ranges
    chunks: list[Chunk] = field(default_factory=lambda: [Chunk()])
    snapshots: dict[int, SourceSnapshot] = field(default_factory=dict)  # chunk index -> snapshot read in

    def to_json(self) -> str:
        return json.dumps({
            "id": self.id, "method": self.method, "state": self.state,
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())}, "topic_id": self.topic_id,
            "key_column": self.key_column, "chunks": [asdict(c) for c in self.chunks],
            "snapshots": {str(i): asdict(s) for i, s in sorted(self.snapshots.items())},
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Bootstrap":
        d = json.loads(text)
        return cls(d["id"], d["method"], d["state"], {int(p): o for p, o in d["offsets"].items()},
                   d.get("topic_id"), d.get("key_column"),
                   [Chunk(c.get("lo"), c.get("hi"), tuple(c.get("splits", ()))) for c in d["chunks"]],
                   {int(i): SourceSnapshot(s["lsn"], s["xmin"], s["xmax"], tuple(s["xip"]))
                    for i, s in d.get("snapshots", {}).items()})

    def held_sql(self) -> str | None:
        """Spark SQL over decoded events (`_txid`, `_position` and the key column): true for
        a change the bootstrap rows already hold. None when nothing is to be dropped."""
        if not self.snapshots:
            return None
        commit_lsn = "substring(_position, 1, 16)"
        if len(set(self.snapshots.values())) == 1:
            return next(iter(self.snapshots.values())).sees_sql("_txid", commit_lsn)
        branches = [f"WHEN {self.chunks[i].where_sql(self.key_column)} THEN {s.sees_sql('_txid', commit_lsn)}"
                    for i, s in sorted(self.snapshots.items())]
        return f"(CASE {' '.join(branches)} ELSE FALSE END)"


def check_not_running(table: str, properties: dict[str, str]) -> Bootstrap | None:
    """The table's finished bootstrap, if any; an unfinished one stops the job."""
    text = properties.get(PROPERTY)
    if not text:
        return None
    boot = Bootstrap.from_json(text)
    if boot.state != DONE:
        raise ApplyError(f"table {table}: its {boot.method} bootstrap ({boot.id}) is in progress or was "
                         f"interrupted, so the target is incomplete",
                         hint=f"finish it with `cdc bootstrap --table {table}` (it resumes), then run the job",
                         table=table)
    return boot
