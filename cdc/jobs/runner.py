"""`cdc run`: one Structured Streaming query per registered table, or one over the topics of
many (`spark.shared_query`, jobs/shared.py), in one Spark application. Spark runs each
query's batches in a session of their own, and a shared query applies each table in its
own, so snapshot properties never cross tables."""
from __future__ import annotations

import hashlib
import itertools
import json
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from cdc.config.clients import java_kafka_properties, kafka_access
from cdc.config.loader import load_tables
from cdc.config.models import Settings, TableRegistration
from cdc.control import commits, jobstate
from cdc.control.checkpoint import checkpoint_is_stale, committed_end_offsets
from cdc.control.gaps import check_offsets_available
from cdc.control.replay import check_start, window as replay_window
from cdc.decoding.avro import SchemaRegistry
from cdc.errors import ApplyError, Busy, CdcError
from cdc.jobs import metrics, shared
from cdc.jobs import shutdown
from cdc.jobs.backlog import PROGRESS_EVERY_S, CatchUp, auto_batch_cap, batch_sizing, claim, heap_bytes
from cdc.jobs.apply import TableApplier
from cdc.jobs.failures import diagnose
from cdc.log import log
from cdc.planning.bootstrap import check_not_running
from cdc.planning.protect import target_mask_key
from cdc.register.capture import source_capture
from cdc.register.connector import topic_for
from cdc.register.topics import end_offsets, existing_topics, offsets_at, tail_record_bytes, topic_id, watermarks
from cdc.sinks.formats import open_table, shown_name, target_refs
from cdc.sinks.session import get_session, make_active
from cdc.sinks.targets import PROP_SNAPSHOT, check_owner, check_protection, table_columns
from cdc.waiting import poll_until


@dataclass(frozen=True)
class Target:
    """A registered table's target as a job sees it."""

    ref: str
    table: object  # sinks/formats.py: IcebergTarget or DeltaTarget
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
        if any(m in str(e) for m in ("NoSuchTable", "TABLE_OR_VIEW_NOT_FOUND")) or "not found" in str(e).lower():
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


def batch_cap(spark, settings: Settings, reg: TableRegistration, topic: str, batches: int) -> int | None:
    """The most records a batch of the table takes: its `max_offsets_per_trigger`, else
    sized from the memory and the size of the topic's newest records (backlog.py),
    `batches` under way at once sharing the memory."""
    if reg.options.max_offsets_per_trigger:
        return None
    record_bytes = tail_record_bytes(kafka_access(settings), topic)
    cap = auto_batch_cap(heap_bytes(spark), record_bytes, batches)
    log(f"batches of at most {cap:,} records"
        + (f" (about {record_bytes:,.0f} bytes a record)" if record_bytes else " (no record to size yet)"),
        table=reg.name, event="batch-cap", records=cap, record_bytes=round(record_bytes or 0))
    return cap


def kafka_options(spark, settings: Settings) -> dict[str, str]:
    """The Kafka source's options as every read of the job sets them (what to read, from
    where, and how much a batch takes are the read's)."""
    return {
        "kafka.bootstrap.servers": settings.kafka_bootstrap,
        **{f"kafka.{k}": v for k, v in java_kafka_properties(settings).items()},
        "failOnDataLoss": "true",
        "includeHeaders": "true",  # a key change's two events carry theirs
        # A fetch that finds no record waits this long at the broker (Kafka's default
        # 500 ms), and a small batch's read met one: a batch of 5 records read in 0.57 s.
        "kafka.fetch.max.wait.ms": str(FETCH_WAIT_MS),
        # What a fetch takes of a partition, and so what each cached consumer holds between
        # batches (the driver's JVM keeps one per partition read): a record bigger than
        # this still comes whole, as the first batch of its fetch.
        "kafka.max.partition.fetch.bytes": str(FETCH_PARTITION_BYTES),
        # A topic with fewer partitions than cores is still read and decoded on every core.
        "minPartitions": str(spark.sparkContext.defaultParallelism),
    }


def kafka_range(spark, settings: Settings, topic: str, start: dict[int, int], end: dict[int, int], group: str):
    """The records of `topic` from `start` (a partition it lacks: from its earliest) up to
    `end`, each partition's, as a shared query's table reads its part of a batch: the
    columns of the streaming source's batches. The reads of one `group` share their Kafka
    consumers: the executors keep them cached by group and partition, and a batch read
    otherwise names a new group each time, so each read made (and connected) new ones.
    Partitions are assigned, never subscribed, and no offset is committed to the group."""
    return (spark.read.format("kafka").options(**kafka_options(spark, settings))
            .option("kafka.group.id", group)
            .option("assign", json.dumps({topic: sorted(end)}))
            .option("startingOffsets", json.dumps({topic: {str(p): start.get(p, shared.EARLIEST) for p in end}}))
            .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in end.items()}}))
            .load())


