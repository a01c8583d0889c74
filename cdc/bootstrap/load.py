"""`cdc bootstrap`: fill a table's target from the source, then let streaming take over.

- `jdbc`: the source is read in parallel by Spark's JDBC reader inside one exported
  snapshot, in key-range chunks each appended in bulk (no MERGE); the snapshot's horizon
  is recorded, and the job drops the changes it already holds (see `planning/bootstrap.py`).
- `debezium`: the target is emptied and Debezium's incremental snapshot (through the
  signal table) re-reads the table into its topic; the job applies it.

Either way the target is emptied first (a target that holds rows once `confirm` agrees),
streaming resumes at the Kafka end offsets read before the source was read, and the table
is caught up before the command returns. An interrupted bootstrap resumes where it
stopped; the table's job refuses to run until the bootstrap is done.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict

from cdc.bootstrap import jdbc
from cdc.config.clients import kafka_access
from cdc.config.models import Settings, TableRegistration
from cdc.control import commits, jobstate
from cdc.control.faults import crash_point
from cdc.errors import ConfigError, DependencyError
from cdc.jobs.supervisor import run
from cdc.jobs.targets import load_target
from cdc.log import log
from cdc.planning.bootstrap import (CHUNK, DONE, INTEGER_KINDS, PROPERTY, RUNNING, START, Bootstrap, SourceSnapshot,
                                chunk_count, plan_chunks)
from cdc.planning.protect import mask_columns, target_mask_key
from cdc.register.connector import ConnectClient, connector_name, topic_for
from cdc.control.kafka import topic_id, watermarks
from cdc.sinks.formats import add_missing_columns, shown_name
from cdc.sinks.session import get_session
from cdc.sinks.targets import check_owner, check_protection, table_columns
from cdc.sources import module_of, postgres

DEFAULT_CHUNK_ROWS = 500_000
PROGRESS_EVERY_S = 5  # how often the Debezium method reports its progress


def bootstrap(settings: Settings, reg: TableRegistration, method: str | None = None,
              chunk_rows: int = DEFAULT_CHUNK_ROWS, restart: bool = False,
              confirm: Callable[[str], bool] | None = None) -> None:
    """`confirm(question)`, when given, is asked before a new bootstrap empties a target
    that holds rows; a no leaves the target as it is."""
    with jobstate.exclusive(settings.state_dir, [reg.name]):  # never beside the table's own job
        _bootstrap(settings, reg, method, chunk_rows, restart, confirm)


def _bootstrap(settings: Settings, reg: TableRegistration, method: str | None, chunk_rows: int,
               restart: bool, confirm: Callable[[str], bool] | None) -> None:
    spark = get_session(settings).newSession()
    table = load_target(spark, settings, reg)[1]  # sinks/formats.py: Iceberg or Delta
    columns, key, topic = table_columns(table.properties())
    check_owner(reg, table.properties(), topic_for(reg.source.name, reg), shown_name(settings, reg))
    check_protection(reg, table.properties())
    target_mask_key(settings, reg, table.properties())  # another key than the target's: refused before any work
    text = table.properties().get(PROPERTY)
    current = Bootstrap.from_json(text) if text else None
    started = time.monotonic()
    if current and current.state == RUNNING and not restart:
        if method and method != current.method:
            raise ConfigError(f"table {reg.name} has an unfinished {current.method} bootstrap",
                              hint=f"resume it with `cdc bootstrap --table {reg.name}`, or start over with "
                                   f"`--method {method} --restart`")
        boot = current
        log(f"resuming the {boot.method} bootstrap {boot.id}", table=reg.name, event="bootstrap-resumed",
            stream=sys.stdout)
    else:
        method = method or default_method(settings, reg)
        if method == "jdbc" and settings.sources[reg.source.name].kind != "postgresql":
            raise ConfigError(f"table {reg.name}: the jdbc bootstrap reads PostgreSQL sources only; source "
                              f"{reg.source.name!r} is {settings.sources[reg.source.name].kind}",
                              hint=f"use `cdc bootstrap --table {reg.name} --method debezium`")
        rows = table.row_count() if confirm is not None else 0
        if rows and not confirm(f"cdc bootstrap empties the target {shown_name(settings, reg)} ({rows:,} rows) of "
                                f"table {reg.name} and fills it again from the source. Empty it?"):
            raise ConfigError(f"table {reg.name}: bootstrap not started; its target was left as it is",
                              hint=f"run `cdc bootstrap --table {reg.name} --yes` to empty and refill it")
        ends = {p: hi for p, (_, hi) in watermarks(kafka_access(settings), topic).items()}
        by_name = {c.name: c for c in columns}
        boot = Bootstrap(uuid.uuid4().hex[:12], method, RUNNING, ends,
                         topic_id(kafka_access(settings), topic),
                         key[0] if by_name[key[0]].kind in INTEGER_KINDS else None)
    if boot.method == "jdbc":
        _jdbc(spark, settings, reg, table, boot, columns, key, chunk_rows, fresh=boot is not current)
    else:
        _debezium(spark, settings, reg, table, boot, fresh=boot is not current)
    _finish(settings, reg, table, topic, boot)
    run(settings, [reg], available_now=True)  # the changes made while the source was read
    rows = table.row_count()
    elapsed = time.monotonic() - started
    log(f"bootstrap {boot.id} ({boot.method}) done: {rows} rows in {elapsed:.1f}s "
        f"({rows / max(elapsed, 1e-9):,.0f} rows/s), streaming from offsets "
        f"{json.dumps({str(p): o for p, o in sorted(boot.offsets.items())})}", table=reg.name,
        event="bootstrap-done", stream=sys.stdout, rows=rows, seconds=round(elapsed, 3))


def default_method(settings: Settings, reg: TableRegistration) -> str:
    """jdbc for PostgreSQL (one exported snapshot read in parallel); debezium otherwise."""
    return "jdbc" if settings.sources[reg.source.name].kind == "postgresql" else "debezium"


def _begin(spark, settings: Settings, reg: TableRegistration, table, boot: Bootstrap) -> None:
    """Empty the target and record the plan in one commit; the old checkpoint goes."""
    table.empty({START: boot.id}, {PROPERTY: boot.to_json()})
    shutil.rmtree(settings.path(settings.spark.checkpoint_dir) / reg.name, ignore_errors=True)
    log(f"bootstrap {boot.id} ({boot.method}) started; target emptied", table=reg.name, event="bootstrap-started",
        stream=sys.stdout)


def _done_chunks(table, boot: Bootstrap) -> dict[int, SourceSnapshot]:
    """Chunks of this bootstrap already committed, from the table's history."""
    done = {}
    for summary in table.summaries():
        if CHUNK in summary:
            c = json.loads(summary[CHUNK])
            if c["id"] == boot.id:
                s = c["snapshot"]
                done[c["index"]] = SourceSnapshot(s["lsn"], s["xmin"], s["xmax"], tuple(s["xip"]))
        if summary.get(START) == boot.id:
            break
    return done


