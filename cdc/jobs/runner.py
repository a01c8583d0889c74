"""`cdc run`: one Structured Streaming query per registered table, each in its own
SparkSession (so snapshot properties never cross tables), in one Spark application."""
from __future__ import annotations

import json
import re
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cdc.config.models import Settings, TableRegistration
from cdc.control import commits, jobstate
from cdc.errors import ApplyError, CdcError
from cdc.jobs.apply import TableApplier
from cdc.jobs.session import get_session
from cdc.planning.merge import deletes_ref, table_ref
from cdc.control.checkpoint import committed_end_offsets, decide_start
from cdc.control.gaps import REFILL, check_offsets_available
from cdc.control.replay import window as replay_window
from cdc.register.topics import existing_topics, watermarks
from cdc.sinks import iceberg_spark
from cdc.sinks.iceberg import table_columns


@dataclass(frozen=True)
class Target:
    """A registered table's target as a job sees it."""

    ref: str
    table: object  # org.apache.iceberg.Table
    columns: tuple
    key: tuple[str, ...]
    topic: str
    committed: dict[int, int]


def open_target(spark, settings: Settings, reg: TableRegistration) -> Target:
    """The target, its decoding properties and committed offsets, checked against Kafka:
    a missing topic, a retention gap or a recreated topic stops here."""
    ref = table_ref(settings.catalog.name, reg.target)
    try:
        table = iceberg_spark.load_table(spark, ref)
    except Exception as e:  # noqa: BLE001 - py4j wraps NoSuchTableException
        if "NoSuchTable" in str(e) or "not found" in str(e).lower():
            raise ApplyError(f"target {ref} of table {reg.name} does not exist",
                             hint=f"run `cdc register --table {reg.name}` first") from None
        raise
    columns, key, topic = table_columns(iceberg_spark.properties(table))
    if topic not in existing_topics(settings.kafka_bootstrap):
        raise ApplyError(f"Kafka topic {topic} of table {reg.name} does not exist",
                         hint=f"run `cdc register --table {reg.name}` (it creates the topic and the connector)")
    summary = iceberg_spark.last_committed_summary(table)
    if summary is None and iceberg_spark.current_snapshot_id(table) is not None:
        raise ApplyError(f"target {ref} of table {reg.name} has snapshots but none in its history records cdc "
                         f"offsets (expired, or written by another tool), so the job cannot tell where to resume",
                         hint=f"re-apply the topic: `cdc replay --table {reg.name} --from-earliest`")
    committed = commits.parse_offsets(summary).get(topic, {})
    check_offsets_available(reg.name, topic, committed, watermarks(settings.kafka_bootstrap, topic))
    return Target(ref, table, columns, key, topic, committed)


def _query(spark, settings: Settings, reg: TableRegistration, target: Target, checkpoint: Path,
           start: dict[str, str], available_now: bool, skip_committed: bool = True):
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
              .option("subscribe", target.topic)
              .option("failOnDataLoss", "true")
              .option("includeHeaders", "false")
              .options(**start))
    if reg.options.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(reg.options.max_offsets_per_trigger))
    applier = TableApplier(reg.name, target.ref, target.topic, target.columns, target.key,
                           job=f"{reg.name}@{checkpoint}", checkpoint=checkpoint, skip_committed=skip_committed,
                           deletes_ref=deletes_ref(settings.catalog.name, reg.target),
                           delete_horizon_hours=reg.options.delete_horizon_hours).prepare(spark)
    writer = (reader.load().writeStream.queryName(reg.name).foreachBatch(applier)
              .option("checkpointLocation", str(checkpoint)))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="2 seconds")
    return writer.start()


