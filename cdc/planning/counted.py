"""Which change events a source count holds: the count's point in the source's log, and
for PostgreSQL its snapshot's transaction horizon. No I/O here.

A PostgreSQL count taken in a REPEATABLE READ snapshot holds exactly the transactions the
snapshot sees (planning/bootstrap.py `SourceSnapshot`: its xmin, xmax and in-progress
xids against each event's `source.txId`); a MariaDB count taken WITH CONSISTENT SNAPSHOT
holds the binary log up to the position the server reports for it. Debezium writes a
table's events to each Kafka partition in commit order, so the events a count holds are a
prefix of every partition: the reconciler finds where each prefix ends (control/barrier.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from cdc.planning.bootstrap import SourceSnapshot
from cdc.planning.position import after_count, mariadb_position, postgres_position
from cdc.sources.types import parse_lsn


@dataclass(frozen=True)
class CountPoint:
    """Where a source count was taken: its log position ((LSN,) for PostgreSQL, (binlog
    file index, pos) for MariaDB) and, for PostgreSQL, the snapshot it was read in."""

    position: tuple[int, ...]
    snapshot: SourceSnapshot | None = None

    @classmethod
    def of(cls, position: tuple[int, ...], horizon: str | None = None, wal_lsn: str | None = None) -> "CountPoint":
        """From the count's position and, for PostgreSQL, `pg_current_snapshot()::text` and
        `pg_current_wal_lsn()::text` read in its snapshot."""
        return cls(position, SourceSnapshot.parse(horizon, wal_lsn) if horizon and wal_lsn else None)

    def holds(self, source: dict, op: str) -> bool:
        """Whether the count reflects the change event with this `source` block and `op`."""
        if len(self.position) == 2:
            return not after_count(mariadb_position(source, op, 0, 0), self.position)
        commit_lsn = _commit_lsn(source)
        if self.snapshot is None or op == "r" or source.get("txId") is None:
            # A snapshot read reflects the source as of the last commit before it was read.
            return not after_count(postgres_position(source, op, 0, 0), self.position) if op != "r" \
                else commit_lsn <= self.position[0]
        return self.snapshot.sees(int(source["txId"]) % (1 << 32), commit_lsn)


def _commit_lsn(source: dict) -> int:
    """The first element of `source.sequence`: the last commit before the event's transaction."""
    sequence = source.get("sequence")
    if not sequence:
        return 0
    items = json.loads(sequence) if isinstance(sequence, str) else sequence
    return parse_lsn(items[0]) if items else 0
