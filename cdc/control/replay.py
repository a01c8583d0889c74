"""The window of a `cdc replay`: where to start reading a table's topic again. Pure."""
from __future__ import annotations

import datetime as dt
import json

from cdc.errors import ConfigError
from cdc.planning.position import POSITION_WIDTH

EARLIEST = -2  # Spark's per-partition code for the earliest offset


def _all_partitions(topic: str, given: dict[int, int], partitions: list[int]) -> dict[str, str]:
    offsets = {str(p): given.get(p, EARLIEST) for p in sorted(set(partitions) | set(given))}
    return {"startingOffsets": json.dumps({topic: offsets})}


def parse_offsets_arg(text: str, topic: str) -> dict[int, int]:
    """`{"<topic>": {"0": 42}}` or `{"0": 42}`."""
    try:
        doc = json.loads(text)
        if topic in doc:
            doc = doc[topic]
        return {int(p): int(o) for p, o in doc.items()}
    except (ValueError, TypeError, AttributeError):
        raise ConfigError(f"--from-offsets {text!r} is not JSON of the form "
                          f"{{\"{topic}\": {{\"<partition>\": <offset>}}}}") from None


def parse_timestamp_arg(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time (UTC when it has no zone)."""
    if text.isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--from-timestamp {text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1000)


def parse_position_arg(text: str) -> tuple[int, int]:
    """The Kafka (partition, offset) a stored `_cdc_position` ends with."""
    if len(text) != POSITION_WIDTH or any(c not in "0123456789abcdef" for c in text):
        raise ConfigError(f"--from-position {text!r} is not a cdc position ({POSITION_WIDTH} lower-case hex "
                          f"digits, as stored in _cdc_position)")
    return int(text[33:41], 16), int(text[41:], 16)


def check_start(topic: str, marks: dict[int, tuple[int, int]], *, offsets: str | None = None,
                timestamp: str | None = None, position: str | None = None,
                offsets_at=None, **_) -> None:
    """Refuse, before Spark starts, a replay start that Kafka cannot serve: a partition the
    topic lacks, an offset below 0, gone from Kafka or past the end, a time after the last
    record. `marks`: each partition's (earliest, end) offsets; `offsets_at(ms)`: each
    partition's first offset at or after a time (None where there is none)."""
    given = parse_offsets_arg(offsets, topic) if offsets else {}
    if position:
        given = dict([parse_position_arg(position)])
    for p, o in sorted(given.items()):
        if p not in marks:
            raise ConfigError(f"partition {p} is not a partition of topic {topic} (it has {sorted(marks)})")
        earliest, end = marks[p]
        if o < 0:
            raise ConfigError(f"offset {o} of partition {p} is negative: Kafka offsets start at 0")
        if o < earliest:
            raise ConfigError(f"offset {o} of partition {p} of topic {topic} is no longer in Kafka (the earliest "
                              f"it holds is {earliest})",
                              hint="replay from there (or --from-earliest); what went before is gone from Kafka: "
                                   "`cdc bootstrap` refills the table from the source")
        if o > end:
            raise ConfigError(f"offset {o} of partition {p} is past the end of topic {topic} ({end}): "
                              f"there is nothing to replay from there")
    if timestamp and offsets_at is not None:
        ms = parse_timestamp_arg(timestamp)
        if not any(o is not None for o in offsets_at(ms).values()):
            at = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()
            raise ConfigError(f"topic {topic} holds no record at or after {at}: there is nothing to replay",
                              hint="choose an earlier time, or --from-earliest")


def window(topic: str, partitions: list[int], *, earliest: bool = False, offsets: str | None = None,
           timestamp: str | None = None, position: str | None = None) -> dict[str, str]:
    """Kafka source options that start a replay of `topic` at the chosen point."""
    chosen = [x for x in (earliest or None, offsets, timestamp, position) if x]
    if len(chosen) != 1:
        raise ConfigError("choose exactly one of --from-earliest, --from-offsets, --from-timestamp, --from-position")
    if earliest:
        return {"startingOffsets": "earliest"}
    if offsets:
        return _all_partitions(topic, parse_offsets_arg(offsets, topic), partitions)
    if timestamp:
        return {"startingTimestamp": str(parse_timestamp_arg(timestamp))}
    partition, offset = parse_position_arg(position)
    return _all_partitions(topic, {partition: offset}, partitions)