def _jdbc(spark, settings: Settings, reg: TableRegistration, table, boot: Bootstrap, columns, key,
          chunk_rows: int, fresh: bool) -> None:
    partitions = max(2, spark.sparkContext.defaultParallelism * 2)
    with postgres.exported_snapshot(settings, reg.source.name) as exported:
        snapshot = SourceSnapshot.parse(exported.horizon, exported.wal_lsn)
        estimate = postgres.estimate_rows(exported.conn, reg)
        if fresh:
            if boot.key_column:
                n = chunk_count(estimate, chunk_rows)
                boot.chunks = plan_chunks(_quantiles(exported.conn, reg, boot.key_column, n * partitions, estimate), n)
            _begin(spark, settings, reg, table, boot)
        boot.snapshots = _done_chunks(table, boot)
        added = add_missing_columns(spark, table.ref, table, columns, reg.mask)  # a column the source gained meanwhile
        if added:
            log(f"columns {added} added to the target, which the source gained since its last change was applied",
                table=reg.name, event="schema-evolved", added=added)
        todo = [i for i in range(len(boot.chunks)) if i not in boot.snapshots]
        progress = Progress(reg.name, len(boot.chunks), estimate, already=len(boot.snapshots))
        for i in todo:
            rows = jdbc.as_target_rows(jdbc.read_chunk(spark, settings, reg, columns, key, boot.key_column,
                                                       boot.chunks[i], exported.name, partitions),
                                       columns, exported.taken_at, mode=reg.mode)
            rows = mask_columns(rows, reg.mask, target_mask_key(settings, reg, table.properties()))  # never in clear
            record = json.dumps({"id": boot.id, "index": i, "snapshot": asdict(snapshot)})
            added = table.append(rows, {CHUNK: record})
            boot.snapshots[i] = snapshot
            progress.chunk_done(i, added)
            crash_point("bootstrap-chunk")


SAMPLE_ROWS = 200_000  # rows sampled to cut the key into ranges of about equal size


