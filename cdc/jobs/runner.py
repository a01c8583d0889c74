"""`cdc run`: one Structured Streaming query per registered table, each in its own
SparkSession (so snapshot properties never cross tables), in one Spark application."""
from __future__ import annotations

import json
import re
import signal
import threading
import time

from cdc.config.models import Settings, TableRegistration
from cdc.control import commits
from cdc.errors import ApplyError, CdcError
from cdc.jobs.apply import TableApplier
from cdc.jobs.session import get_session
from cdc.planning.merge import deletes_ref, table_ref
from cdc.control.checkpoint import committed_end_offsets, decide_start
from cdc.control.gaps import check_offsets_available
from cdc.register.topics import existing_topics, watermarks
from cdc.sinks import iceberg_spark
from cdc.sinks.iceberg import table_columns


def _starting_offsets(settings: Settings, reg: TableRegistration, topic: str, committed: dict[int, int]) -> str:
    """Where a query with no checkpoint starts: after what the table already holds, else
    at the registration's choice (earliest by default)."""
    if committed:
        return json.dumps({topic: {str(p): o for p, o in committed.items()}})
    return reg.options.starting_offsets


def start_query(spark, settings: Settings, reg: TableRegistration, available_now: bool):
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
    committed = commits.parse_offsets(iceberg_spark.last_committed_summary(table)).get(topic, {})
    check_offsets_available(reg.name, topic, committed, watermarks(settings.kafka_bootstrap, topic))
    checkpoint = settings.path(settings.spark.checkpoint_dir) / reg.name
    if decide_start(reg.name, topic, committed, committed_end_offsets(checkpoint)).stale:
        aside = checkpoint.with_name(f"{checkpoint.name}.stale-{int(time.time())}")
        checkpoint.rename(aside)
        print(f"{reg.name}: checkpoint {checkpoint} belongs to another topic; moved to {aside}, "
              f"resuming from the table's committed offsets")
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", _starting_offsets(settings, reg, topic, committed))
              .option("failOnDataLoss", "true")
              .option("includeHeaders", "false"))
    if reg.options.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(reg.options.max_offsets_per_trigger))
    applier = TableApplier(reg.name, ref, topic, columns, key, job=f"{reg.name}@{checkpoint}", checkpoint=checkpoint,
                           deletes_ref=deletes_ref(settings.catalog.name, reg.target),
                           delete_horizon_hours=reg.options.delete_horizon_hours).prepare(spark)
    writer = (reader.load().writeStream.queryName(reg.name).foreachBatch(applier)
              .option("checkpointLocation", str(checkpoint)))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="2 seconds")
    return writer.start()


def _failure(name: str, exc: BaseException) -> CdcError:
    text = str(exc)
    m = re.search(r"cdc\.errors\.\w+: (.*?)(?:\n\s*at |\Z)", text, re.S)
    detail = m.group(1).strip() if m else text.strip().splitlines()[0] if text.strip() else repr(exc)
    if "KAFKA_DATA_LOSS" in text or "data loss" in text.lower():
        return ApplyError(f"table {name}: Kafka no longer holds offsets the job has not applied ({detail[:500]})",
                          hint=f"the gap cannot be replayed; re-bootstrap the table (`cdc bootstrap --table {name}`)")
    return ApplyError(f"table {name}: the streaming query failed: {detail[:3000]}")


def _run_until_stopped(spark, queries: dict) -> None:
    """Until a query fails (raise) or SIGTERM/SIGINT asks for a stop (return after the
    queries stop; a batch cut short is not committed and runs again on the next start)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.is_set():
            spark.streams.awaitAnyTermination(1)  # seconds
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
    try:
        for reg in tables:
            queries[reg.name] = start_query(spark.newSession(), settings, reg, available_now)
        if available_now:
            for name, q in queries.items():
                try:
                    q.awaitTermination()
                except Exception as e:  # noqa: BLE001 - StreamingQueryException from py4j
                    raise _failure(name, e) from None
                print(f"{name}: caught up")
        else:
            _run_until_stopped(spark, queries)
    finally:
        for q in queries.values():
            if q.isActive:
                q.stop()
