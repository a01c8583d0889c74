"""`cdc run`'s supervisor: the job's tables and their queries, started, retried with backoff,
given up and tried again, a shared query's tables leaving it and joining it again, and tables
handed over to a command and taken back."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cdc.config.loader import load_tables
from cdc.config.models import Settings, TableRegistration
from cdc.control import jobstate
from cdc.errors import ApplyError, Busy, CdcError, ConfigError
from cdc.jobs import metrics, shared, shutdown
from cdc.jobs.backlog import PROGRESS_EVERY_S, CatchUp
from cdc.jobs.failures import diagnose
from cdc.jobs.queries import START_THREADS, Queries
from cdc.jobs.watchers import read_lag, watch_lag
from cdc.log import log
from cdc.register.connector import topic_for
from cdc.register.lineage import RunLineage
from cdc.sinks.session import get_session
from cdc.waiting import poll_until

FAILED_RETRY_S = 60.0  # how long a continuous job waits before it tries a failed table again
REJOIN_EVERY_S = 10.0  # how often a table away from its shared query is looked at (rejoin)
SHARED_TABLES = "cdc-tables.json"  # in a shared query's checkpoint: the tables it reads (drop_dead_checkpoints)


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
                 clock=time.monotonic, sleep=None, lent: jobstate.Lent | None = None,
                 starter: Queries | None = None, lag=read_lag):
        self.spark, self.settings, self.available_now, self.lent = spark, settings, available_now, lent
        self.starter = starter or Queries(spark, settings)  # starts and stops the queries (queries.py)
        self.lag = lag  # a table's lag: (records left, offsets applied), None while unknown (watchers.py)
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
                    query = self.starter.start_table(self.tables[name], self.available_now, len(self.tables))
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
        query, batch = self.starter.start_shared(name, members, checkpoint, self.available_now,
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
        return self.starter.open_member(self.tables[table])

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
                                      or (lag := self.lag(self.settings, reg)) is None or lag[0] > batch.cap):
                continue
            self.starter.stop(table, self.queries.pop(table))
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
            applier = self.starter.applier(session, reg, target, batch.checkpoint)
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
        if (lag := self.lag(self.settings, self.tables[name], done=self.applied(name))) is not None:
            self.catchups[name].line(*lag)

    def fail(self, name: str, error: CdcError) -> None:
        """A table given up: recorded and reported, and the other tables go on. A continuous
        job tries it again after FAILED_RETRY_S."""
        error.table = error.table or name
        self.failed[name] = error
        self.retry_at[name] = self.clock() + FAILED_RETRY_S
        query = self.queries.pop(name, None)
        if query is not None:
            self.starter.stop(name, query)
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
                self.lag(self.settings, self.tables[table], done=self.applied(table))
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
            self.starter.stop(table, self.queries.pop(table))
            return
        name = next((n for n, members in self.groups.items() if table in members), None)
        if name is None:
            return
        self.leave(name, table)
        if name in self.queries:
            self.starter.stop(name, self.queries[name])
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
            try:
                found = load_tables(self.settings, table, invalid=invalid)
            except ConfigError:  # no registration of that name is left (`cdc tables remove`)
                found = []
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
            self.starter.stop(name, q)
        for batch in self.batches.values():
            self.drop_checkpoint(batch)


def _input_rows(progress) -> int:
    """Rows of a query's last progress report (a dict or a progress object, by version)."""
    if progress is None:
        return 0
    return int(progress.get("numInputRows", 0) if isinstance(progress, dict) else getattr(progress, "numInputRows", 0))


def run(settings: Settings, tables: list[TableRegistration], available_now: bool) -> None:
    if not tables:
        raise ApplyError("no tables are registered", hint=f"add registrations under {settings.tables_dir}/")
    names = [t.name for t in tables]
    with jobstate.exclusive(settings.state_dir, names) if available_now else \
            jobstate.lending(settings.state_dir, names) as lent:
        supervisor = Supervisor(get_session(settings), settings, tables, available_now, lent=lent)
        lineage = RunLineage(settings, tables)  # OpenLineage events, when cdc.yaml's `lineage` is on
        lineage.started()
        failed: dict[str, str] = {}
        try:
            supervisor.run_available_now() if available_now else supervisor.run_until_stopped()
        except BaseException as e:
            if not supervisor.failed:  # not one table's failure (those are recorded as they happen)
                hit = [e.table] if getattr(e, "table", None) in supervisor.tables else supervisor.running()
                if isinstance(e, CdcError):
                    for name in hit:
                        jobstate.record(settings.state_dir, name, jobstate.FAILED, e.message, remedy=e.hint)
                failed = dict.fromkeys(hit, getattr(e, "message", None) or str(e) or type(e).__name__)
            raise
        finally:
            supervisor.stop()
            lineage.ended({name: e.message for name, e in supervisor.failed.items()} or failed)