def make_applier(spark, settings: Settings, reg: TableRegistration, target: Target, checkpoint: Path,
                 skip_committed: bool = True, applier_type: type[TableApplier] = TableApplier) -> TableApplier:
    """The table's applier, prepared in `spark` (the table's own session)."""
    _, deletes, dead_letters = target_refs(settings, reg)
    return applier_type(reg.name, target.ref, target.topic, target.columns, target.key,
                        job=f"{reg.name}@{checkpoint}", checkpoint=checkpoint, skip_committed=skip_committed,
                        topic_id=target.topic_id, held=target.held, on_error=reg.options.on_error,
                        dead_letters_ref=dead_letters, deletes_ref=deletes,
                        delete_horizon_hours=reg.options.delete_horizon_hours,
                        compact_every_files=reg.options.compact_every_files,
                        max_snapshots=reg.options.max_snapshots, max_record_bytes=settings.kafka.max_record_bytes,
                        source_kind=settings.sources[reg.source.name].kind,
                        registry=registry_of(settings, reg),
                        mode=reg.mode, excluded=reg.exclude,
                        masked=reg.mask, mask_key=target.mask_key,
                        format_version=settings.catalog.format_version).prepare(spark)


def stream_query(spark, settings: Settings, reg: TableRegistration, target: Target, checkpoint: Path,
                 start: dict[str, str], available_now: bool, skip_committed: bool = True,
                 applier_type: type[TableApplier] = TableApplier, tables: int = 1):
    """The table's streaming query from `start`, each micro-batch applied by an
    `applier_type` (the benchmark swaps the apply step for an append); `tables` run in the
    application, and the batches under way at once (at most its slots) share its memory."""
    slots = batch_slots(spark, settings)
    reader = (spark.readStream.format("kafka").options(**kafka_options(spark, settings))
              .option("subscribe", target.topic)
              .options(**batch_sizing(reg.options, available_now,
                                      batch_cap(spark, settings, reg, target.topic, min(tables, slots.n))))
              .options(**start))
    applier = make_applier(spark, settings, reg, target, checkpoint, skip_committed, applier_type)
    gate = _gates[reg.name] = BatchGate(applier, slots, applier.planned_records)
    return _started(reader, reg.name, gate, checkpoint, available_now, reg.options.trigger_interval_s)


def shared_query(spark, settings: Settings, name: str, members: dict[str, tuple], checkpoint: Path,
                 available_now: bool, tables: int, away: tuple[str, ...] = ()):
    """Shared query `name` over its `members` (table name -> (registration, its session,
    its opened Target)), from each table's committed offsets, in a new `checkpoint`; `tables`
    run in the application. It also reads topics `away` (of its tables now in queries of their
    own) from their end, so that those tables can join it again. Returns the query and its
    SharedBatch."""
    slots = batch_slots(spark, settings)
    regs = [reg for reg, _, _ in members.values()]
    topics = sorted({t.topic for _, _, t in members.values()})
    away = tuple(sorted(set(away) - set(topics)))
    with ThreadPoolExecutor(START_THREADS, thread_name_prefix="cdc-start") as pool:  # 0.2 s each, waiting on Kafka
        sized = max((size or 0 for size in pool.map(partial(tail_record_bytes, kafka_access(settings)), topics)),
                    default=0)
    cap = auto_batch_cap(heap_bytes(spark), sized or None, min(tables - len(members) + 1, slots.n))
    log(f"one query reads the topics of {len(members)} tables, in batches of at most {cap:,} records",
        table=name, event="shared-query", tables=sorted(members), records=cap)
    latest = [t.topic for reg, _, t in members.values() if not t.committed and reg.options.starting_offsets == "latest"]
    ends = end_offsets(kafka_access(settings), latest + list(away)) if latest or away else {}  # read from the end
    away = tuple(topic for topic in away if ends.get(topic))  # a topic not there (yet) is left out
    start = shared.starting_offsets([(t.topic, t.committed or ends.get(t.topic, {}), t.partitions)
                                     for _, _, t in members.values()]
                                    + [(topic, ends[topic], tuple(ends[topic])) for topic in away])
    reader = (spark.readStream.format("kafka").options(**kafka_options(spark, settings))
              .option("subscribe", ",".join(topics + list(away)))
              .options(**batch_sizing(regs[0].options, available_now, cap))
              .option("startingOffsets", start))

    def prepared(member: tuple) -> TableApplier:
        reg, session, target = member
        make_active(session)
        return make_applier(session, settings, reg, target, checkpoint)

    with ThreadPoolExecutor(START_THREADS, thread_name_prefix="cdc-start") as pool:
        appliers = dict(zip(members, pool.map(prepared, members.values())))

    def read(table: str, first: dict[int, int], last: dict[int, int]):
        session = batch.sessions[table]
        make_active(session)  # on the worker's thread
        return kafka_range(session, settings, appliers[table].topic, first, last, f"cdc-shared-{table}")

    batch = _gates[name] = shared.SharedBatch(appliers, read, checkpoint, slots, start, cap)
    batch.sessions.update({n: session for n, (_, session, _) in members.items()})
    return _started(reader, name, batch, checkpoint, available_now, regs[0].options.trigger_interval_s), batch


def _started(reader, name: str, each_batch, checkpoint: Path, available_now: bool, interval_s: float):
    """The query of `reader` started: `each_batch` applies its micro-batches."""
    writer = (reader.load().writeStream.queryName(name).foreachBatch(each_batch)
              .option("checkpointLocation", str(checkpoint)))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=f"{int(interval_s * 1000)} milliseconds"))
    return writer.start()  # a batch's jobs run in a fair-scheduler pool by its size (apply.size_pool)


