"""A registered table's target as a job opens it: the table, its decoding properties and
committed offsets, checked against Kafka and the registration before a query starts."""
from __future__ import annotations

from dataclasses import dataclass

from cdc.config.clients import kafka_access
from cdc.config.models import Settings, TableRegistration
from cdc.control import commits
from cdc.control.gaps import check_offsets_available
from cdc.errors import ApplyError
from cdc.planning.bootstrap import check_not_running
from cdc.planning.protect import target_mask_key
from cdc.register.connector import topic_for
from cdc.register.topics import existing_topics, topic_id, watermarks
from cdc.sinks.formats import missing_table, open_table, shown_name, target_refs
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


def open_target(spark, settings: Settings, reg: TableRegistration) -> Target:
    """The target, its decoding properties and committed offsets, checked against Kafka:
    a missing topic, a retention gap or a recreated topic stops here."""
    ref, table = load_target(spark, settings, reg)
    properties = table.properties()
    columns, key, topic = table_columns(properties)
    check_owner(reg, properties, topic_for(reg.source.name, reg), shown_name(settings, reg))
    check_protection(reg, properties)
    boot = check_not_running(reg.name, properties)
    if boot is None and properties.get(PROP_SNAPSHOT) == "jdbc":
        raise ApplyError(f"table {reg.name} is registered with `snapshot: jdbc` and its rows have not been read yet",
                         hint=f"run `cdc bootstrap --table {reg.name}` (it fills the target, then the job streams on)",
                         table=reg.name)
    if topic not in existing_topics(kafka_access(settings)):
        raise ApplyError(f"Kafka topic {topic} of table {reg.name} does not exist",
                         hint=f"run `cdc register --table {reg.name}` (it creates the topic and the connector)")
    summary = table.last_committed_summary()
    if summary is None and table.written():
        raise ApplyError(f"target {shown_name(settings, reg)} of table {reg.name} has commits but none in its "
                         f"history records cdc offsets (expired, or written by another tool), so the job cannot "
                         f"tell where to resume",
                         hint=f"re-apply the topic: `cdc replay --table {reg.name} --from-earliest`")
    committed = commits.parse_offsets(summary).get(topic, {})
    current_id = topic_id(kafka_access(settings), topic)
    marks = watermarks(kafka_access(settings), topic)
    check_offsets_available(reg.name, topic, committed, marks, (summary or {}).get(commits.TOPIC_ID), current_id)
    return Target(ref, table, columns, key, topic, committed, current_id, boot.held_sql() if boot else None,
                  target_mask_key(settings, reg, properties), tuple(sorted(marks)))
