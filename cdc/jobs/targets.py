"""A registered table's target as a job opens it: the table, its decoding properties and
committed offsets, checked against Kafka and the registration, and where its query starts."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cdc.config.clients import kafka_access
from cdc.config.models import Settings, TableRegistration
from cdc.control import commits
from cdc.control.checkpoint import checkpoint_is_stale, committed_end_offsets
from cdc.control.gaps import check_offsets_available
from cdc.control.kafka import existing_topics, tail_record_bytes, topic_id, watermarks
from cdc.control.replay import window as replay_window
from cdc.errors import ApplyError
from cdc.log import log
from cdc.planning.bootstrap import check_not_running
from cdc.planning.protect import target_mask_key
from cdc.register.connector import topic_for
from cdc.sinks.formats import missing_table, open_table, ready_tables, shown_name, target_refs
from cdc.sinks.session import make_active
from cdc.sinks.table import SinkTable
from cdc.sinks.targets import PROP_SNAPSHOT, check_owner, check_protection, table_columns


@dataclass(frozen=True)
class Target:
    """A registered table's target as a job sees it."""

    ref: str
    table: SinkTable
    columns: tuple
    key: tuple[str, ...]
    topic: str
    committed: dict[int, int]
    topic_id: str | None
    held: str | None = None  # Spark SQL: true for a change the bootstrap rows already hold
    mask_key: bytes | None = None  # the masking key, checked against the target's
    partitions: tuple[int, ...] = ()  # the topic's partitions when the target was opened
    summary: dict | None = None  # its last commit's summary that records offsets
    start: dict[str, str] | None = None  # where its query starts (open_target's `checkpoint`)
    record_bytes: float | None = None  # the mean size of the topic's newest records (`sample`)
    deletes_ref: str = ""  # its delete memory
    dead_letters_ref: str | None = None  # its dead-letter table (the registration's on_error: dlq)


def load_target(spark, settings: Settings, reg: TableRegistration):
    """The reference and the table (sinks/formats.py) of a registered table's target."""
    ref = target_refs(settings, reg)[0]
    try:
        return ref, open_table(spark, ref)
    except Exception as e:  # noqa: BLE001 - py4j wraps NoSuchTableException
        if missing_table(e):
            raise ApplyError(f"target {shown_name(settings, reg)} of table {reg.name} does not exist",
                             hint=f"run `cdc register --table {reg.name}` first") from None
        raise


def open_target(spark, settings: Settings, reg: TableRegistration, checkpoint: Path | None = None,
                sample: bool = True) -> Target:
    """The target made ready for a job, its committed offsets checked against Kafka: a
    missing topic, a retention gap or a recreated topic stops here. `checkpoint`: the
    query's, moved aside if it belongs to another topic, and where the query starts
    (`start`); `sample`: the size of the topic's newest records (`record_bytes`), which
    sizes its batches unless the registration sets `max_offsets_per_trigger`. Each layer is
    asked once, in order: the registration's topic (register), the target and its side
    tables (sinks), Kafka, the offsets and the checkpoint (control), then the bootstrap
    under way and the masking key (planning)."""
    named = topic_for(reg.source.name, reg)

    make_active(spark)  # on the calling thread, which may not have made the session
    ref, table = load_target(spark, settings, reg)
    _, deletes_ref, dead_letters_ref = target_refs(settings, reg)
    properties = table.properties()
    columns, key, topic = table_columns(properties)
    check_owner(reg, properties, named, shown_name(settings, reg))
    check_protection(reg, properties)
    summary = table.last_committed_summary()
    unresumable = summary is None and table.written()  # told after a bootstrap under way, its cause
    by_name = {c.name: c for c in columns}
    ready_tables(spark, reg.name, table, deletes_ref, dead_letters_ref if reg.options.on_error == "dlq" else None,
                 [(k, by_name[k].spark_type) for k in key], settings.catalog.format_version)

    kafka = kafka_access(settings)
    if topic not in existing_topics(kafka):
        raise ApplyError(f"Kafka topic {topic} of table {reg.name} does not exist",
                         hint=f"run `cdc register --table {reg.name}` (it creates the topic and the connector)")
    committed = commits.parse_offsets(summary).get(topic, {})
    current_id, marks = topic_id(kafka, topic), watermarks(kafka, topic)
    check_offsets_available(reg.name, topic, committed, marks, (summary or {}).get(commits.TOPIC_ID), current_id)
    start = None if checkpoint is None else starting_point(reg, topic, committed, sorted(marks), checkpoint)
    sized = sample and not reg.options.max_offsets_per_trigger
    record_bytes = tail_record_bytes(kafka, topic, marks=marks) if sized else None

    boot = check_not_running(reg.name, properties)
    if boot is None and properties.get(PROP_SNAPSHOT) == "jdbc":
        raise ApplyError(f"table {reg.name} is registered with `snapshot: jdbc` and its rows have not been read yet",
                         hint=f"run `cdc bootstrap --table {reg.name}` (it fills the target, then the job streams on)",
                         table=reg.name)
    if unresumable:
        raise ApplyError(f"target {shown_name(settings, reg)} of table {reg.name} has commits but none in its "
                         f"history records cdc offsets (expired, or written by another tool), so the job cannot "
                         f"tell where to resume",
                         hint=f"re-apply the topic: `cdc replay --table {reg.name} --from-earliest`")
    return Target(ref, table, columns, key, topic, committed, current_id, boot.held_sql() if boot else None,
                  target_mask_key(settings, reg, properties), tuple(sorted(marks)), summary, start, record_bytes,
                  deletes_ref, dead_letters_ref)


def starting_point(reg: TableRegistration, topic: str, committed: dict[int, int], partitions: list[int],
                   checkpoint: Path) -> dict[str, str]:
    """Where a table's query starts: its checkpoint (moved aside first if it belongs to another
    topic), else the table's committed offsets (a partition the table has not seen from its
    earliest offset), else the registration's `starting_offsets`."""
    if checkpoint_is_stale(reg.name, topic, committed, committed_end_offsets(checkpoint)):
        aside = checkpoint.with_name(f"{checkpoint.name}.stale-{int(time.time())}")
        checkpoint.rename(aside)
        log(f"checkpoint {checkpoint} belongs to another topic; moved to {aside}, resuming from the table's "
            f"committed offsets", table=reg.name, event="checkpoint-moved", level="warning", stream=sys.stdout)
    if committed:
        return replay_window(topic, partitions, offsets=json.dumps({str(p): o for p, o in committed.items()}))
    return {"startingOffsets": reg.options.starting_offsets}