class BatchSlots:
    """The batches a job applies at once, at most `n` of all its tables'. A freed slot goes
    to the waiting batch with the strongest claim (backlog.claim: its records, and how long
    it has waited)."""

    def __init__(self, n: int, clock=time.monotonic):
        self.n = self.free = n
        self.clock = clock
        self.cond = threading.Condition()
        self.waiting: dict[int, tuple[int | None, float]] = {}  # ticket -> (records, waiting since)
        self.granted: set[int] = set()
        self.tickets = itertools.count()

    def claim(self, ticket: int, now: float) -> float:
        records, since = self.waiting[ticket]
        return claim(records, now - since)

    @contextmanager
    def held(self, records: int | None):
        """Wait for a slot for a batch of `records` (None: unknown, counted as big), hold it."""
        with self.cond:
            ticket = next(self.tickets)
            self.waiting[ticket] = (records, self.clock())
            self._grant()
            try:
                while ticket not in self.granted:
                    self.cond.wait()
            except BaseException:  # interrupted while it waited: the slot is not held
                if self.waiting.pop(ticket, None) is None:  # granted meanwhile: given back
                    self.free += 1
                    self._grant()
                self.granted.discard(ticket)
                raise
            self.granted.remove(ticket)
        try:
            yield
        finally:
            with self.cond:
                self.free += 1
                self._grant()

    def _grant(self) -> None:
        """The free slots to the strongest claims (the caller holds `cond`)."""
        while self.free and self.waiting:
            now = self.clock()
            ticket = max(self.waiting, key=lambda t: (self.claim(t, now), -t))
            del self.waiting[ticket]
            self.granted.add(ticket)
            self.free -= 1
        self.cond.notify_all()


class BatchGate:
    """A query's foreachBatch function around its applier. `close` lets the batch being
    applied finish and refuses those after it, so a query stops between two batches: Spark's
    own stop interrupts the query's thread, and with it a MERGE or a commit under way.
    A batch is applied once it holds one of the application's `slots` (`batch_slots`)."""

    def __init__(self, apply, slots: BatchSlots | None = None, records=lambda batch_id: None):
        self.apply, self.records = apply, records  # records: a batch's planned records (None: unknown)
        self.slots = slots or BatchSlots(1)
        self.lock = threading.Lock()  # held while a batch waits for a slot and is applied
        self.closed = False

    def __call__(self, df, batch_id: int) -> None:
        with self.lock:
            self._refuse_if_closed(batch_id)
            asked = time.monotonic()
            with self.slots.held(self.records(batch_id)):
                self._refuse_if_closed(batch_id)  # closed while it waited
                self.apply(df, batch_id, time.monotonic() - asked)

    def _refuse_if_closed(self, batch_id: int) -> None:
        if self.closed:  # the query fails without committing it: the next start applies it
            raise ApplyError(f"batch {batch_id} not applied: the job is stopping")

    def close(self) -> None:
        self.closed = True
        with self.lock:  # the batch under way, if any, has committed or failed
            pass


_gates: dict = {}  # a query (by its name: a table's, or a shared one's) -> its BatchGate or SharedBatch
_slots: dict[int, BatchSlots] = {}  # the job's batch slots, by their number
_slots_lock = threading.Lock()


def batch_slots(spark, settings: Settings) -> BatchSlots:
    """The slots all the job's tables' batches share (`spark.batches_at_once`, by default
    twice the application's cores). The other batches wait, their offsets fixed, while the
    next changes gather in Kafka: with a batch of every table under way at once, each
    took the time of all of them to plan on the driver, and the driver's heap filled."""
    n = settings.spark.batches_at_once or 2 * max(1, spark.sparkContext.defaultParallelism)
    with _slots_lock:
        return _slots.setdefault(n, BatchSlots(n))


def stop_query(name: str, query) -> None:
    """Stop table `name`'s query between two batches: the batch under way commits first."""
    gate = _gates.pop(name, None)
    if gate is not None:
        gate.close()
    if query.isActive:
        query.stop()


FETCH_WAIT_MS = 20  # the longest a task's fetch of its records waits at the broker for more
FETCH_PARTITION_BYTES = 1 << 20  # the most a fetch takes of one partition (Kafka's default)
LAG_EVERY_S = 5.0  # how often a running table's lag gauge is read from Kafka
FAILED_RETRY_S = 60.0  # how long a continuous job waits before it tries a failed table again
REJOIN_EVERY_S = 10.0  # how often a table away from its shared query is looked at (rejoin)
START_THREADS = 4  # tables whose queries start at once: a start waits mostly on the catalog, Kafka and the JVM
SHARED_TABLES = "cdc-tables.json"  # in a shared query's checkpoint: the tables it reads (drop_dead_checkpoints)
_registries: dict[str, SchemaRegistry] = {}


def registry_of(settings: Settings, reg: TableRegistration) -> SchemaRegistry | None:
    """The schema registry client of a table whose source writes Avro (one per URL, so its
    cache of schemas is shared), else None."""
    if settings.sources[reg.source.name].format != "avro":
        return None
    if settings.registry_url not in _registries:
        _registries[settings.registry_url] = SchemaRegistry.of(settings)
    return _registries[settings.registry_url]