def start_query(spark, settings: Settings, reg: TableRegistration, available_now: bool):
    """The table's regular query: from its checkpoint, or from the table's committed
    offsets when the checkpoint is missing or stale."""
    target = open_target(spark, settings, reg)
    checkpoint = settings.path(settings.spark.checkpoint_dir) / reg.name
    if decide_start(reg.name, target.topic, target.committed, committed_end_offsets(checkpoint)).stale:
        aside = checkpoint.with_name(f"{checkpoint.name}.stale-{int(time.time())}")
        checkpoint.rename(aside)
        print(f"{reg.name}: checkpoint {checkpoint} belongs to another topic; moved to {aside}, "
              f"resuming from the table's committed offsets")
    if target.committed:  # partitions the table has not seen yet start at their earliest offset
        partitions = sorted(watermarks(settings.kafka_bootstrap, target.topic))
        start = replay_window(target.topic, partitions, offsets=json.dumps({str(p): o for p, o in
                                                                           target.committed.items()}))
    else:
        start = {"startingOffsets": reg.options.starting_offsets}
    return _query(spark, settings, reg, target, checkpoint, start, available_now)


def replay(settings: Settings, reg: TableRegistration, **window_args) -> None:
    """Re-read a window of the table's topic up to its current end and re-apply it.
    Position guards and the delete memory keep newer rows and deleted keys as they are;
    the committed offsets and position never go backwards."""
    spark = get_session(settings).newSession()
    target = open_target(spark, settings, reg)
    start = replay_window(target.topic, sorted(watermarks(settings.kafka_bootstrap, target.topic)), **window_args)
    checkpoint = settings.path(settings.spark.checkpoint_dir) / f"{reg.name}.replay-{int(time.time() * 1000)}"
    query = _query(spark, settings, reg, target, checkpoint, start, available_now=True, skip_committed=False)
    try:
        query.awaitTermination()
    except Exception as e:  # noqa: BLE001 - StreamingQueryException from py4j
        raise _failure(reg.name, e) from None
    shutil.rmtree(checkpoint, ignore_errors=True)
    print(f"{reg.name}: replayed up to the end of {target.topic}")


def _failure(name: str, exc: BaseException) -> CdcError:
    text = str(exc)
    m = re.search(r"cdc\.errors\.\w+: (.*?)(?:\n\s*at |\Z)", text, re.S)
    detail = m.group(1).strip() if m else text.strip().splitlines()[0] if text.strip() else repr(exc)
    if "KAFKA_DATA_LOSS" in text or "data loss" in text.lower():
        return ApplyError(f"table {name}: Kafka no longer holds offsets the job has not applied ({detail[:500]})",
                          hint="the gap cannot be replayed from Kafka; " + REFILL.format(table=name), table=name)
    return ApplyError(f"table {name}: the streaming query failed: {detail[:3000]}", table=name)


def _run_until_stopped(spark, queries: dict) -> None:
    """Until a query fails (raise) or SIGTERM/SIGINT asks for a stop (return after the
    queries stop; a batch cut short is not committed and runs again on the next start)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.is_set():
            try:
                spark.streams.awaitAnyTermination(1)  # seconds
            except Exception:  # noqa: BLE001 - a query failed: found and reported below
                pass
            for name, q in queries.items():
                if not q.isActive:
                    exc = q.exception()
                    raise _failure(name, exc) if exc is not None else ApplyError(f"table {name}: query stopped")
        print("stop requested: stopping the queries")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(settings: Settings, tables: list[TableRegistration], available_now: bool) -> None:
    if not tables:
        raise ApplyError("no tables are registered", hint=f"add registrations under {settings.tables_dir}/")
    spark = get_session(settings)
    queries = {}
    state = settings.state_dir
    try:
        for reg in tables:
            try:
                queries[reg.name] = start_query(spark.newSession(), settings, reg, available_now)
            except CdcError as e:
                e.table = e.table or reg.name
                raise
            jobstate.record(state, reg.name, jobstate.RUNNING)
        if available_now:
            for name, q in queries.items():
                try:
                    q.awaitTermination()
                except Exception as e:  # noqa: BLE001 - StreamingQueryException from py4j
                    raise _failure(name, e) from None
                jobstate.record(state, name, jobstate.CAUGHT_UP)
                print(f"{name}: caught up")
        else:
            _run_until_stopped(spark, queries)
            for name in queries:
                jobstate.record(state, name, jobstate.STOPPED)
    except CdcError as e:
        for name in ([e.table] if e.table else list(queries)):
            jobstate.record(state, name, jobstate.FAILED, e.message)
        raise
    finally:
        for q in queries.values():
            if q.isActive:
                q.stop()
