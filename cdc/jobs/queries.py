"""The job's streaming queries, as it starts and stops them: one per table, or one over the
topics of many (`spark.shared_query`, jobs/shared.py). Spark runs each query's batches in a
session of their own, and a shared query applies each table in its own, so snapshot
properties never cross tables."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property, partial
from pathlib import Path

from cdc.config.clients import kafka_access
from cdc.config.models import Settings, TableRegistration
from cdc.control.kafka import end_offsets, tail_record_bytes
from cdc.decoding.avro import SchemaRegistry
from cdc.jobs import shared
from cdc.jobs.apply import TableApplier
from cdc.jobs.backlog import auto_batch_cap, batch_sizing, heap_bytes
from cdc.jobs.built import Built, of_context
from cdc.jobs.reading import batch_cap, kafka_options, kafka_range, kafka_records
from cdc.jobs.slots import BatchGate, BatchSlots, batch_slots
from cdc.jobs.targets import Target, open_target
from cdc.jobs.together import Together
from cdc.log import log
from cdc.sinks.session import make_active

START_THREADS = 4  # tables whose queries start at once: a start waits mostly on the catalog, Kafka and the JVM


class Queries:
    """Starts and stops the queries of one job in `spark` (its session): each query's gate
    (by the query's name: a table's, or a shared one's), the batch slots all of them share,
    and the schema registry clients (one per URL, so their caches of schemas are shared)."""

    def __init__(self, spark, settings: Settings):
        self.spark, self.settings = spark, settings
        self.gates: dict = {}  # a query's name -> its BatchGate or SharedBatch
        self.registries: dict[str, SchemaRegistry] = {}
        self._slots: BatchSlots | None = None
        self._lock = threading.Lock()  # queries start on several threads at once

    @cached_property
    def built(self) -> Built:
        """The expressions built for the tables' batches (the session's: built.of_context)."""
        return of_context(self.spark)

    @cached_property
    def heap_bytes(self) -> int:
        """The memory a batch's tasks run in (backlog.heap_bytes), read once."""
        return heap_bytes(self.spark)

    @property
    def slots(self) -> BatchSlots:
        """The batch slots the job's queries share, made at the first start."""
        with self._lock:
            if self._slots is None:
                self._slots = batch_slots(self.spark, self.settings)
            return self._slots

    def registry_of(self, reg: TableRegistration) -> SchemaRegistry | None:
        """The schema registry client of a table whose source writes Avro, else None."""
        if self.settings.sources[reg.source.name].format != "avro":
            return None
        url = self.settings.registry_url
        with self._lock:
            if url not in self.registries:
                self.registries[url] = SchemaRegistry.of(self.settings)
            return self.registries[url]

    def applier(self, spark, reg: TableRegistration, target: Target, checkpoint: Path,
                skip_committed: bool = True, applier_type: type[TableApplier] = TableApplier) -> TableApplier:
        """The table's applier, prepared in `spark` (the table's own session) for the target
        open_target made ready."""
        settings = self.settings
        return applier_type(reg.name, target.ref, target.topic, target.columns, target.key,
                            job=f"{reg.name}@{checkpoint}", checkpoint=checkpoint, skip_committed=skip_committed,
                            state_dir=settings.state_dir,
                            topic_id=target.topic_id, held=target.held, on_error=reg.options.on_error,
                            dead_letters_ref=target.dead_letters_ref, deletes_ref=target.deletes_ref,
                            delete_horizon_hours=reg.options.delete_horizon_hours,
                            compact_every_files=reg.options.compact_every_files,
                            max_snapshots=reg.options.max_snapshots,
                            max_record_bytes=settings.kafka.max_record_bytes,
                            direct_writes=settings.spark.direct_writes if reg.options.direct_writes is None
                            else reg.options.direct_writes,
                            source_kind=settings.sources[reg.source.name].kind,
                            registry=self.registry_of(reg),
                            mode=reg.mode, excluded=reg.exclude,
                            masked=reg.mask, mask_key=target.mask_key,
                            format_version=settings.catalog.format_version,
                            built=self.built).prepare(spark, target.summary, ready=True)

    def start_table(self, reg: TableRegistration, available_now: bool, tables: int = 1):
        """The table's regular query: from its checkpoint, or from the table's committed
        offsets when the checkpoint is missing or stale; `tables` run in the application. It
        may start on any thread (`Supervisor.start_all`): the job's session becomes the
        thread's active one."""
        spark, settings = self.spark, self.settings
        checkpoint = settings.path(settings.spark.checkpoint_dir) / reg.name
        target = open_target(spark, settings, reg, checkpoint)
        return self.stream(spark, reg, target, checkpoint, target.start, available_now, tables=tables)

    def stream(self, spark, reg: TableRegistration, target: Target, checkpoint: Path, start: dict[str, str],
               available_now: bool, skip_committed: bool = True,
               applier_type: type[TableApplier] = TableApplier, tables: int = 1):
        """The table's streaming query from `start`, each micro-batch applied by an
        `applier_type` (the benchmark swaps the apply step for an append); `tables` run in the
        application, and the batches under way at once (at most its slots) share its memory."""
        settings = self.settings
        cap = None if reg.options.max_offsets_per_trigger else \
            batch_cap(reg, self.heap_bytes, target.record_bytes, min(tables, self.slots.n))
        reader = (spark.readStream.format("kafka").options(**kafka_options(spark, settings))
                  .option("subscribe", target.topic)
                  .options(**batch_sizing(reg.options, available_now, cap))
                  .options(**start))
        applier = self.applier(spark, reg, target, checkpoint, skip_committed, applier_type)
        applier.kafka_records = partial(kafka_records, spark, settings)
        gate = self.gates[reg.name] = BatchGate(applier, self.slots, applier.planned_records)
        return _started(reader, reg.name, gate, checkpoint, available_now, reg.options.trigger_interval_s)

    def open_member(self, reg: TableRegistration) -> tuple:
        """A shared query's table: its registration, its own session (its batches are applied
        in it) and its opened Target."""
        session = self.spark.newSession()
        return reg, session, open_target(session, self.settings, reg, sample=False)  # start_shared sizes its batches

    def start_shared(self, name: str, members: dict[str, tuple], checkpoint: Path, available_now: bool,
                     tables: int, away: tuple[str, ...] = ()):
        """Shared query `name` over its `members` (table name -> (registration, its session,
        its opened Target)), from each table's committed offsets, in a new `checkpoint`; `tables`
        run in the application. It also reads topics `away` (of its tables now in queries of their
        own) from their end, so that those tables can join it again. Returns the query and its
        SharedBatch."""
        spark, settings = self.spark, self.settings
        regs = [reg for reg, _, _ in members.values()]
        topics = sorted({t.topic for _, _, t in members.values()})
        away = tuple(sorted(set(away) - set(topics)))
        with ThreadPoolExecutor(START_THREADS, thread_name_prefix="cdc-start") as pool:  # 0.2 s each, on Kafka
            sized = max((size or 0 for size in pool.map(partial(tail_record_bytes, kafka_access(settings)),
                                                         topics)), default=0)
        cap = auto_batch_cap(self.heap_bytes, sized or None, min(tables - len(members) + 1, self.slots.n))
        log(f"one query reads the topics of {len(members)} tables, in batches of at most {cap:,} records",
            table=name, event="shared-query", tables=sorted(members), records=cap)
        latest = [t.topic for reg, _, t in members.values()
                  if not t.committed and reg.options.starting_offsets == "latest"]
        ends = end_offsets(kafka_access(settings), latest + list(away)) if latest or away else {}  # from the end
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
            return self.applier(session, reg, target, checkpoint)

        with ThreadPoolExecutor(START_THREADS, thread_name_prefix="cdc-start") as pool:
            appliers = dict(zip(members, pool.map(prepared, members.values())))

        def read(table: str, first: dict[int, int], last: dict[int, int]):
            session = batch.sessions[table]
            make_active(session)  # on the worker's thread
            return kafka_range(session, settings, appliers[table].topic, first, last, f"cdc-shared-{table}")

        def read_ranges(session, ranges: dict):
            return kafka_records(session, settings, ranges)

        def read_records(table: str, first: dict[int, int], last: dict[int, int]):
            return kafka_records(batch.sessions[table], settings, {appliers[table].topic: (first, last)})

        sessions = {n: session for n, (_, session, _) in members.items()}
        batch = self.gates[name] = shared.SharedBatch(appliers, read, checkpoint, self.slots, start, cap,
                                                      apply_together=Together(appliers, sessions, read_ranges),
                                                      kafka_records=read_records)
        batch.sessions = sessions
        return _started(reader, name, batch, checkpoint, available_now, regs[0].options.trigger_interval_s), batch

    def stop(self, name: str, query) -> None:
        """Stop query `name` between two batches: the batch under way commits first."""
        gate = self.gates.pop(name, None)
        if gate is not None:
            gate.close()
        if query.isActive:
            query.stop()


def _started(reader, name: str, each_batch, checkpoint: Path, available_now: bool, interval_s: float):
    """The query of `reader` started: `each_batch` applies its micro-batches."""
    writer = (reader.load().writeStream.queryName(name).foreachBatch(each_batch)
              .option("checkpointLocation", str(checkpoint)))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=f"{int(interval_s * 1000)} milliseconds"))
    return writer.start()  # a batch's jobs run in a fair-scheduler pool by its size (apply.size_pool)
