"""What goes into an Iceberg snapshot summary with a batch's data, and what a new batch
may skip because the table's history already holds it. No I/O here."""
from __future__ import annotations

import json
from dataclasses import dataclass

OFFSETS = "cdc.offsets"  # {"<topic>": {"<partition>": <next offset to read>}}
# The offsets of the table's last commit before this one, where the batch started: a commit
# applies only while the table's last offsets are still these (jvm/direct OffsetsCheck).
OFFSETS_BEFORE = "cdc.offsets-before"
BATCH_ID = "cdc.batch-id"
JOB = "cdc.job"
POSITION = "cdc.position"  # highest source position applied so far
SOURCE_TS = "cdc.source-ts-ms"  # source commit time of that position
TRANSACTION = "cdc.transaction"  # {"id": <source transaction>, "order": <its change at that position, of the table's>}
TOPIC_ID = "cdc.topic-id"  # Kafka's id of the topic the offsets belong to
RECORD_SCHEMAS = "cdc.record-schemas"  # the JSON record schemas judged for the table (jobs/apply.py)


def parse_offsets(summary: dict | None) -> dict[str, dict[int, int]]:
    if not summary or OFFSETS not in summary:
        return {}
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in json.loads(summary[OFFSETS]).items()}


def parse_transaction(summary: dict | None) -> tuple[str, int] | None:
    """The source transaction of a summary's position, and the table's order of that change."""
    if not summary or TRANSACTION not in summary:
        return None
    t = json.loads(summary[TRANSACTION])
    return t["id"], int(t["order"])


@dataclass(frozen=True)
class PartitionRange:
    """Offsets of one Kafka partition in a batch: first and last record (inclusive)."""

    partition: int
    first: int
    last: int


def merged_offsets(committed: dict[int, int], batch: list[PartitionRange]) -> dict[int, int]:
    """The next offset to read per partition after this batch; never goes backwards."""
    out = dict(committed)
    for r in batch:
        out[r.partition] = max(out.get(r.partition, 0), r.last + 1)
    return out


def summary_properties(topic: str, offsets: dict[int, int], batch_id: int, job: str,
                       position: str | None, source_ts_ms: int | None,
                       previous: dict | None = None, topic_id: str | None = None,
                       transaction: tuple[str, int] | None = None) -> dict[str, str]:
    """The cdc keys of a batch's snapshot summary. Position, source time and `transaction`
    (Debezium's id and the table's order of the change at that position: the transaction
    topic's count for the table says whether the table holds all of it) carry over from
    `previous` (the last committed summary) and never go backwards; its offsets are the
    commit's `OFFSETS_BEFORE`."""
    previous = previous or {}
    if previous.get(POSITION) and (not position or previous[POSITION] > position):
        position, source_ts_ms = previous[POSITION], int(previous[SOURCE_TS]) if SOURCE_TS in previous else None
        transaction = parse_transaction(previous)
    props = {
        OFFSETS: json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}}),
        BATCH_ID: str(batch_id),
        JOB: job,
    }
    if previous.get(OFFSETS):
        props[OFFSETS_BEFORE] = previous[OFFSETS]
    if position:
        props[POSITION] = position
    if source_ts_ms is not None:
        props[SOURCE_TS] = str(source_ts_ms)
    if transaction:
        props[TRANSACTION] = json.dumps({"id": transaction[0], "order": transaction[1]})
    if topic_id:
        props[TOPIC_ID] = topic_id
    return props


# A snapshot an expiry removed is still described by the table metadata files written
# before it; this many of the newest are read, only when the current ancestry breaks off
# before a snapshot with offsets (cdc's own tables keep 10: iceberg_spark.METADATA_FILES).
PREVIOUS_METADATA_READ = 10


def newest_with_offsets(start, histories) -> dict | None:
    """The summary with cdc offsets of the newest snapshot in the ancestry of snapshot
    `start` (None: the table has none yet), or None when it holds none.
    `histories`: lookups from a snapshot id to its (summary, parent id), or None when not
    found; the table's current metadata first, then its previous metadata files, newest
    first, each taken from the iterable only once the ones before it miss a parent (so an
    older file is read only when an expiry removed the ancestor). A snapshot found in one
    file has its own ancestors in that file or an older one, never a newer one."""
    histories = iter(histories)
    lookup = next(histories, None)
    while start is not None and lookup is not None:
        found = lookup(start)
        if found is None:
            lookup = next(histories, None)
            continue
        summary, start = found
        if OFFSETS in summary:
            return summary
    return None
