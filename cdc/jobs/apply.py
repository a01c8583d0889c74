"""Applying one micro-batch of one table: decode, skip what the table already holds,
truncate, dedupe, one MERGE whose commit carries the batch's offsets (Iceberg or Delta,
see sinks/formats.py)."""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc.control import barrier, commits
from cdc.control.checkpoint import batch_end_offsets, rolled_back
from cdc.control.faults import crash_point
from cdc.decoding import avro
from cdc.decoding.avro_direct import Shape
from cdc.decoding.envelope import row_fields
from cdc.decoding.spark_decode import (MAX_VALUE_BYTES, NON_DATA, decoder, masked_as_text, refusal, schema_fingerprint,
                                      schema_heads, value_schemas)
from cdc.errors import ApplyError
from cdc.jobs import metrics
from cdc.jobs.built import Built
from cdc.jobs.failures import cause_of
from cdc.jobs.plan import BATCH_TASK_RECORDS, BatchPlan, Changes, PartitionStats, Target, Truncate, plan_batch
from cdc.log import log
from cdc.planning import dead_letters
from cdc.planning import unchanged
from cdc.planning.dedupe import last_per_key_of
from cdc.planning.history import history_changes, stored_versions
from cdc.planning.merge import (MOVED, append_sql, forget_deletes_sql,
                                history_merge_sql, key_bucket, merge_sql, remember_deletes_sql,
                                remembered_deletes_sql, truncate_sql)
from cdc.planning.protect import WITHHELD, dead_letter_value, mask_columns
from cdc.planning.schema import evolve
from cdc.planning.sql import TOMBSTONE, q
from cdc.sinks.direct import COLUMNS as DECODED_COLUMNS, UNSEEN, KafkaRecords, decoding as direct_decoding, write_batch
from cdc.sinks.direct import part as direct_part
from cdc.sinks.direct import write as write_directly
from cdc.sinks.formats import add_missing_columns, open_table, ready_tables
from cdc.sinks.targets import PROP_COLUMNS
from cdc.sources.types import Column, case_twins, debezium_column, reserved_names, toastable

TRUNCATED_AT = "cdc.truncated-at"  # position of the last applied truncate: older changes never insert
FORGET_EVERY_S = 3600  # how often a job drops the delete memory's entries past the horizon, at a batch
FORGOTTEN_AT = "cdc.forgotten-at"  # the delete memory's property: when a job last dropped them (epoch ms)
KEEP_SCHEMAS = 64  # record schema fingerprints a target keeps (an older one is judged again when it comes back)
KEEP_HEADS = 8  # schema parts a job matches records by (a record of another is searched for its payload)
BUCKETS_FROM_BYTES = 1 << 20  # ... when the target holds at least this much (a smaller one moves cheaply)
SMALL_FILE_BYTES = 1 << 20  # a running job rewrites data files under this size (`compact_every_files`)
WAIT = "wait"  # the timer's step of a batch's wait for a slot (slots.BatchSlots), before it is applied
WAIT_SHOWN_S = 0.01  # ... recorded from this long on
POOLS = 40  # size classes of batches (`size_pool`): 2**39 records and more share the first
CONFLICTS = ("org.apache.iceberg.exceptions.ValidationException", "org.apache.iceberg.exceptions.CommitFailedException",
             "io.delta.exceptions.Concurrent")
OFFSETS_MOVED = "cdc offsets moved"  # a commit's offsets check failed (jvm/direct OffsetsCheck.MOVED)
MOVED_ATTEMPTS = 4  # a batch whose commit lost to a moved offset is applied again from the table this often


def size_pool(table: str, records: int | None) -> str:
    """The fair-scheduler pool of a batch of `records` of `table`: the table's pool of the
    batch's size class (a power of two), the bigger classes named first. Spark's fair
    scheduler gives a free core to the pool with the fewest running tasks and, between
    pools running none (nearly always, with many tables on a few cores), to the name
    sorting first: with a pool per table, tables whose names sorted first took the cores
    whatever their changes. By size, the tables with the most changes waiting go first and
    the others' few changes right after them (a batch of unknown size counts as a big one)."""
    rank = 0 if records is None else max(0, POOLS - 1 - int(records).bit_length())
    return f"cdc-batch-{rank:02d}-{table}"


def compaction_due(added_files: int, partitions: int, memory_inserts: int, every: int) -> bool:
    """Whether a running job rewrites its target's small files: once `every` data files a
    partition were added to it (`added_files` over the `partitions` its spec holds) or
    `every` inserts made to its delete memory (each adds at least a file). A small batch
    adds a file in each partition it touches and reads every file of them: what grows a
    batch's cost is the files of a partition, not of the table."""
    return added_files >= every * max(1, partitions) or memory_inserts >= every


def is_conflict(e: Exception) -> bool:
    """Whether a commit failed on a concurrent one (Iceberg's validation or commit failure,
    Delta's concurrent modification): the batch can be computed again from the table. A commit
    whose offsets check failed is not one: its batch starts again (`offsets_moved`)."""
    return not offsets_moved(e) and any(c in str(e) for c in CONFLICTS)


def offsets_moved(e: Exception) -> bool:
    """Whether a commit failed because the table's last offsets were no longer those its batch
    started from: another writer committed, or the table was rolled back under the job."""
    return OFFSETS_MOVED in str(e)


def run_with_conflict_retries(statement, attempts: int = 6, sleep=time.sleep, table: str | None = None):
    """Run a commit that may meet a concurrent one (a compaction, another writer). Iceberg
    retries plain concurrent commits itself; when validation finds a real conflict, the
    statement runs again from the start, re-reading the table, so the batch is recomputed
    (Delta's optimistic concurrency conflicts alike).
    Offsets are stamped on that same commit, so they never advance without their data."""
    for attempt in range(1, attempts + 1):
        try:
            return statement()
        except Exception as e:  # noqa: BLE001 - py4j wraps the Iceberg exceptions
            if attempt == attempts or not is_conflict(e):
                raise
            if table:
                metrics.COMMIT_RETRIES.labels(table).inc()
            log(f"commit conflict (attempt {attempt} of {attempts}), recomputing: {cause_of(e)[:300]}",
                table=table, event="commit-conflict", level="warning", attempt=attempt)
            sleep(0.2 * 2 ** attempt)


def partition_stats(row) -> PartitionStats:
    """One row of the batch's stats aggregation (`TableApplier._stats`) as a value."""
    d = row.asDict()
    return PartitionStats(
        d["_partition"], d["first"], d["last"], d["records"], d["position"], d["source_ts_ms"], d["errors"] or 0,
        d["deletes"] or 0, tuple((t["position"], t["ms"]) for t in d["truncates"] or ()),
        frozenset(d.get("schemas") or ()), frozenset(d.get("buckets") or ()),
        *(d.get(k) or 0 for k in ("placeholders", "moved_creates", "moved_deletes", "moved_adds", "moved_places")),
        transaction=transaction_of(d.get("transaction")))


def transaction_of(t) -> tuple[str, int] | None:
    """A change's transaction (`_txn_id`, `_txn_order`) as a value; None outside one (a snapshot read)."""
    return (t["id"], int(t["order"])) if t and t["id"] is not None and t["order"] is not None else None


def changes_of(data: DataFrame, step: Changes) -> DataFrame:
    """The changes a step applies: those between its positions (the final one's tombstones too)."""
    if step.before is not None:
        data = data.where(F.col("_position") < step.before)
    if step.after is not None:
        later = F.col("_position") > step.after
        data = data.where(later | (F.col("_op") == TOMBSTONE) if step.final else later)
    return data