def _quantiles(conn, reg: TableRegistration, column: str, pieces: int, estimate: int) -> list[int]:
    """Cut points of the integer key into `pieces` ranges of about equal rows, from a sample."""
    if pieces <= 1:
        return []
    percent = min(100.0, 100.0 * SAMPLE_ROWS / max(estimate, 1))
    sample = "" if percent >= 100 else f" TABLESAMPLE SYSTEM ({percent:.6f})"
    fractions = [i / pieces for i in range(1, pieces)]
    (cuts,) = conn.execute(f"SELECT percentile_disc(%s::float8[]) WITHIN GROUP (ORDER BY {postgres.ident(column)}) "
                           f"FROM {postgres.qualified(reg)}{sample}", (fractions,)).fetchone()
    return [int(c) for c in cuts or [] if c is not None]


def _debezium(spark, settings: Settings, reg: TableRegistration, table, boot: Bootstrap, fresh: bool) -> None:
    if fresh:
        _begin(spark, settings, reg, table, boot)
    src = settings.sources[reg.source.name]
    name = connector_name(reg.source.name)
    client = ConnectClient.of(settings)
    kind = module_of(settings, reg.source.name)
    with kind.connect(settings, reg.source.name) as conn:
        estimate = kind.estimate_rows(conn, reg)
        marker = kind.request_incremental_snapshot(conn, src.signal_table,
                                                   [f"{reg.source.schema_}.{reg.source.table}"])
    log(f"waiting for Debezium's incremental snapshot of {reg.source.schema_}.{reg.source.table} (connector {name})",
        table=reg.name, event="bootstrap-waiting", stream=sys.stdout)
    topic = table_columns(table.properties())[2]
    progress = Progress(reg.name, 1, estimate)
    shown = [time.monotonic()]

    def tick(last: bool = False) -> None:  # records in the topic since the bootstrap began, every few seconds
        if last or time.monotonic() - shown[0] >= PROGRESS_EVERY_S:
            shown[0] = time.monotonic()
            try:
                ends = watermarks(kafka_access(settings), topic)
            except DependencyError:
                return  # the progress line waits; the snapshot goes on
            progress.rows_read(sum(max(0, hi - boot.offsets.get(p, 0)) for p, (_, hi) in ends.items()))

    client.wait_captured(name, marker)
    client.wait_incremental_snapshot(name, tick=tick)
    tick(last=True)


def _finish(settings: Settings, reg: TableRegistration, table, topic: str, boot: Bootstrap) -> None:
    """Streaming takes over at the recorded offsets, in the commit that marks the bootstrap done."""
    previous = table.last_committed_summary()
    committed = commits.parse_offsets(previous).get(topic, {})
    offsets = {p: max(o, committed.get(p, 0)) for p, o in boot.offsets.items()}
    position = max((s.position for s in boot.snapshots.values()), default=None)
    boot.state = DONE
    summary = commits.summary_properties(topic, offsets, -1, f"{reg.name}@bootstrap-{boot.id}", position, None,
                                         previous, boot.topic_id)
    table.commit_summary_and_properties(summary, {PROPERTY: boot.to_json()})


class Progress:
    """One line per chunk: a bar, rows so far, rows per second and the time left."""

    def __init__(self, name: str, chunks: int, estimate: int, already: int = 0, out=None,
                 clock=time.monotonic):
        self.name, self.chunks, self.out, self.clock = name, chunks, out, clock
        self.estimate = max(estimate * (chunks - already) // max(chunks, 1), 1)  # rows this run reads
        self.started, self.rows, self.done, self.already = clock(), 0, 0, already

    def chunk_done(self, index: int, rows: int) -> None:
        self.rows += rows
        self.done += 1
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.rows / elapsed
        todo = self.chunks - self.already
        share = min(1.0, max(self.done / todo, self.rows / self.estimate))
        left = (elapsed / share - elapsed) if share < 1 else 0.0
        bar = "#" * int((self.already + share * todo) / self.chunks * 30)
        log(f"[{bar:<30}] chunk {self.already + self.done}/{self.chunks}, {self.rows:,} rows, "
            f"{rate:,.0f} rows/s, about {left:.0f}s left", table=self.name, event="progress",
            stream=self.out or sys.stdout, rows=self.rows, rows_per_s=round(rate), seconds_left=round(left))

    def rows_read(self, rows: int) -> None:
        """A line for a bootstrap that counts rows, not chunks (Debezium's snapshot: the
        records its topic gained, which include changes streamed meanwhile)."""
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = rows / elapsed
        share = min(1.0, rows / self.estimate)
        left = (self.estimate - rows) / rate if rate and share < 1 else 0.0
        log(f"[{'#' * int(share * 30):<30}] {rows:,} of about {self.estimate:,} rows, "
            f"{rate:,.0f} rows/s, about {left:.0f}s left", table=self.name, event="progress",
            stream=self.out or sys.stdout, rows=rows, rows_per_s=round(rate), seconds_left=round(left))