def start_query(spark, settings: Settings, reg: TableRegistration, available_now: bool, tables: int = 1):
    """The table's regular query: from its checkpoint, or from the table's committed
    offsets when the checkpoint is missing or stale; `tables` run in the application. It
    may start on any thread (`Supervisor.start_all`): `spark` becomes the thread's active session."""
    make_active(spark)
    target = open_target(spark, settings, reg)
    checkpoint = settings.path(settings.spark.checkpoint_dir) / reg.name
    if checkpoint_is_stale(reg.name, target.topic, target.committed, committed_end_offsets(checkpoint)):
        aside = checkpoint.with_name(f"{checkpoint.name}.stale-{int(time.time())}")
        checkpoint.rename(aside)
        log(f"checkpoint {checkpoint} belongs to another topic; moved to {aside}, resuming from the table's "
            f"committed offsets", table=reg.name, event="checkpoint-moved", level="warning", stream=sys.stdout)
    if target.committed:  # partitions the table has not seen yet start at their earliest offset
        offsets = json.dumps({str(p): o for p, o in target.committed.items()})
        start = replay_window(target.topic, list(target.partitions), offsets=offsets)
    else:
        start = {"startingOffsets": reg.options.starting_offsets}
    return stream_query(spark, settings, reg, target, checkpoint, start, available_now, tables=tables)


def replay(settings: Settings, reg: TableRegistration, **window_args) -> None:
    """Re-read a window of the table's topic up to its current end and re-apply it.
    Position guards and the delete memory keep newer rows and deleted keys as they are;
    the committed offsets and position never go backwards."""
    with jobstate.exclusive(settings.state_dir, [reg.name]):
        _replay(settings, reg, **window_args)


def _replay(settings: Settings, reg: TableRegistration, **window_args) -> None:
    topic = topic_for(reg.source.name, reg)
    check_start(topic, watermarks(kafka_access(settings), topic),  # before Spark starts
                offsets_at=lambda ms: offsets_at(kafka_access(settings), topic, ms), **window_args)
    spark = get_session(settings).newSession()
    target = open_target(spark, settings, reg)
    start = replay_window(target.topic, list(target.partitions), **window_args)
    checkpoint = settings.path(settings.spark.checkpoint_dir) / f"{reg.name}.replay-{int(time.time() * 1000)}"
    query = stream_query(spark, settings, reg, target, checkpoint, start, available_now=True,
                         skip_committed=False)
    try:
        query.awaitTermination()
    except Exception as e:  # noqa: BLE001 - StreamingQueryException from py4j
        raise diagnose(settings, reg, reg.name, e) from None
    finally:
        stop_query(reg.name, query)  # interrupted: the batch under way commits first
    shutil.rmtree(checkpoint, ignore_errors=True)
    log(f"replayed up to the end of {target.topic}", table=reg.name, event="replayed", stream=sys.stdout)


def _input_rows(progress) -> int:
    """Rows of a query's last progress report (a dict or a progress object, by version)."""
    if progress is None:
        return 0
    return int(progress.get("numInputRows", 0) if isinstance(progress, dict) else getattr(progress, "numInputRows", 0))


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


def watch_lag(settings: Settings, tables: list[TableRegistration], stop: threading.Event,
              applied=lambda table: None) -> None:
    """Every LAG_EVERY_S until `stop`: Kafka's reachability, each table's lag (with a
    progress line while it is far behind; the end offsets of all the tables' topics in one
    request; `applied`: a shared query's table's applied offsets, else None) and each
    source's capture, off the supervisor's loop (a Kafka or Connect outage stalls only this
    thread)."""
    capturing: dict[str, bool] = {}
    reachable = {"kafka": True}
    catchups = {reg.name: CatchUp(reg.name) for reg in tables}
    topics = {reg.name: topic_for(reg.source.name, reg) for reg in tables}
    while True:
        if watch_kafka(settings, reachable):
            try:
                ends = end_offsets(kafka_access(settings), sorted(set(topics.values())))
            except CdcError:
                ends = {}
            for reg in tables:
                lag = read_lag(settings, reg, ends.get(topics[reg.name], {}), applied(reg.name))
                if lag is not None:
                    catchups[reg.name].seen(*lag)
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