class BatchTimer:
    """Wall time of a batch's steps, for the line each applied batch logs."""

    def __init__(self, clock=time.monotonic):
        self.clock, self.started, self.steps = clock, clock(), {}

    @contextmanager
    def step(self, name: str):
        started = self.clock()
        try:
            yield
        finally:
            self.steps[name] = self.steps.get(name, 0.0) + self.clock() - started

    def rename(self, name: str, to: str) -> None:
        """The time of step `name` counted as step `to`'s (a step that turned out to be another)."""
        if name in self.steps:
            self.steps[to] = self.steps.get(to, 0.0) + self.steps.pop(name)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def line(self) -> str:
        """The time applying took, by step; the wait for a slot before it, apart."""
        steps = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in self.steps.items() if name != WAIT)
        waited = f", after {self.steps[WAIT]:.2f}s waiting for a slot" if WAIT in self.steps else ""
        return f"{self.elapsed():.2f}s ({steps}){waited}"


class UnseenSchema(Exception):
    """A batch decoded with the schemas seen before holds another: it is judged, and the
    batch decoded again (never raised past TableApplier)."""


@dataclass(frozen=True)
class DirectPart:
    """A table's part of a batch many tables share, ready to be written (`TableApplier.direct_part`):
    its applier, session, target as read, last commit's summary and offsets, what its decoding was
    built for, its `cdc.direct.DirectBatch.Part` and the batch it ends with."""

    applier: "TableApplier"
    spark: object
    table: object
    summary: dict | None
    committed: dict[int, int]
    found: tuple
    jvm: object
    batch_id: int


