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
"""
from __future__ import annotations

import json

POSITION_WIDTH = 16 + 16 + 1 + 8 + 16
SNAPSHOT_PHASE = 0
STREAM_PHASE = 1


def parse_lsn(value) -> int:
    """An LSN from a Debezium source block: an integer, a decimal string, or `X/Y` text."""
    if value is None or value == "":
        return 0
    if isinstance(value, int):
        return value
    text = str(value)
    if "/" in text:
        hi, lo = text.split("/", 1)
        return (int(hi, 16) << 32) | int(lo, 16)
    return int(text)


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


def encode(commit_lsn: int, event_lsn: int, phase: int, partition: int, offset: int) -> str:
    return f"{commit_lsn:016x}{event_lsn:016x}{phase:1d}{partition:08x}{offset:016x}"


def source_part(position: str) -> str:
    """The position without its Kafka tie-break: equal for redeliveries of one event."""
    return position[:33]
