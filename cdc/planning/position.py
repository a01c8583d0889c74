"""Source positions that totally order the changes of one key.

A position is a fixed-width hex string, so that plain string comparison orders it in
every engine (Spark, pyiceberg, DuckDB) and it can be stored per row as `_cdc_position`:

    <commit LSN:16><event LSN:16><phase:1><kafka partition:8><kafka offset:16>

PostgreSQL: `source.sequence` is `["<last committed LSN>", "<current LSN>"]`; events of
one transaction share the first element and are ordered by the second; transactions
arrive in commit order, so the first element never goes backwards. A missing element is
0. `phase` is 0 for snapshot reads (`r`) and 1 for streamed changes, so a snapshot read
sorts before a streamed change at the same LSN. Kafka (partition, offset) breaks ties
between events that share one LSN (several DML events can, DBZ-1554).

MariaDB: the binary log file's sequence number takes the commit part, and the event
part is `pos << 20 | row` (the event's offset in that file and the row within the event),
compared as numbers, never as text. Rows of one event share `pos`; `row` orders them.
"""
from __future__ import annotations

import json

from cdc.sources.types import parse_lsn

POSITION_WIDTH = 16 + 16 + 1 + 8 + 16
SNAPSHOT_PHASE = 0
STREAM_PHASE = 1


def postgres_position(source: dict, op: str, partition: int, offset: int) -> str:
    """The position of one PostgreSQL change event (see the module docstring)."""
    sequence = source.get("sequence")
    commit_lsn, event_lsn = 0, 0
    if sequence:
        items = (json.loads(sequence) if isinstance(sequence, str) else sequence) + [None, None]
        commit_lsn, event_lsn = parse_lsn(items[0]), parse_lsn(items[1])
    if not event_lsn:
        event_lsn = parse_lsn(source.get("lsn"))
    phase = SNAPSHOT_PHASE if op == "r" else STREAM_PHASE
    return encode(commit_lsn, event_lsn, phase, partition, offset)


ROW_BITS = 20  # rows of one binary log event (an event holds far fewer)


def mariadb_position(source: dict, op: str, partition: int, offset: int) -> str:
    """The position of one MariaDB change event (see the module docstring)."""
    import re

    m = re.search(r"\.(\d+)$", str(source.get("file") or ""))
    file_index = int(m.group(1)) if m else 0
    pos, row = int(source.get("pos") or 0), int(source.get("row") or 0)
    event = (pos << ROW_BITS) | min(row, (1 << ROW_BITS) - 1) if m else 0
    return encode(file_index, event, SNAPSHOT_PHASE if op == "r" else STREAM_PHASE, partition, offset)


def after_count(position: str, source_position: tuple[int, ...]) -> bool:
    """Whether a target's position holds a change made after a source count taken at
    `source_position`: (LSN,) for PostgreSQL, (binlog file index, pos) for MariaDB."""
    commit, event = int(position[:16], 16), int(position[16:32], 16)
    if len(source_position) == 1:
        return commit > source_position[0]
    return (commit, event >> ROW_BITS) >= source_position


def encode(commit_lsn: int, event_lsn: int, phase: int, partition: int, offset: int) -> str:
    return f"{commit_lsn:016x}{event_lsn:016x}{phase:1d}{partition:08x}{offset:016x}"


def source_part(position: str) -> str:
    """The position without its Kafka tie-break: equal for redeliveries of one event."""
    return position[:33]