@dataclass
class TableApplier:
    """The foreachBatch function of one table's query. A batch comes in a SparkSession of
    its own (the one Spark runs the query's batches in, or in a shared query the table's own:
    jobs/shared.py), so the commit stamps set here land on this table only.
    `target_ref` names an Iceberg table or a Delta table's path (sinks/formats.py); the
    delete memory and dead letters are tables of the same format."""

    name: str
    target_ref: str
    topic: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    job: str
    deletes_ref: str
    delete_horizon_hours: int
    checkpoint: Path | None = None  # where the batch's planned end offsets are read
    skip_committed: bool = True  # False for a replay: re-apply what the table already holds
    topic_id: str | None = None  # recorded with the offsets: a recreated topic is told apart
    held: str | None = None  # Spark SQL: a change the table's bootstrap rows already hold (dropped)
    on_error: str = "dlq"  # a bad record goes to the dead-letter table (dlq) or stops the job (fail)
    dead_letters_ref: str | None = None
    source_kind: str = "postgresql"  # how the events' source block gives their position
    registry: avro.SchemaRegistry | None = None  # set when the topic is in Confluent's Avro wire format
    mode: str = "upsert"  # upsert, history or soft_delete (TableRegistration.mode)
    excluded: tuple[str, ...] = ()  # source columns never decoded nor added to the target
    masked: tuple[str, ...] = ()  # columns stored as their keyed hash (planning/protect.py)
    mask_key: bytes | None = field(default=None, repr=False)
    format_version: int = 3  # an Iceberg target's format is raised to it (CatalogSettings.format_version)
    buckets_from_bytes: int = BUCKETS_FROM_BYTES  # a target's size from which a small batch names its key buckets
    forget_every_s: float = FORGET_EVERY_S
    compact_every_files: int = 0  # data files a partition added between two rewrites of the small ones (0: never)
    max_snapshots: int = 0  # snapshots the job keeps of an Iceberg target and its tables (0: all)
    max_record_bytes: int = MAX_VALUE_BYTES  # kafka.max_record_bytes: the longest record value decoded
    direct_writes: bool = True  # a batch the plan allows is written without a MERGE (spark.direct_writes)
    direct_records: int = BATCH_TASK_RECORDS  # the most records of a batch decoded and written by one task
    direct_bytes: int = 0  # the most bytes of them it holds decoded (0: an eighth of the heap)
    # The Kafka records of topics' ranges for the direct path's task to read itself
    # (reading.kafka_records; None: it reads the query's batch).
    kafka_records: Callable[[dict], KafkaRecords] | None = field(default=None, repr=False)
    state_dir: Path | None = None  # where a reconciler asks for a commit at its count (control/barrier.py)
    timer: BatchTimer = field(default_factory=BatchTimer, repr=False)  # the current batch's
    built: Built = field(default_factory=Built, repr=False)  # its built expressions (the job's: queries.Queries)
    # JSON record schemas judged for the target (their fingerprints, with why it refuses one,
    # or None; in each batch's commit summary, so the next process has them): a batch holding
    # only those is decoded without a scan.
    schemas: dict[int, str | None] = field(default_factory=dict, repr=False)
    heads: dict[int, str] = field(default_factory=dict, repr=False)  # schema parts by fingerprint, newest last
    # An Avro topic's writer schemas of keys and values this process decoded (id: text), and
    # its value schemas judged (id: why the target refuses one, or None): a batch of those
    # alone may be decoded and written by the direct path's one task.
    avro_schemas: dict[int, str] = field(default_factory=dict, repr=False)
    avro_judged: dict[int, str | None] = field(default_factory=dict, repr=False)
    forget_due: float | None = field(default=None, repr=False)  # epoch s (None: read from the memory)
    compacted_at: int | None = field(default=None, repr=False)  # the target's data files after its last rewrite
    partitions: int | None = field(default=None, repr=False)  # the most the target's spec holds (read once)
    remembered_since: int = field(default=0, repr=False)  # the delete memory's inserts since the last rewrite
    ends_at: dict[int, int] | None = field(default=None, repr=False)  # a batch's first part's end (a barrier's)

    def prepare(self, spark, summary: dict | None = None, ready: bool = False) -> "TableApplier":
        """Read the record schemas judged for the target from its last commit (`summary`, read
        here unless given); unless the job made them `ready` (targets.open_target), raise an
        Iceberg target to the configured format and create its delete memory and dead-letter
        table if missing."""
        if self.masked and not self.mask_key:
            raise ValueError(f"table {self.name}: masked columns need a masking key")
        if self.on_error == "dlq" and not self.dead_letters_ref:
            raise ValueError(f"table {self.name}: on_error dlq needs a dead-letter table")
        if not ready:
            target = open_table(spark, self.target_ref)
            summary = target.last_committed_summary()
            by_name = {c.name: c for c in self.columns}
            ready_tables(spark, self.name, target, self.deletes_ref, self._side_tables().get("dead letters"),
                         [(k, by_name[k].spark_type) for k in self.key], self.format_version)
        if self.registry is None:
            kept = (summary or {}).get(commits.RECORD_SCHEMAS) or "{}"
            self.schemas = {int(k): v for k, v in json.loads(kept).items()}
        return self

    def __call__(self, batch: DataFrame, batch_id: int, waited_s: float = 0.0, records: int | None = None,
                 direct: bool = True, kafka: KafkaRecords | None = None, end: dict[int, int] | None = None,
                 start: dict[int, int] | None = None) -> None:
        """Apply a batch, after it waited `waited_s` for a slot (slots.BatchSlots), of `records`
        Kafka records when the caller knows them (a shared query's range of the table; else
        `planned_records`); `direct` false when the direct path has just refused it; `kafka`,
        the same records for the direct path's task to read itself (else it reads `batch`);
        `start` and `end`, where the batch starts and ends when the caller knows it (else the
        checkpoint's log tells). A reconciler's barrier (control/barrier.py) inside the batch
        makes it two commits. Every commit checks that the table's offsets are still those the
        batch started from; one that lost starts the batch again from where the table is."""
        for attempt in range(1, MOVED_ATTEMPTS + 1):
            try:
                return self._apply_batch(batch, batch_id, waited_s, records, direct, kafka, end, start)
            except Exception as e:  # noqa: BLE001 - py4j wraps the Iceberg exceptions
                if not offsets_moved(e):
                    raise
                text = str(e)
                moved = text[text.find(OFFSETS_MOVED):].splitlines()[0][:600]
                if attempt == MOVED_ATTEMPTS:
                    raise ApplyError(f"table {self.name}: {MOVED_ATTEMPTS} commits in a row lost to another "
                                     f"writer of the table: {moved}",
                                     hint="one job must apply a table: stop the other job that writes it (its "
                                          "name is in the snapshot's cdc.job)") from None
                metrics.COMMIT_RETRIES.labels(self.name).inc()
                log(f"batch {batch_id}'s commit found the table moved under it, applied again from where the "
                    f"table is: {moved}", table=self.name, event="offsets-moved", level="warning", attempt=attempt)

    def _apply_batch(self, batch: DataFrame, batch_id: int, waited_s: float, records: int | None, direct: bool,
                     kafka: KafkaRecords | None, end: dict[int, int] | None, start: dict[int, int] | None) -> None:
        """`__call__`'s one attempt."""
        if self.ends_at is None and self.skip_committed:
            self._apply_to_barrier(batch, batch_id, waited_s, direct, end, start)
        spark = batch.sparkSession
        self.timer = BatchTimer()
        if waited_s >= WAIT_SHOWN_S:
            self.timer.steps[WAIT] = waited_s
        with self.timer.step("table"):
            table = open_table(spark, self.target_ref)
            summary = table.last_committed_summary()
        committed = commits.parse_offsets(summary).get(self.topic, {})
        self._check_not_behind(committed, batch_id, start)
        planned = records if records is not None else self.planned_records(batch_id, committed)
        pool = size_pool(self.name, planned)
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
        skip = committed if committed and self.skip_committed and self._may_hold_part(committed, batch_id) else {}
        records = kafka or self._own_read(batch_id) or batch
        if skip:
            seen = None
            for p, o in skip.items():
                cond = (F.col("partition") == p) & (F.col("offset") < o)
                seen = cond if seen is None else seen | cond
            batch = batch.where(~seen)
        if self.registry is None:
            if not self.heads:  # this process's first batch: what its records' schema part looks like
                with self.timer.step("schema"):
                    self._learn_heads(schema_heads(batch))
            if not self.schemas and self.heads:
                # A target with no schema judged yet (new, bootstrapped): the first record's
                # is judged, and the batch decoded trusting the others to share it, instead of
                # a scan of the whole batch for its schemas (one holding another is judged whole).
                with self.timer.step("schema"):
                    self._evolve(spark, table, batch, dict(list(self.heads.items())[-1:]))
        elif not self.avro_judged:  # Avro, this process's first batch: its first record's writer schemas judged
            with self.timer.step("schema"):
                schemas, values = avro.first_schemas(batch, self.registry)
                if values:
                    self.avro_schemas.update(schemas)
                    self._evolve(spark, table, batch, values)
        if self._judged():  # a batch of the schemas judged before is decoded trusting them
            try:
                if direct and self._direct_batch(spark, table, records, summary, committed, skip, planned, batch_id):
                    return
                return self._decode_and_apply(spark, table, batch, summary, committed, batch_id, None)
            except UnseenSchema:  # raised before anything is written: judge the schemas, decode again
                pass
        with self.timer.step("schema"):
            refused = self._evolve(spark, table, batch)
        self._decode_and_apply(spark, table, batch, summary, committed, batch_id, refused)

    def _check_not_behind(self, committed: dict[int, int], batch_id: int, start: dict[int, int] | None) -> None:
        """Raise when the table's `committed` offsets are behind where the batch starts (`start`,
        else the checkpoint's log): the table was rolled back or restored under the running
        job, and applying the batch on top would skip the records in between for good."""
        if not self.skip_committed:
            return
        start = start if start is not None else (self._planned_start(batch_id) or {}).get(self.topic)
        behind = rolled_back(self.name, self.topic, committed, start or {})
        if behind is not None:
            raise behind

    def _apply_to_barrier(self, batch: DataFrame, batch_id: int, waited_s: float, direct: bool,
                          end: dict[int, int] | None, start: dict[int, int] | None) -> None:
        """The batch's records before a reconciler's barrier, applied as a batch of their own
        that ends there (the rest is applied after it, past the offsets it commits), when the
        barrier lies inside the batch."""
        offsets = barrier.placed(self.state_dir, self.name)
        end = end if end is not None else self._planned_end(batch_id)
        if offsets is None or not end:
            return
        committed = commits.parse_offsets(open_table(batch.sparkSession, self.target_ref)
                                          .last_committed_summary()).get(self.topic, {})
        cut = barrier.split_at(committed, end, offsets)
        if cut is None:
            return
        before = reduce(lambda a, b: a | b, [(F.col("partition") == p) & (F.col("offset") < o) for p, o in cut.items()])
        log(f"batch {batch_id} applied in two commits, the first ending at a reconciler's count: {cut}",
            table=self.name, event="barrier", batch_id=batch_id, offsets={str(p): o for p, o in cut.items()})
        self.ends_at = cut
        try:
            self(batch.where(before), batch_id, waited_s, direct=direct, start=start)
        finally:
            self.ends_at = None

    def _decode_and_apply(self, spark, table, batch: DataFrame, summary: dict | None, committed: dict[int, int],
                          batch_id: int, refused: dict | None) -> None:
        """Decode and apply the batch: with `refused` (what `_evolve` found), after its
        schemas were judged; with None, trusting that every schema of the batch was seen
        before (`schemas`, an Avro topic's `avro_judged`), which raises UnseenSchema, before
        anything is written, if not."""
        known = refused if refused is not None else {k: v for k, v in self._judged().items() if v}
        if self.registry is None:
            envelopes = batch
        elif refused is None:
            envelopes = self._avro_envelopes(batch)
        else:
            schemas = avro.batch_schemas(batch, self.registry)
            envelopes = avro.as_envelopes(batch, schemas, {k: v for k, v in schemas.items() if k not in known},
                                          self._shape())
            self.avro_schemas = dict(list({**self.avro_schemas, **schemas}.items())[-KEEP_SCHEMAS:])
        events = self._decoder(known, refused is None, "headers" in envelopes.columns)(envelopes)
        if self.held:
            events = events.where(f"NOT coalesce({self.held}, FALSE)")
        events = mask_columns(events, self.masked, self.mask_key)  # before anything is written
        events = events.persist()
        try:
            self._apply(spark, table, batch, events, summary, committed, self._planned_end(batch_id), batch_id)
        finally:
            events.unpersist()

    def _decoder(self, refused: dict, trusted: bool, headers: bool):
        """The decoding of a batch (spark_decode.decoder) for the refused schemas. `trusted`:
        the schemas were not judged for this batch, so each record's schema (its fingerprint,
        or its Avro writer schema id: `avro.judged_schema`) is kept (UnseenSchema)."""
        decoded = tuple(sorted(self.avro_schemas)) if self.registry is not None and trusted else ()

        def build():
            by = schema_fingerprint(self.heads) if self.registry is None else F.col(avro.VALUE_SCHEMA_ID)
            schema = (None if not trusted else schema_fingerprint(self.heads) if self.registry is None
                      else avro.judged_schema(decoded))
            return decoder(self.columns, self.key, self.source_kind, refusal(by, refused), schema, self.masked,
                           headers, self.heads if self.registry is None else None, self.max_record_bytes,
                           built=self.registry is not None)
        return self._plan(("decode", tuple(sorted(refused.items())), trusted, headers, tuple(self.heads), decoded),
                          build)

    def _judged(self) -> dict[int, str | None]:
        """The record schemas judged for the target (JSON's fingerprints, or an Avro topic's
        value writer schema ids), with why it refuses one, or None."""
        return self.schemas if self.registry is None else self.avro_judged

    def _avro_envelopes(self, batch: DataFrame) -> DataFrame:
        """An Avro batch as JSON envelopes (`avro.as_envelopes`) by the writer schemas this process
        decoded, values of the judged ones the target takes; a record of another is NOT_AVRO."""
        takeable = {k: v for k, v in self.avro_schemas.items() if k in self.avro_judged and not self.avro_judged[k]}
        return avro.as_envelopes(batch, self.avro_schemas, takeable, self._shape())

    def _toast(self) -> tuple[str, ...]:
        """The columns whose unchanged values Debezium may send as a placeholder (TOAST)."""
        return tuple(c.name for c in toastable(self.columns, self.key))

    def _shape(self) -> Shape:
        """What the decoding reads of a record (an Avro record's struct is built into it)."""
        return Shape(self.columns, self.key, masked_as_text(self.columns, self.masked))

    def _plan(self, found: tuple, build):
        """What `build` makes (a batch's Spark expressions, built once: each costs calls into
        the JVM) for `found` and the table's current columns, kept in `built` (a change of
        columns or refused schemas builds others); the time a build takes is the batch's `plan`
        step."""
        def timed():
            with self.timer.step("plan"):
                return build()
        return self.built.get((self._built_for(), self.columns, *found), timed)

    def _forget_plan(self, found: tuple) -> None:
        self.built.forget((self._built_for(), self.columns, *found))

    def _built_for(self) -> tuple:
        """What a table's built expressions depend on beside what `_plan` is given: the
        session, the target, the key, the source, the mode, the masking and the record limit."""
        from pyspark import SparkContext

        mask = hashlib.sha256(self.mask_key).hexdigest() if self.mask_key else None
        return (id(SparkContext._active_spark_context), self.target_ref, self.deletes_ref, self.key, self.source_kind,
                self.registry is None, self.mode, self.masked, mask, self.held, self.max_record_bytes)

    def _evolve(self, spark, table, batch: DataFrame, heads: dict[int, str] | None = None) -> dict[str, str]:
        """Design rule 7 before the batch is decoded: new source columns are added to the
        target, safe widenings applied; anything else stops the job (planning/schema.py).
        Every distinct schema of the batch's records counts (oldest first, by offset), so a
        column that lived only between two batches keeps its values. A schema naming a
        column the target cannot take (one differing only by case from another, the
        reserved prefix) is refused: returned (its schema part, or its writer schema id),
        with why, and its records become dead letters. `heads`: the schemas to judge instead of
        the batch's, JSON's schema parts by fingerprint or Avro's value writer schemas by id."""
        if self.registry is not None:
            values = list(heads.items()) if heads is not None else avro.value_schemas(batch, self.registry)
            found = [(sid, avro.row_fields(text)) for sid, text in values]
        else:
            heads = list(heads.items()) if heads is not None else value_schemas(batch, self.heads)
            self._learn_heads(dict(heads))
            found = [(fingerprint, row_fields(head + "}")) for fingerprint, head in heads]
        refused: dict = {}
        for schema, fields in found:
            if reason := self._untakeable([f["field"] for f in fields]):
                refused[schema] = reason
        self._add_columns(spark, table, [fields for schema, fields in found if schema not in refused])
        judged = {schema: refused.get(schema) for schema, _ in found}
        if self.registry is None and judged.keys() - self.schemas.keys():  # the target has their columns now
            self.schemas = dict(list({**self.schemas, **judged}.items())[-KEEP_SCHEMAS:])
        elif self.registry is not None:
            self.avro_judged = dict(list({**self.avro_judged, **judged}.items())[-KEEP_SCHEMAS:])
        return refused

    def _learn_heads(self, heads: dict[int, str]) -> None:
        """Keep the schema parts of the newest fingerprints seen (schema_fingerprint's `known`)."""
        if heads.keys() - self.heads.keys():
            kept = {**{k: v for k, v in self.heads.items() if k not in heads}, **heads}
            self.heads = dict(list(kept.items())[-KEEP_HEADS:])

    def _add_columns(self, spark, table, schemas: list[list[dict]]) -> None:
        """The columns of the batch's takeable record schemas (oldest first) added to the
        target, widenings applied; a narrowing raises (planning/schema.py)."""
        known = {c.name for c in self.columns}

        def columns_of(fields: list[dict]) -> list[Column]:
            out = []
            for f in fields:
                params = f["parameters"] or {}
                if f["field"] in self.excluded:
                    continue
                if f["field"] in known and "__debezium.source.column.type" not in params:
                    continue  # without the source type only new columns are told
                out.append(debezium_column(f["field"], f["type"], f["name"], params, self.name, self.source_kind))
            return out

        # Oldest first: the newest schema is judged, an older one may hold a narrower form.
        older = [c for fields in schemas[:-1] for c in columns_of(fields)]
        evolution = evolve(self.name, self.columns, columns_of(schemas[-1]) if schemas else [], self.key, older)
        if not evolution.changed and all(table.has_column(c.name) for c in evolution.columns):
            return
        added = add_missing_columns(spark, self.target_ref, table, evolution.columns, self.masked)
        # The same type again is a no-op (a re-run batch); a masked column's hash is a
        # string whatever the source type.
        table.widen({c.name: c.spark_type for c in evolution.widened if c.name not in self.masked})
        table.refresh()
        table.set_properties({PROP_COLUMNS: json.dumps([c.to_json() for c in evolution.columns])})
        self.columns = evolution.columns
        log(f"schema evolved: added {added}, widened "
            f"{[f'{c.name} to {c.spark_type}' for c in evolution.widened]}", table=self.name, event="schema-evolved",
            added=added, widened={c.name: c.spark_type for c in evolution.widened})

    def _untakeable(self, names: list[str]) -> str | None:
        """Why the target cannot take a record schema's columns (None: it can)."""
        names = [n for n in names if n not in self.excluded]
        twins = case_twins([*(c.name for c in self.columns), *names])
        if twins:
            return ("the record's schema has columns that differ only by case: "
                    + "; ".join(", ".join(repr(n) for n in g) for g in twins))
        reserved = reserved_names(names)
        if reserved:
            return (f"the record's schema has column(s) {', '.join(repr(n) for n in reserved)} with the prefix "
                    f"reserved for cdc's metadata columns")
        return None

    def _dead_letters(self, spark, batch: DataFrame, events: DataFrame, total: int, batch_id: int) -> None:
        """Bad records stop the job (`fail`) or go, raw, to the dead-letter table (`dlq`),
        before the batch's commit: a re-run batch finds them there and adds none twice."""
        bad = events.where(F.col("_error").isNotNull())
        if self.on_error == "fail":
            first = bad.select("_partition", "_offset", "_error").orderBy("_partition", "_offset").first()
            raise ApplyError(
                f"table {self.name}: {total} record(s) of topic {self.topic} cannot be applied; first at "
                f"partition {first['_partition']} offset {first['_offset']}: {first['_error']}",
                hint="nothing of this batch was committed; fix the producer or the registration and rerun, "
                     "or set options.on_error: dlq to set bad records aside")
        value, kept = dead_letter_value(self.masked, "headers" in batch.columns)
        letters = bad.select("_partition", "_offset", "_error", "_error_class").join(
            batch.select(F.col("partition").alias("_partition"), F.col("offset").alias("_offset"), "key",
                         value.alias("value"), kept.alias("_kept")),
            ["_partition", "_offset"]).select(
            F.lit(self.topic).alias("topic"), F.col("_partition").alias("partition"),
            F.col("_offset").alias("offset"), "key", "value", F.col("_error_class").alias("error_class"),
            F.when(F.col("_kept"), F.col("_error")).otherwise(F.concat(F.col("_error"), F.lit(WITHHELD)))
            .alias("error_message"), F.current_timestamp().alias("failed_at"),
            F.lit(batch_id).cast("bigint").alias("batch_id"), F.lit(self.job).alias("job"))
        view = self._view("cdc_dead")
        letters.createOrReplaceTempView(view)
        run_with_conflict_retries(lambda: spark.sql(dead_letters.record_sql(self.dead_letters_ref, view)),
                                  table=self.name)
        log(f"{total} bad record(s) of batch {batch_id} set aside in {self.dead_letters_ref}", table=self.name,
            event="dead-letters", level="warning", records=total, batch_id=batch_id)

    def _may_hold_part(self, committed: dict[int, int], batch_id: int) -> bool:
        """Whether the table may hold records of this batch (a re-run batch, a lost
        checkpoint), which are then filtered out: its commits pass where the batch starts (the
        end of the batch before it in the checkpoint's offset log); unknown (a first batch, no
        log): yes. Only then: the filter's offsets would make new generated code, compiled and
        then optimized by the JVM, at every batch."""
        start = self._planned_start(batch_id)
        if start is None:
            return True
        start = start.get(self.topic, {})
        return any(o > start.get(p, 0) for p, o in committed.items())

    def _planned_start(self, batch_id: int) -> dict | None:
        """Where this batch starts, the end offsets (by topic and partition) of the batch before
        it in the checkpoint's offset log; None for a first batch or without a log."""
        if self.checkpoint is None or not batch_id:
            return None
        return batch_end_offsets(self.checkpoint, batch_id - 1)

    def planned_records(self, batch_id: int, committed: dict[int, int] | None = None) -> int | None:
        """The records this batch was planned with, from the checkpoint's offset log (where
        the batch before it ended, else where the table's `committed` offsets end); None: unknown."""
        end = self._planned_end(batch_id)
        if not end:
            return None
        start = (self._planned_start(batch_id) or {}).get(self.topic) or committed
        if start is None:
            return None
        return sum(max(0, o - start.get(p, 0)) for p, o in end.items())

    def _own_read(self, batch_id: int) -> KafkaRecords | None:
        """This batch's records for the direct path's task to read itself, where the checkpoint's
        offset log gives both where it starts (the batch before it's end) and where it ends, as a
        shared query's tables are read (`KafkaRead`: 20,000 changes of 4.5 KB in 1.1-1.5 s a
        batch, 1.3-1.9 s through the Kafka source). A first batch, whose start the log does not
        give, reads through the query."""
        if self.kafka_records is None:
            return None
        start, end = self._planned_start(batch_id), self._planned_end(batch_id)
        if start is None or not end:
            return None
        start = start.get(self.topic, {})
        if any(o > end.get(p, o) for p, o in start.items()):  # offsets gone back: the source tells why
            return None
        return self.kafka_records({self.topic: (start, end)})

    def _planned_end(self, batch_id: int) -> dict[int, int]:
        """This batch's end offsets from the checkpoint's offset log (empty if unreadable), or
        where its part before a barrier ends."""
        if self.ends_at is not None:
            return dict(self.ends_at)
        if self.checkpoint is None:
            return {}
        return (batch_end_offsets(self.checkpoint, batch_id) or {}).get(self.topic, {})

    def _apply(self, spark, table, batch: DataFrame, events: DataFrame, summary: dict | None,
               committed: dict[int, int], planned_end: dict[int, int], batch_id: int) -> None:
        """The batch's stats, its plan (jobs/plan.py), then the plan's steps in order."""
        toast = self._toast()
        bucketing = self._bucketing(table)
        with self.timer.step("decode"):
            stats = [partition_stats(row) for row in self._stats(events, bucketing, toast).collect()]
        if "_schema" in events.columns and {f for s in stats for f in s.schemas} - self._judged().keys():
            raise UnseenSchema(self.name)
        events = events.drop("_schema")
        refusal = table.direct_refusal(self.key, tuple(c.name for c in self.columns)) if self.direct_writes \
            else "direct writes off (spark.direct_writes, options.direct_writes)"
        target = Target(self.topic, self.topic_id, self.job, self.mode, toast, bucketing[0] if bucketing else None,
                        committed, summary, self.schemas if self.registry is None else None, refusal)
        plan = plan_batch(stats, target, batch_id, planned_end)
        if plan is None:
            return
        if plan.empty:
            table.commit_summary_only(plan.props, self._txn(batch_id))
            return
        if plan.dead_letters:
            with self.timer.step("dead letters"):
                self._dead_letters(spark, batch, events, plan.dead_letters, batch_id)
            events = events.where(F.col("_error").isNull())
        crash_point("before-merge")
        self._forget_deletes(spark)
        names = tuple(c.name for c in self.columns)
        data = events.where(~F.col("_op").isin("t", NON_DATA))
        persisted: list[DataFrame] = []
        try:
            for step in plan.steps:
                if isinstance(step, Truncate):
                    self._truncate(spark, table, step.position, step.at_ms)
                else:
                    self._apply_changes(spark, table, batch, changes_of(data, step), stats, plan, names, toast,
                                        persisted, batch_id, step.final)
        finally:
            for df in persisted:
                df.unpersist()

    def _stats(self, events: DataFrame, bucketing: tuple[str, str] | None, toast: tuple[str, ...]) -> DataFrame:
        """The batch's stats per partition (offsets, position, errors, deletes, truncates,
        schemas, key buckets, what unchanged values need), in one aggregation."""
        schemas = "_schema" in events.columns

        def build():
            return [
                *([F.collect_set("_schema").alias("schemas")] if schemas else []),
                *([F.collect_set(F.expr(bucketing[1])).alias("buckets")] if bucketing else []),
                *(unchanged.stats_columns(toast) if toast else []),
                F.min("_offset").alias("first"), F.max("_offset").alias("last"),
                F.max("_position").alias("position"),
                F.max_by(F.struct(F.col("_txn_id").alias("id"), F.col("_txn_order").alias("order")), "_position")
                .alias("transaction"),
                F.max(F.when(F.col("_position").isNotNull(), F.unix_millis("_source_ts"))).alias("source_ts_ms"),
                F.sum(F.col("_error").isNotNull().cast("int")).alias("errors"),
                F.collect_set(F.when(F.col("_op") == "t", F.struct(F.col("_position").alias("position"),
                                                                    F.unix_millis("_source_ts").alias("ms"))))
                .alias("truncates"),
                F.sum((F.col("_op") == "d").cast("int")).alias("deletes"), F.count("*").alias("records"),
            ]
        return events.groupBy("_partition").agg(*self._plan(("stats", schemas, bucketing, toast), build))

    def _truncate(self, spark, table, position: str, at_ms: int | None) -> None:
        """A truncate at `position`: the target's rows written before it go (upsert), are
        marked (soft_delete) or end their open versions at its commit time (history); older
        changes never insert again (`TRUNCATED_AT`)."""
        with self.timer.step("truncate"):
            spark.sql(truncate_sql(self.target_ref, position, self.mode, at_ms))
        if position > (table.properties().get(TRUNCATED_AT) or ""):  # a replay never lowers it
            table.set_properties({TRUNCATED_AT: position})
        table.refresh()

    def _apply_changes(self, spark, table, batch: DataFrame, events: DataFrame, stats: list, plan: BatchPlan,
                       names: tuple[str, ...], toast: tuple[str, ...], persisted: list, batch_id: int,
                       final: bool = True) -> None:
        """The batch's changes (or, `final` false, those before one of its truncates) in one
        commit, written directly when the plan allows, else by a MERGE; only the final commit
        carries the batch's offsets and identity."""
        if plan.direct:
            before = self._merge_changes(spark, table, batch, events, plan, names, toast, persisted, batch_id, final)
        else:
            before = self._write_directly(spark, table, events, plan.props, names)
        table.refresh()
        if final:
            self._committed(spark, table, before, plan, stats, batch_id)

    def _committed(self, spark, table, before, plan: BatchPlan, stats: list, batch_id: int) -> None:
        """After a batch's final commit (`before`: the table's version before it): its offsets
        committed alone when nothing changed the table, then upkeep and the batch's log line."""
        if table.version() == before:
            table.commit_summary_only(plan.props, self._txn(batch_id))
        crash_point("after-commit")
        self._compact(spark, table)
        self._expire(spark, table)
        self._log_applied(stats, batch_id)

    def _direct_batch(self, spark, table, records: DataFrame | KafkaRecords, summary: dict | None,
                      committed: dict[int, int], skip: dict[int, int], planned: int | None, batch_id: int) -> bool:
        """The batch applied with no query planned for it (sinks/direct.py's `write_batch`): its
        Kafka `records` (those before `skip`'s offsets left out) decoded, counted and written by
        one task, its plan made from those stats, its files committed. False, with nothing
        written, when it needs a query: a bad record, a truncate, unchanged values or a key
        change to look up, a schema not judged yet (UnseenSchema), more records than one task
        takes (`planned`: the records the batch was planned with, None if unknown) or holds
        decoded (`direct_bytes`), a target or a mode the direct path does not write, a plan
        that says otherwise."""
        decoding = self._direct_ready(spark, table, records.schema, planned)
        if decoding is None:
            return False
        decoder, found = decoding
        toast = self._toast()
        with self.timer.step("direct"):
            written = write_batch(spark, decoder, records, self.target_ref, self.deletes_ref, self.key,
                                  tuple(c.name for c in self.columns), table.properties().get(TRUNCATED_AT), skip,
                                  set(self._judged()), bool(toast), self.direct_records, self.direct_bytes)
        return self._direct_written(spark, table, written, found, summary, committed, batch_id)

    def joins_others(self) -> bool:
        """Whether the table's small batches may be written in one job with other tables'
        (jobs/together.py): direct writes on, upsert mode, nothing held back, its record schemas
        learnt. Its target and records may still refuse (`direct_part`, `direct_done`)."""
        learnt = self.heads and self.schemas if self.registry is None else self.avro_judged
        return bool(self.direct_writes and self.mode == "upsert" and not self.held and learnt)

    def direct_part(self, spark, raw_schema, start: dict[int, int], end: dict[int, int], records: int | None,
                    batch_id: int, waited_s: float = 0.0) -> DirectPart | None:
        """The table's part of a batch many tables' records share (jobs/together.py), in `spark`
        (the table's own session): its records of its topic from `start` up to `end` (of the
        Kafka source's `raw_schema`), `records` of them, batch `batch_id`'s, after a wait of
        `waited_s`. None when the part needs a batch of its own: its record schemas not learnt
        yet, or a batch the direct path does not take (`_direct_ready`)."""
        self.timer = BatchTimer()
        if waited_s >= WAIT_SHOWN_S:
            self.timer.steps[WAIT] = waited_s
        if not self.joins_others():
            return None
        with self.timer.step("table"):
            table = open_table(spark, self.target_ref)
            summary = table.last_committed_summary()
        decoding = self._direct_ready(spark, table, raw_schema, records)
        if decoding is None:
            return None
        committed = commits.parse_offsets(summary).get(self.topic, {})
        if self.skip_committed and rolled_back(self.name, self.topic, committed, start) is not None:
            return None  # a batch of its own says so
        skip = committed if self.skip_committed else {}
        first = {p: max(o, skip.get(p, o)) for p, o in start.items()} | \
            {p: o for p, o in skip.items() if p not in start}
        toast = self._toast()
        jvm = direct_part(spark, decoding[0], self.target_ref, self.deletes_ref, self.topic, self.key,
                          tuple(c.name for c in self.columns), table.properties().get(TRUNCATED_AT), first, end,
                          set(self._judged()), bool(toast), self.direct_records)
        return DirectPart(self, spark, table, summary, committed, decoding[1], jvm, batch_id)

    def direct_done(self, part: DirectPart, written) -> bool:
        """The table's `part` written with the others' (sinks/direct.py's `write_parts`),
        committed as `_direct_batch` commits its own; False, with nothing committed, when it
        needs a batch of its own through a query."""
        try:
            return self._direct_written(part.spark, part.table, written, part.found, part.summary, part.committed,
                                        part.batch_id)
        except UnseenSchema:
            return False
        except Exception as e:  # noqa: BLE001 - py4j wraps the Iceberg exceptions
            if not offsets_moved(e):
                raise
            return False  # the table moved under its part: a batch of its own reads where it is

    def _direct_ready(self, spark, table, raw_schema, planned: int | None):
        """The table's decoding of the Kafka source's rows of `raw_schema` for the direct path,
        and what it was built for; None when the batch does not take it (direct writes off,
        a mode other than upsert, a bootstrap's rows to hold back, a target the path refuses,
        more records than a task takes, a decoding that is not a chain of projections). The
        delete memory's expired entries are dropped first when due."""
        if (not self.direct_writes or self.mode != "upsert" or self.held or not table.has_direct_path
                or (planned or 0) > self.direct_records):
            return None
        known = {k: v for k, v in self._judged().items() if v}
        headers = "headers" in raw_schema.fieldNames()
        found = ("direct", tuple(sorted(known.items())), headers, tuple(self.heads), raw_schema.json(),
                 tuple(sorted(self.avro_schemas)), tuple(sorted(self.avro_judged)))
        decoder = self._plan(found, lambda: self._direct_decoding(spark, raw_schema, known, headers))
        if decoder is None:
            return None
        self._forget_deletes(spark)
        return decoder, found

    def _direct_written(self, spark, table, written, found: tuple, summary: dict | None, committed: dict[int, int],
                        batch_id: int) -> bool:
        """A batch the direct path decoded and wrote (`written`, a sinks/direct.py Batch):
        committed when its stats' plan allows, else its files discarded and False returned (it
        then takes a query); UnseenSchema when it holds a schema not judged yet."""
        if written.reason is not None:
            self.timer.rename("direct", "direct refused")
            if written.reason == UNSEEN:
                raise UnseenSchema(self.name)
            if written.reason == DECODED_COLUMNS:  # the target's schema changed: decoded anew next time
                self._forget_plan(found)
            return False
        stats = [PartitionStats(s["partition"], s["first"], s["last"], s["records"], s["position"], s["source_ts_ms"],
                                s["errors"], s["deletes"], schemas=frozenset(s["schemas"]),
                                transaction=transaction_of(s.get("transaction"))) for s in written.stats()]
        toast = self._toast()
        target = Target(self.topic, self.topic_id, self.job, self.mode, toast, None, committed, summary,
                        self.schemas, None)
        plan = plan_batch(stats, target, batch_id, self._planned_end(batch_id))
        if plan is None or plan.empty or plan.direct or plan.dead_letters or plan.steps != (Changes(),):
            written.discard()
            if plan is not None and plan.empty:
                table.commit_summary_only(plan.props, self._txn(batch_id))
            if plan is None or plan.empty:
                return True
            self.timer.rename("direct", "direct refused")
            return False
        crash_point("before-merge")
        table.refresh()
        before = table.version()
        try:
            with self.timer.step("direct"):
                remembered = written.commit(plan.props)
        except Exception as e:  # noqa: BLE001 - py4j wraps the Iceberg exceptions
            if not is_conflict(e):
                raise
            written.discard()
            self.timer.rename("direct", "direct refused")
            log(f"commit conflict, the batch is applied again: {str(e).splitlines()[0][:200]}", table=self.name,
                event="commit-conflict", level="warning")
            return False
        metrics.COMMIT_CPU_SECONDS.labels(self.name).observe(written.cpu_s)
        if remembered:
            self.remembered_since += 1
        table.refresh()
        self._committed(spark, table, before, plan, stats, batch_id)
        return True

    def _direct_decoding(self, spark, raw_schema, refused: dict, headers: bool):
        """The table's decoding of the Kafka source's rows of `raw_schema` with the columns of the
        stats `_direct_batch` reads, kept for its batches (sinks/direct.py's `decoding`)."""
        template = spark.createDataFrame(spark.sparkContext.emptyRDD(), raw_schema)
        if self.registry is not None:  # Avro: by the writer schemas judged; a record of another is a query's
            template = self._avro_envelopes(template)
        events = mask_columns(self._decoder(refused, True, headers)(template), self.masked, self.mask_key)
        lacking = reduce(lambda a, b: a | b, [F.col(f"_unavailable_{i}") for i in range(len(self._toast()))],
                         F.lit(False))
        events = events.withColumns({
            "_bad": F.col("_error").isNotNull(), "_ms": F.unix_millis("_source_ts"),
            "_lacking": F.coalesce(F.col("_op").isin("c", "u", "r") & lacking, F.lit(False)),
            "_moved": F.coalesce(F.col("_moved_from"), F.lit(False)) | F.coalesce(F.col("_key_moved"), F.lit(False))})
        if "_schema" not in events.columns:
            events = events.withColumn("_schema", F.lit(None).cast("bigint"))
        return direct_decoding(spark, events, raw_schema, self.target_ref)

    def _write_directly(self, spark, table, events: DataFrame, props: dict, names: tuple[str, ...]):
        """The batch's `events` written without a MERGE (sinks/direct.py): deduped, guarded by the
        delete memory, their deletes remembered, in one job; returns the table's version before it."""
        table.refresh()
        before, floor = table.version(), table.properties().get(TRUNCATED_AT)
        with self.timer.step("direct"):
            remembered = run_with_conflict_retries(lambda: write_directly(
                spark, self.target_ref, self.deletes_ref, events, self.key, names, floor, props), table=self.name)
        if remembered:
            self.remembered_since += 1
        return before

    def _merge_changes(self, spark, table, batch: DataFrame, events: DataFrame, plan: BatchPlan,
                       names: tuple[str, ...], toast: tuple[str, ...], persisted: list, batch_id: int,
                       final: bool):
        """The changes looked up (the delete memory, key changes, unchanged values), deduped
        (or, in history mode, made versions) and merged; returns the table's version before it."""
        remembered = self._remembered_deletes(spark, events)
        moved = None
        if plan.key_changes:
            with self.timer.step("key changes"):
                events, moved = unchanged.resolve_moves(
                    events, self.key, toast, self._stored(spark, table, toast), self._moved_rows(spark),
                    self.mode != "history", persisted)
        if plan.placeholders:
            with self.timer.step("unchanged values"):
                events = self._set_aside_unknown(spark, table, batch, events, toast, remembered, persisted, batch_id)
        if self.mode == "history":  # every change is a version: no last change per key
            floor = table.properties().get(TRUNCATED_AT)
            changes = self._remembered(events.where(F.col("_position") > floor) if floor else events, remembered)
            stored = stored_versions(spark.sql(f"SELECT * FROM {self.target_ref}"),
                                     events.select(*[q(k) for k in self.key]).distinct(), self.key, toast)
            changes = history_changes(changes, stored, self.key, names, toast)
        else:
            dedupe = self._plan(("dedupe", names, toast), lambda: last_per_key_of(
                self.key, names, toast, self.mode == "soft_delete"))
            changes = self._remembered(dedupe(events), remembered)
        view = self._view("cdc_batch")
        changes.createOrReplaceTempView(view)
        deletes = None
        if plan.deletes:
            # The memory takes the batch's delete events (persisted), not the last change per
            # key: a delete is remembered at its own position, so the dedupe runs once, in the MERGE.
            deletes = events.where(F.col("_op") == "d")
            deletes = deletes.withColumn("_moved", F.lit(None).cast("string")) if moved is None else \
                deletes.join(moved, ["_partition", "_offset"], "left")
        return self._commit(spark, table, view, deletes, plan.props if final else None, toast, batch_id, plan.buckets)

    def _compact(self, spark, table) -> None:
        """After a batch's commit, once `compact_every_files` data files a partition were added
        to the target, or that many inserts to its delete memory made, since the job's first
        batch or its last rewrite: rewrite the small data files of the target and of its
        delete memory into few. A MERGE reads every file of a small table (of a partition a
        small batch names), so the files of batch after batch would make each batch cost more
        until `cdc maintain` compacts them. A rewrite that fails (a race with `cdc maintain`)
        waits until it is due again."""
        if not self.compact_every_files:
            return
        files = table.data_files()
        if self.compacted_at is None:
            self.compacted_at, self.partitions = files, table.partitions()
        if not compaction_due(files - self.compacted_at, self.partitions, self.remembered_since,
                              self.compact_every_files):
            return
        with self.timer.step("compact"):
            for part, target in (("target", table), ("delete memory", open_table(spark, self.deletes_ref))):
                try:
                    rewritten = target.compact_small_files(SMALL_FILE_BYTES)
                except Exception as e:  # noqa: BLE001 - the batch has committed: its job goes on
                    log(f"the {part}'s small data files were not rewritten: {str(e).splitlines()[0][:300]}",
                        table=self.name, event="compaction-skipped", level="warning", part=part)
                    continue
                log(f"rewrote {rewritten} small data files of the {part}", table=self.name, event="compacted",
                    part=part, rewritten=rewritten, data_files=target.data_files())
        self.compacted_at, self.remembered_since = table.data_files(), 0

    def _expire(self, spark, table) -> None:
        """After a batch's commit, once the target is due (an Iceberg one holding a tenth more
        than `max_snapshots` snapshots; a Delta one never is): expire all but the newest
        `max_snapshots` of it, of its delete memory and of its dead letters (never the
        target's newest with cdc offsets).
        Each commit writes every snapshot kept into the table's metadata file again, so a
        table that commits every few seconds would otherwise make each commit cost more, and
        write more, until `cdc maintain` expires them. An expiry that fails waits for the next."""
        if not self.max_snapshots or not table.expiry_due(self.max_snapshots):
            return
        with self.timer.step("expire"):
            for part, ref in {"target": self.target_ref, **self._side_tables()}.items():
                try:
                    kept = table if ref == self.target_ref else open_table(spark, ref)
                    expired = kept.keep_snapshots(self.max_snapshots, resume=kept is table)
                except Exception as e:  # noqa: BLE001 - the batch has committed: its job goes on
                    log(f"the {part}'s snapshots were not expired: {str(e).splitlines()[0][:300]}",
                        table=self.name, event="expiry-skipped", level="warning", part=part)
                    continue
                if expired:
                    log(f"expired {expired} snapshots of the {part}", table=self.name, event="expired", part=part,
                        expired=expired, kept=self.max_snapshots)

    def _side_tables(self) -> dict[str, str]:
        """The tables the job writes beside the target, by what the log calls them."""
        sides = {"delete memory": self.deletes_ref}
        if self.on_error == "dlq":
            sides["dead letters"] = self.dead_letters_ref
        return sides

    def _bucketing(self, table) -> tuple[str, str] | None:
        """(the target's key bucket, the events' key bucket) when a small batch into this
        target names its keys' buckets in the MERGE, which then moves only the target's rows
        that can match, not the whole table; the events' buckets come with the batch's stats."""
        if self.mode == "history" or table.stored_bytes() < self.buckets_from_bytes:
            return None
        by_name = {c.name: c for c in self.columns}
        types = {k: by_name[k].spark_type for k in self.key}
        target = key_bucket(types, "t")
        return None if target is None else (target, key_bucket(types))

    def _stored(self, spark, table, toast: tuple[str, ...]) -> DataFrame:
        """The target's rows as the key-change lookup reads them (planning/unchanged.py), as of
        its version before this batch's commit."""
        rows = self._target_rows(spark, table)
        gone = F.col("_cdc_deleted") if self.mode == "soft_delete" else F.lit(False)
        return rows.select(*[q(c) for c in (*self.key, *toast)], "_cdc_position", gone.alias("_gone"))

    def _target_rows(self, spark, table) -> DataFrame:
        version = table.version()
        return spark.sql(f"SELECT * FROM {self.target_ref}" + ("" if version is None else
                                                               f" VERSION AS OF {int(version)}"))

    def _moved_rows(self, spark) -> DataFrame | None:
        """The delete memory's copies of moved rows (None in history mode, which keeps its
        versions, or for a memory never written to), as of its version before this batch."""
        version = open_table(spark, self.deletes_ref).version()
        if self.mode == "history" or version is None:
            return None
        return spark.sql(f"SELECT * FROM {self.deletes_ref} VERSION AS OF {int(version)}").where(
            F.col(MOVED).isNotNull())

    def _set_aside_unknown(self, spark, table, batch: DataFrame, events: DataFrame, toast: tuple[str, ...],
                           remembered: DataFrame | None, persisted: list, batch_id: int) -> DataFrame:
        """Changes that would write a row without an unchanged value nobody has go to the dead
        letters (or stop the job, `on_error: fail`) instead of writing a null."""
        rows = self._target_rows(spark, table)
        if self.mode == "history":
            held = rows.groupBy(*[q(k) for k in self.key]).agg(
                F.max("_cdc_current").alias("_held"), F.max("_cdc_position").alias("_known"))
        else:
            held = rows.select(*[q(k) for k in self.key], F.lit(True).alias("_held"),
                               F.col("_cdc_position").alias("_known"))
        unknown = unchanged.unknown_values(events, self.key, toast, held, self.mode,
                                           table.properties().get(TRUNCATED_AT), remembered).persist()
        persisted.append(unknown)
        if unknown.isEmpty():
            return events
        events = unchanged.set_aside(events, unknown, self.key, toast)  # the batch's events are cached already
        bad = events.where(F.col("_error").isNotNull()).count()
        self._dead_letters(spark, batch, events, bad, batch_id)
        return events.where(F.col("_error").isNull())

    def _log_applied(self, stats: list, batch_id: int) -> None:
        records = sum(s.records for s in stats)
        metrics.batch_applied(self.name, records, sum(s.errors for s in stats), self.timer.elapsed(), self.timer.steps)
        log(f"batch {batch_id} ({records:,} records) applied in {self.timer.line()}", table=self.name,
            event="batch-applied", batch_id=batch_id, records=records, seconds=round(self.timer.elapsed(), 3),
            steps={k: round(v, 3) for k, v in self.timer.steps.items()})

    def _view(self, prefix: str) -> str:
        """The name of one of the table's temporary views."""
        return f"{prefix}_{self.name.replace('.', '__')}"

    def _forget_deletes(self, spark, now=time.time) -> None:
        """Drop the delete memory's entries past the horizon, at most every `forget_every_s`:
        the time of the last drop is kept on the memory (`FORGOTTEN_AT`), so neither a job's
        start nor a restarted job pays for it again. A memory never written to is left as it
        is: a DELETE would commit an empty snapshot, and every batch read it."""
        if self.forget_due is None:  # the first batch of this process
            last = open_table(spark, self.deletes_ref).properties().get(FORGOTTEN_AT)
            self.forget_due = (int(last) / 1000 if last else 0) + self.forget_every_s
        if now() < self.forget_due:
            return
        memory = open_table(spark, self.deletes_ref)
        if memory.written():
            spark.sql(forget_deletes_sql(self.deletes_ref, self.delete_horizon_hours))
            memory.refresh()
            memory.set_properties({FORGOTTEN_AT: str(int(now() * 1000))})
        self.forget_due = now() + self.forget_every_s

    def _remembered_deletes(self, spark, events: DataFrame) -> DataFrame | None:
        """The delete memory's entries for the keys of the batch's `events`, as of its
        current version, as it was before this batch's insert (which the MERGE follows);
        None for a memory never written to (an Iceberg table without a snapshot), which is
        not read at all. A memory past `buckets_from_bytes` aggregates only the batch's keys
        (Spark pushes the semi join below the aggregate), so a batch costs its changes, not
        the memory's size; a smaller one is read whole, which spares the semi join's job."""
        memory = open_table(spark, self.deletes_ref)
        version = memory.version()
        if version is None:
            return None
        remembered = spark.sql(remembered_deletes_sql(self.deletes_ref, self.key, version))
        if memory.stored_bytes() < self.buckets_from_bytes:
            return remembered
        keys = events.select(*[F.col(q(k)).alias(f"_deleted_{i}") for i, k in enumerate(self.key)])
        return remembered.join(keys, [f"_deleted_{i}" for i in range(len(self.key))], "left_semi")

    def _remembered(self, changes: DataFrame, remembered: DataFrame | None) -> DataFrame:
        """`changes` with the newest remembered delete position of each key (`_deleted_position`)."""
        if remembered is None:
            return changes.withColumn("_deleted_position", F.lit(None).cast("string"))
        on = [F.col(q(k)).eqNullSafe(F.col(f"_deleted_{i}")) for i, k in enumerate(self.key)]
        return changes.join(remembered, on=reduce(lambda a, b: a & b, on), how="left").drop(
            *[f"_deleted_{i}" for i in range(len(self.key))])

    def _txn(self, batch_id: int) -> tuple[str, int]:
        """The batch's identity for Delta's idempotent writes: the streaming query's id (kept
        in its checkpoint; a new checkpoint numbers batches from 0 again) and the batch id."""
        query = None
        if self.checkpoint is not None and (self.checkpoint / "metadata").is_file():
            query = json.loads((self.checkpoint / "metadata").read_text().splitlines()[0]).get("id")
        return f"cdc:{self.name}:{query or self.job}", batch_id

    def _commit(self, spark, table, view: str, deletes: DataFrame | None, props: dict | None,
                toast: tuple[str, ...], batch_id: int, buckets: tuple[str, tuple[int, ...]] | None = None):
        """The delete memory's insert of the `deletes` events, then the target's one commit
        stamped with the batch's offsets and identity (unless `props` is None): a MERGE, or an
        append into an empty target; returns the table's version before it."""
        if deletes is not None:  # before the target's commit: a crash in between re-runs both
            with self.timer.step("delete memory"):
                deletes.createOrReplaceTempView(self._view("cdc_deletes"))
                run_with_conflict_retries(lambda: spark.sql(remember_deletes_sql(
                    self.deletes_ref, self._view("cdc_deletes"), self.key)), table=self.name)
            self.remembered_since += 1
        table.refresh()
        before = table.version()
        names, floor = tuple(c.name for c in self.columns), table.properties().get(TRUNCATED_AT)
        if self.mode == "history":
            statement = history_merge_sql(self.target_ref, view, self.key, names)
        elif table.holds_no_rows():  # a first load (a snapshot's `r` events): a bulk append
            statement = append_sql(self.target_ref, view, names, floor, self.mode)
        else:
            statement = merge_sql(self.target_ref, view, self.key, names, floor=floor, toastable=toast, mode=self.mode,
                                  buckets=buckets)
        spread = table.undistributed() if buckets is not None else nullcontext()  # a small batch
        with self.timer.step("merge" if "MERGE" in statement[:5] else "append"), spread:
            run_with_conflict_retries(lambda: spark.sql(statement) if props is None else
                                      table.commit_statement(statement, props, self._txn(batch_id)), table=self.name)
        return before
