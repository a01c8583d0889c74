"""Where a source count ends in a table's topic: each partition's first record the count
does not hold (planning/counted.py), found by reading a few single records
(control/kafka.py `RecordProbe`, control/barrier.py `first_uncounted`)."""
from __future__ import annotations

import functools

from cdc.config.clients import kafka_access
from cdc.config.models import Settings
from cdc.control.barrier import first_uncounted
from cdc.control.kafka import RecordProbe, watermarks
from cdc.decoding.avro import SchemaRegistry, record_value
from cdc.decoding.envelope import is_non_data, payload_of
from cdc.errors import DecodeError
from cdc.planning.counted import CountPoint


def boundary(settings: Settings, topic: str, point: CountPoint, avro: bool) -> dict[int, int]:
    """Each partition's offset of the first record the count at `point` does not hold (its
    end when it holds them all). Read once every change the count holds is in Kafka."""
    body_of = functools.partial(_avro_body, registry=SchemaRegistry.of(settings)) if avro else _json_body
    marks = watermarks(kafka_access(settings), topic)
    found = {}
    with RecordProbe(kafka_access(settings), topic) as probe:
        for partition, (low, high) in sorted(marks.items()):
            found[partition] = first_uncounted(low, high, functools.partial(
                _counted, probe, partition, low, high, point, body_of))
    return found


def _counted(probe: RecordProbe, partition: int, low: int, high: int, point: CountPoint, body_of,
             offset: int) -> bool:
    """Whether the count holds the record at `offset` (or the first kept after it). A
    tombstone, a record that is no change (or does not decode) goes with the record before
    it: a tombstone follows its delete."""
    msg = probe.at(partition, offset)
    if msg is None or msg.offset() >= high:
        return False
    at = msg.offset()
    while True:
        body = body_of(msg)
        if body is not None:
            return point.holds(body.get("source") or {}, str(body.get("op")))
        step = 1
        while True:  # the nearest record before it (compaction leaves gaps, never in the newest segment)
            if at - step < low:
                return True  # nothing before it: the count holds what precedes the topic's first change
            msg = probe.at(partition, at - step)
            if msg is not None and msg.offset() < at:
                at = msg.offset()
                break
            step *= 2


def _json_body(msg) -> dict | None:
    try:
        body = payload_of(msg.value())
    except DecodeError:
        return None
    return None if body is None or is_non_data(body) or body.get("op") is None else body


def _avro_body(msg, registry: SchemaRegistry) -> dict | None:
    if msg.value() is None:
        return None
    try:
        body = record_value(msg.value(), msg.offset(), registry)
    except DecodeError:
        return None
    return body if isinstance(body, dict) and body.get("op") is not None else None
