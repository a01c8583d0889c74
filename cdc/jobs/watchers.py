"""What a running job watches beside its queries: each table's lag behind Kafka's end,
whether Kafka answers, and whether each source still captures."""
from __future__ import annotations

import threading

from cdc.config.clients import kafka_access
from cdc.config.models import Settings, TableRegistration
from cdc.control.checkpoint import committed_end_offsets
from cdc.errors import CdcError
from cdc.jobs import metrics
from cdc.jobs.backlog import CatchUp
from cdc.log import log
from cdc.register.capture import source_capture
from cdc.register.connector import topic_for
from cdc.control.kafka import end_offsets, existing_topics

LAG_EVERY_S = 5.0  # how often a running table's lag gauge is read from Kafka


def read_lag(settings: Settings, reg: TableRegistration, ends: dict[int, int] | None = None,
             done: dict[int, int] | None = None) -> tuple[int, int] | None:
    """The table's lag gauge: Kafka's end offsets (`ends`, read now if not given) against
    the offsets it has applied (`done`, a shared query's table; else the end of the newest
    batch its checkpoint marks committed; a lag that cannot be read now is read next time).
    Returns the records left in all partitions and the sum of the offsets applied (None:
    unknown now)."""
    topic = topic_for(reg.source.name, reg)
    if ends is None:
        try:
            ends = end_offsets(kafka_access(settings), [topic]).get(topic)
        except CdcError:
            return None
    if not ends:  # the topic is not there (yet): the job's own check names it
        return None
    if done is None:
        done = (committed_end_offsets(settings.path(settings.spark.checkpoint_dir) / reg.name) or {}).get(topic, {})
    metrics.record_lag(reg.name, ends, done)
    return sum(max(0, hi - done.get(p, 0)) for p, hi in ends.items()), sum(done.values())


def watch_lag(settings: Settings, tables_now, stop: threading.Event, applied=lambda table: None) -> None:
    """Every LAG_EVERY_S until `stop`: Kafka's reachability, each table's lag (with a
    progress line while it is far behind; the end offsets of all the tables' topics in one
    request; `applied`: a shared query's table's applied offsets, else None) and each
    source's capture, off the supervisor's loop (a Kafka or Connect outage stalls only this
    thread). `tables_now()` gives the tables the job runs now: one removed or lent to a command
    is watched no more."""
    capturing: dict[str, bool] = {}
    reachable = {"kafka": True}
    catchups: dict[str, CatchUp] = {}
    while True:
        tables: list[TableRegistration] = tables_now()
        topics = {reg.name: topic_for(reg.source.name, reg) for reg in tables}
        for name in set(catchups) - set(topics):  # a table taken back later starts its progress anew
            del catchups[name]
        if watch_kafka(settings, reachable):
            try:
                ends = end_offsets(kafka_access(settings), sorted(set(topics.values()))) if topics else {}
            except CdcError:
                ends = {}
            for reg in tables:
                lag = read_lag(settings, reg, ends.get(topics[reg.name], {}), applied(reg.name))
                if lag is not None:
                    catchups.setdefault(reg.name, CatchUp(reg.name)).seen(*lag)
        for source in sorted({t.source.name for t in tables}):
            watch_capture(settings, source, capturing)
        if stop.wait(LAG_EVERY_S):
            return


def watch_kafka(settings: Settings, reachable: dict[str, bool]) -> bool:
    """Whether Kafka answers; one log line when it stops answering and one when it is back
    (the queries wait for it meanwhile)."""
    try:
        existing_topics(kafka_access(settings), timeout_s=LAG_EVERY_S)
        up, reason = True, None
    except CdcError as e:
        up, reason = False, e.message
    if reachable["kafka"] and not up:
        log(f"{reason}; the jobs wait for it", event="kafka-unreachable", level="warning",
            bootstrap=settings.kafka_bootstrap)
    elif up and not reachable["kafka"]:
        log(f"Kafka at {settings.kafka_bootstrap} is reachable again", event="kafka-reachable",
            bootstrap=settings.kafka_bootstrap)
    reachable["kafka"] = up
    return up


def watch_capture(settings: Settings, source: str, capturing: dict[str, bool]) -> None:
    """The source's capture as a gauge, and one log line when it stops and one when it is
    back (`capturing`: what the previous look found, per source)."""
    found = source_capture(settings, source, slot=False)
    metrics.CAPTURING.labels(source).set(1 if found["capturing"] else 0)
    before = capturing.get(source, True)
    if before and not found["capturing"]:
        log(f"source {source} is not capturing: {found['reason']}", event="capture-stopped", level="warning",
            source=source, reason=found["reason"])
    elif found["capturing"] and not before:
        log(f"source {source} is capturing again", event="capture-resumed", source=source)
    capturing[source] = found["capturing"]