class Supervisor:
    """Runs one query per table, or one per group of tables with `spark.shared_query`
    (shared.groups); restarts a table's query with backoff while its failure is retriable,
    for at most `retry_for_s`, then gives that table up with its last error (the other
    tables go on). A table that fails in a shared query leaves it for a query of its own,
    and joins it again once that query runs without failing, close to Kafka's end (`rejoin`);
    a shared query that fails for none of its tables is retried alike, and when retrying
    cannot mend it, its tables each go on in a query of their own, to join it again alike
    after FAILED_RETRY_S. Every query starts in the job's session, whose query manager tells
    the supervisor when one ends. A continuous job (`lent`: its tables' locks) hands a table
    over to a command that asks for it (`cdc bootstrap`, `replay`, `tables remove`) and
    takes it back once that command is done (`hand_over`, `take_back`)."""

    def __init__(self, spark, settings: Settings, tables: list[TableRegistration], available_now: bool,
                 clock=time.monotonic, sleep=None, lent: jobstate.Lent | None = None):
        self.spark, self.settings, self.available_now, self.lent = spark, settings, available_now, lent
        self.away: dict[str, int] = {}  # tables handed over to a command, with its pid
        self.tables = {t.name: t for t in tables}
        self.clock, self.sleep = clock, sleep or self.pause
        self.stopping = False  # a stop signal came (run_until_stopped): no new starts, no more waiting
        self.queries: dict = {}
        self.failing_since: dict[str, float] = {}
        self.delay: dict[str, float] = {}
        self.failed: dict[str, CdcError] = {}  # tables given up, with their error
        self.retry_at: dict[str, float] = {}
        self.catchups = {t.name: CatchUp(t.name, clock) for t in tables}
        self.groups = shared.groups(tables) if settings.spark.shared_query else {}  # shared query -> its tables
        self.batches: dict[str, shared.SharedBatch] = {}  # a running shared query's foreachBatch function
        self.home = {t: name for name, names in self.groups.items() for t in names}  # a table's shared query
        self.rejoin_at: dict[str, float] = {}  # when a table away from its shared query is looked at next

    def tables_of(self, name: str) -> list[str]:
        """The tables of query `name`: a shared query's, or the table's own."""
        return list(self.groups.get(name, [name]))

    def applied(self, table: str) -> dict[int, int] | None:
        """The offsets a table of a running shared query has applied (None: not in one)."""
        for name, tables in list(self.groups.items()):
            if table in tables and name in self.batches:
                return self.batches[name].applied(table)
        return None

    def running(self) -> list[str]:
        """The tables whose queries run."""
        return sorted(t for name in self.queries for t in self.tables_of(name))

    def backoff(self, name: str, exc: BaseException) -> None:
        """Wait before the next attempt, or raise: at once for a failure retrying cannot
        mend, once retries have run out for the others."""
        metrics.FAILURES.labels(name).inc()
        error = diagnose(self.settings, self.tables.get(name), name, exc)
        if not error.retriable:
            raise error
        now = self.clock()
        first = self.failing_since.setdefault(name, now)
        bound = self.settings.spark.retry_for_s
        if now - first >= bound:
            gave_up = ApplyError(f"table {name}: gave up after {bound}s of retries; last error: {error.message}",
                                 hint=(error.hint or "bring it back") + "; then run the job again "
                                      "(raise spark.retry_for_s in cdc.yaml to wait longer)", table=name)
            gave_up.detail = error.detail
            raise gave_up
        delay = self.delay.get(name, 1.0)
        log(f"{error.message.removeprefix(f'table {name}: ')}, retrying in {delay:.0f} s", table=name,
            event="retrying", level="warning", delay_s=delay, detail=error.detail)
        self.sleep(delay)
        self.delay[name] = min(delay * 2, 30.0)

    def recovered(self, name: str) -> None:
        self.failing_since.pop(name, None)
        self.delay.pop(name, None)

    def pause(self, seconds: float) -> None:
        """Sleep, but no longer once a stop is requested."""
        poll_until(lambda: self.stopping, seconds)

    def request_stop(self) -> None:
        """The stop signal's handler (jobs/shutdown.py): a flag the main loop reads; nothing
        that takes a lock the interrupted main thread might hold."""
        self.stopping = True

    def start(self, name: str):
        while not self.stopping:
            try:
                if name in self.groups:
                    query = self.start_shared(name)
                else:
                    query = start_query(self.spark, self.settings, self.tables[name], self.available_now,
                                        len(self.tables))
                    jobstate.record(self.settings.state_dir, name, jobstate.RUNNING)
                if query is not None:
                    self.queries[name] = query
                return query
            except CdcError as e:
                e.table = e.table or name
                self.backoff(name, e)
            except Exception as e:  # noqa: BLE001 - py4j: the catalog or Kafka failing under Spark
                self.backoff(name, e)

    def start_shared(self, name: str):
        """Shared query `name` over those of its tables whose targets open, from their
        committed offsets; the others leave it, for queries of their own (None: none is left)."""
        if not self.groups[name]:
            del self.groups[name]
            return None

        def opened(table: str):
            try:
                return table, self.open_member(table)
            except Exception as e:  # noqa: BLE001 - the table's own query tells what it is
                return table, e

        with ThreadPoolExecutor(START_THREADS, thread_name_prefix="cdc-start") as pool:
            found = dict(pool.map(opened, self.groups[name]))
        members = {t: m for t, m in found.items() if not isinstance(m, BaseException)}
        refused = {t: e for t, e in found.items() if isinstance(e, BaseException)}
        if not members:  # not one opens: the query's failure (an outage), retried as such
            raise next(iter(refused.values()))
        directory = self.settings.path(self.settings.spark.checkpoint_dir) / "_shared"
        tag = hashlib.sha256("\n".join(sorted(members)).encode()).hexdigest()[:12]
        self.drop_dead_checkpoints(directory, f"{name}-{tag}-")
        checkpoint = directory / f"{name}-{tag}-{int(time.time() * 1000)}"
        checkpoint.mkdir(parents=True)
        (checkpoint / SHARED_TABLES).write_text(json.dumps(sorted(members)))
        away = [topic_for(reg.source.name, reg) for t, reg in self.tables.items()
                if self.home.get(t) == name and t not in members]
        query, batch = shared_query(self.spark, self.settings, name, members, checkpoint, self.available_now,
                                    len(self.tables), away=tuple(away))
        self.batches[name] = batch
        for table in members:
            jobstate.record(self.settings.state_dir, table, jobstate.RUNNING, query=name)
        for table in refused:
            self.leave(name, table)
        for table, error in refused.items():  # after the backoff its error calls for (or given up)
            self.retry(table, error)
        return query

    def open_member(self, table: str) -> tuple:
        """A shared query's table: its registration, its own session (its batches are applied
        in it) and its opened Target."""
        session = self.spark.newSession()
        make_active(session)
        return self.tables[table], session, open_target(session, self.settings, self.tables[table])

    def drop_dead_checkpoints(self, directory: Path, same: str) -> None:
        """Remove the shared queries' checkpoints a killed job left (a stopped job removes its
        own): those naming one of this job's tables (it holds their locks: no live job reads
        them) and, naming none (an older release's), those of the same query over the same
        tables (their names start with `same`). This job's running queries' stay."""
        running = {batch.checkpoint for batch in self.batches.values()}
        for old in directory.glob("*"):
            if old in running:
                continue
            try:
                tables = set(json.loads((old / SHARED_TABLES).read_text()))
            except (OSError, ValueError):
                tables = None
            if (old.name.startswith(same) if tables is None else tables & self.tables.keys()):
                shutil.rmtree(old, ignore_errors=True)

    def leave(self, name: str, table: str) -> None:
        """`table` leaves shared query `name`, for a query of its own."""
        self.groups[name].remove(table)
        log(f"leaves the shared query {name} for a query of its own", table=table, event="shared-query-left",
            query=name)

    def rejoin(self) -> None:
        """The tables that left their shared query (`home`) join it again once their own query
        runs, is not failing and is at most one shared batch behind Kafka's end (looked at every
        REJOIN_EVERY_S): the own query stops between batches, its checkpoint goes (the shared
        query's commits carry the table's offsets), and the shared query applies the table from
        its committed offsets, or starts again with it if all its tables had left."""
        now = self.clock()
        for table, name in sorted(self.home.items()):
            query = self.queries.get(table)
            if query is None or table in self.failing_since or self.rejoin_at.get(table, 0.0) > now:
                continue
            self.rejoin_at[table] = now + REJOIN_EVERY_S
            if not query.isActive or query.lastProgress is None:
                continue
            reg, batch = self.tables[table], self.batches.get(name)
            if batch is not None and (topic_for(reg.source.name, reg) not in batch.subscribed
                                      or (lag := read_lag(self.settings, reg)) is None or lag[0] > batch.cap):
                continue
            stop_query(table, self.queries.pop(table))
            shutil.rmtree(self.settings.path(self.settings.spark.checkpoint_dir) / table, ignore_errors=True)
            self.groups.setdefault(name, []).append(table)
            self.groups[name].sort()
            if batch is None:  # all its tables had left it
                self.start_or_fail(name)
                log(f"joins the shared query {name} again", table=table, event="shared-query-joined", query=name)
            else:
                self.join(name, batch, table)

    def join(self, name: str, batch: shared.SharedBatch, table: str) -> None:
        """`table` applied by running shared query `name` from its committed offsets; a target
        that does not open sends it back to a query of its own (`retry`)."""
        try:
            reg, session, target = self.open_member(table)
            applier = make_applier(session, self.settings, reg, target, batch.checkpoint)
        except Exception as e:  # noqa: BLE001 - the table's own query tells what it is
            self.leave(name, table)
            self.retry(table, e)
            return
        batch.join(table, applier, session, target.committed)
        jobstate.record(self.settings.state_dir, table, jobstate.RUNNING, query=name)
        log(f"joins the shared query {name} again", table=table, event="shared-query-joined", query=name)

    def shared_ended(self, name: str) -> bool:
        """After shared query `name` failed: the tables that failed in it leave it, and it
        starts again without them (True); a failure of none of them (False) is retried as
        the query's (`retry`)."""
        self.queries.pop(name, None)
        batch = self.batches.pop(name, None)
        failed = {}
        if batch is not None:
            batch.close()  # the tables being applied finish first
            failed = batch.take_failed()
        self.drop_checkpoint(batch)
        if failed:
            for table in failed:
                self.leave(name, table)
            self.start_or_fail(name)  # the others first: the failed tables wait for their backoff
            for table, error in sorted(failed.items()):
                self.retry(table, error)
        return bool(failed)

    def shared_failures(self, name: str) -> None:
        """The tables that failed in running shared query `name` leave it, each for a query
        of its own after its backoff (or given up); the query goes on with the others."""
        batch = self.batches.get(name)
        for table, error in sorted((batch.take_failed() if batch is not None else {}).items()):
            self.leave(name, table)
            self.retry(table, error)

    def dissolve(self, name: str, error: CdcError) -> None:
        """Shared query `name`'s tables each go on in a query of their own."""
        tables = self.groups.pop(name, [])
        self.recovered(name)  # started again (`rejoin`), it has a new retry budget
        for table in tables:  # to join it again, not before FAILED_RETRY_S
            self.rejoin_at[table] = self.clock() + FAILED_RETRY_S
        log(f"the shared query failed: {error.message}; its {len(tables)} tables go on in queries of their own",
            table=name, event="shared-query-dissolved", level="warning", error=error.message)
        for table in tables:
            self.start_or_fail(table)

    def drop_checkpoint(self, batch: shared.SharedBatch | None) -> None:
        """A shared query's checkpoint, once it has ended: the next one starts from its
        tables' committed offsets."""
        if batch is not None:
            shutil.rmtree(batch.checkpoint, ignore_errors=True)

    def progress(self, name: str) -> None:
        """A progress line of a table catching up: the records left in Kafka, the rate and
        the time left."""
        if (lag := read_lag(self.settings, self.tables[name], done=self.applied(name))) is not None:
            self.catchups[name].line(*lag)

    def fail(self, name: str, error: CdcError) -> None:
        """A table given up: recorded and reported, and the other tables go on. A continuous
        job tries it again after FAILED_RETRY_S."""
        error.table = error.table or name
        self.failed[name] = error
        self.retry_at[name] = self.clock() + FAILED_RETRY_S
        query = self.queries.pop(name, None)
        if query is not None:
            stop_query(name, query)
        jobstate.record(self.settings.state_dir, name, jobstate.FAILED, error.message, remedy=error.hint)
        others = len(self.tables) - len(self.failed)
        log(f"failed: {error.message}" + (f" (the {others} other table(s) go on)" if others else "")
            + (f"; to do: {error.hint}" if error.hint else ""), table=name,
            event="table-failed", level="error", error=error.message, hint=error.hint, detail=error.detail)

    def retry(self, name: str, exc: BaseException) -> None:
        """After a failure of a query: start it again after the backoff, or give it up once
        retrying cannot mend it (`give_up`); a shared query whose tables failed starts again
        without them at once (`shared_ended`)."""
        if name in self.groups and self.shared_ended(name):
            return
        try:
            self.backoff(name, exc)
        except CdcError as error:
            self.give_up(name, error)
            return
        self.start_or_fail(name)

    def give_up(self, name: str, error: CdcError) -> None:
        """A table given up (`fail`); a shared query's tables each go on in a query of their own."""
        if name in self.groups:
            self.dissolve(name, error)
        else:
            self.fail(name, error)

    def start_all(self) -> None:
        """The shared queries, then every other table's query, START_THREADS starting at
        once; a table that fails to start is given up (`fail`) and the others go on."""
        for name in list(self.groups):
            self.start_or_fail(name)
        handled = {t for tables in self.groups.values() for t in tables} | set(self.queries) | set(self.failed)
        with ThreadPoolExecutor(START_THREADS, thread_name_prefix="cdc-start") as pool:
            list(pool.map(self.start_or_fail, [n for n in self.tables if n not in handled]))

    def start_or_fail(self, name: str) -> None:
        try:
            self.start(name)
        except CdcError as e:
            self.give_up(name, e)

    def outcome(self) -> None:
        """Raise for the failed tables: a lone failed table's own error, else one naming each."""
        if len(self.failed) == 1:
            raise next(iter(self.failed.values()))
        if self.failed:
            names = sorted(self.failed)
            raise ApplyError(f"{len(names)} of {len(self.tables)} tables failed ({', '.join(names)}): "
                             + "; ".join(self.failed[n].message for n in names),
                             hint="each table's error is above and in `cdc status`; the other tables were applied")

    def run_available_now(self) -> None:
        """Each table up to what Kafka holds now; a table that fails does not stop the others."""
        self.start_all()
        done: set[str] = set()
        while pending := [n for n in self.queries if n not in done]:
            name = pending[0]
            try:
                while not self.queries[name].awaitTermination(PROGRESS_EVERY_S):
                    for table in self.tables_of(name):
                        self.progress(table)
            except Exception as e:  # noqa: BLE001 - StreamingQueryException from py4j
                self.retry(name, e)  # started again (under the same name), or given up
                continue
            if name in self.batches:  # all planned: its tables apply what is planned for them
                while not self.batches[name].drained(PROGRESS_EVERY_S):
                    for table in self.tables_of(name):
                        self.progress(table)
                self.shared_failures(name)
            done.add(name)
            self.recovered(name)
            for table in self.tables_of(name):
                read_lag(self.settings, self.tables[table], done=self.applied(table))
                jobstate.record(self.settings.state_dir, table, jobstate.CAUGHT_UP)
                log("caught up", table=table, event="caught-up", stream=sys.stdout)
        self.outcome()

    def run_until_stopped(self) -> None:
        """Until SIGTERM/SIGINT, or until every table has failed. A failing table is retried
        with backoff, then given up and tried again every FAILED_RETRY_S while the others go
        on; failed tables make the job exit non-zero when it stops. The first signal stops
        the queries between batches: the batch under way commits, none starts after it."""
        lag_stop = threading.Event()
        with shutdown.graceful(self.request_stop):
            try:
                self.start_all()  # a stop signal ends the starts not yet made (`start`)
                threading.Thread(target=watch_lag, daemon=True, name="cdc-lag",
                                 args=(self.settings, list(self.tables.values()), lag_stop, self.applied)).start()
                while not self.stopping and (len(self.failed) < len(self.tables) or self.away):
                    self.poll()
                if self.stopping:
                    log("stop requested: stopping the queries", event="stopping", stream=sys.stdout)
                elif not self.tables:
                    log("no registered table is left: stopping", event="stopping", stream=sys.stdout)
                else:
                    log("every table has failed: stopping", event="stopping", level="error")
                stopped = self.running()
                self.stop()
                for name in stopped:
                    jobstate.record(self.settings.state_dir, name, jobstate.STOPPED)
            finally:
                lag_stop.set()
        if self.stopping:
            log(f"cdc run: stopped by {shutdown.received() or 'request'}; {len(stopped)} table(s) stopped, "
                f"last commits kept", event="stopped", stream=sys.stdout, signal=shutdown.received(), tables=stopped)
        self.outcome()

    def poll(self) -> None:
        """One look at the queries: restart the failed ones, try given-up tables again when due.
        Each look at a query is a call into the driver's JVM, so a second's wait for any query
        to end comes first: the queries are looked at only once one has ended, and a running
        query's progress only while its table is retrying (a hundred quiet tables would
        otherwise cost a share of a core)."""
        try:
            ended = bool(self.spark.streams.awaitAnyTermination(1))  # seconds
        except Exception:  # noqa: BLE001 - a query failed: handled below
            ended = True
        if ended:  # before the look: a query ending after it is seen at the next poll
            self.spark.streams.resetTerminated()
        for name in list(self.batches):
            self.shared_failures(name)
        for name, q in list(self.queries.items()):
            if not ended and name not in self.failing_since:
                continue
            if q.isActive:
                if name in self.failing_since and _input_rows(q.lastProgress) > 0:
                    self.recovered(name)
                continue
            exc = q.exception()
            self.retry(name, exc if exc is not None else ApplyError(f"table {name}: query stopped"))
        for name in [n for n in self.failed if self.clock() >= self.retry_at[n]]:
            del self.failed[name]
            self.recovered(name)
            log("trying the failed table again", table=name, event="table-retried")
            self.start_or_fail(name)
        self.hand_over()
        self.take_back()
        self.rejoin()

    def hand_over(self) -> None:
        """Each of its tables a command asked for (jobstate.handover_requests): its query
        stopped between batches (a shared query starts again without it) and its lock lent
        until the command is done (`take_back`)."""
        if self.lent is None:
            return
        for table, pid in jobstate.handover_requests(self.settings.state_dir).items():
            if table not in self.tables or table in self.away:
                continue
            self.away[table] = pid
            self.set_aside(table)
            self.lent.lend(table)
            jobstate.record(self.settings.state_dir, table, jobstate.HANDED_OVER)
            log(f"handed over to process {pid} until it is done; the other tables go on", table=table,
                event="handed-over", pid=pid)

    def set_aside(self, table: str) -> None:
        """The table no longer run nor retried: its own query stopped, or its shared query
        started again without it."""
        self.failed.pop(table, None)
        self.retry_at.pop(table, None)
        self.recovered(table)
        if table in self.queries:
            stop_query(table, self.queries.pop(table))
            return
        name = next((n for n, members in self.groups.items() if table in members), None)
        if name is None:
            return
        self.leave(name, table)
        if name in self.queries:
            stop_query(name, self.queries[name])
        if not self.shared_ended(name):
            self.start_or_fail(name)

    def take_back(self) -> None:
        """The tables lent to a command that is done (its request withdrawn, or it died):
        locked again and started from what their targets hold now, with their registrations
        read again; a table whose registration is gone (`cdc tables remove`) is run no more."""
        if not self.away:
            return
        asked = jobstate.handover_requests(self.settings.state_dir)
        for table, pid in sorted(self.away.items()):
            if asked.get(table) == pid:
                continue
            try:
                self.lent.take(table)
            except Busy:
                continue  # the command is letting it go, or another one took it
            del self.away[table]
            invalid: list = []
            found = load_tables(self.settings, table, invalid=invalid)
            if not found and not invalid:
                self.lent.lend(table)
                self.forget(table)
                continue
            if invalid:
                self.fail(table, invalid[0].error)
                continue
            self.tables[table] = found[0]
            log("taken back: its query starts again from what its target holds", table=table, event="taken-back")
            self.start_or_fail(table)

    def forget(self, table: str) -> None:
        """A table whose registration was removed while it was lent: no longer the job's."""
        del self.tables[table]
        self.home.pop(table, None)
        self.rejoin_at.pop(table, None)
        log("no longer registered: the job runs it no more", table=table, event="table-removed")

    def stop(self) -> None:
        for name, q in self.queries.items():
            stop_query(name, q)
        for batch in self.batches.values():
            self.drop_checkpoint(batch)


def run(settings: Settings, tables: list[TableRegistration], available_now: bool) -> None:
    if not tables:
        raise ApplyError("no tables are registered", hint=f"add registrations under {settings.tables_dir}/")
    names = [t.name for t in tables]
    with jobstate.exclusive(settings.state_dir, names) if available_now else \
            jobstate.lending(settings.state_dir, names) as lent:
        supervisor = Supervisor(get_session(settings), settings, tables, available_now, lent=lent)
        try:
            supervisor.run_available_now() if available_now else supervisor.run_until_stopped()
        except CdcError as e:
            if not supervisor.failed:  # not one table's failure (those are recorded as they happen)
                for name in ([e.table] if e.table in supervisor.tables else supervisor.running()):
                    jobstate.record(settings.state_dir, name, jobstate.FAILED, e.message, remedy=e.hint)
            raise
        finally:
            supervisor.stop()
