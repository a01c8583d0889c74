"""`cdc run`'s supervisor: the loop that observes the job's queries, Kafka and the state
directory, tells jobs/supervision.py what it saw and performs the actions that come back:
queries started and stopped, a shared query's tables joining it again, tables handed over
to a command and taken back. It decides nothing itself and never sleeps but to wait for a
query to end. A continuous job follows the registrations of its selection: a table
registered while it runs is started, one removed is stopped, one registered anew is started
again with its new registration."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
import threading
import time
from collections import deque
from contextlib import nullcontext
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cdc.config.clients import kafka_access
from cdc.config.loader import load_tables
from cdc.config.models import Settings, TableRegistration
from cdc.control import jobstate
from cdc.control.kafka import existing_topics
from cdc.errors import ApplyError, Busy, CdcError, ConfigError
from cdc.jobs import metrics, shared, shutdown
from cdc.jobs import supervision as s
from cdc.jobs.backlog import PROGRESS_EVERY_S, CatchUp
from cdc.jobs.failures import diagnose
from cdc.jobs.queries import START_THREADS, Queries
from cdc.jobs.targets import load_target
from cdc.jobs.watchers import read_lag, watch_lag
from cdc.log import log
from cdc.register.connector import topic_for
from cdc.register.lineage import RunLineage
from cdc.sinks.session import get_session

SHARED_TABLES = "cdc-tables.json"  # in a shared query's checkpoint: the tables it reads (drop_dead_checkpoints)
LOOK_EVERY_S = 1.0  # the longest the loop waits for a query to end before it looks again
REGISTRATIONS_EVERY_S = 2.0  # how often a continuous job looks at the tables directory


class Supervisor:
    """Runs one query per table, or one per group of tables with `spark.shared_query`
    (shared.groups), as `Supervision` decides: a failing query is started again after its
    backoff while its failure is retriable, for at most `retry_for_s`, then its table is
    given up (the other tables go on); a table that fails in a shared query leaves it for a
    query of its own and joins it again once that query runs well. Every query starts in the
    job's session, whose query manager tells the loop when one ends. A continuous job
    (`lent`: its tables' locks) hands a table over to a command that asks for it (`cdc
    bootstrap`, `replay`, `tables remove`) and takes it back once that command is done. With
    `follow`, it looks at the registrations its `selection` (`cdc run --table`; None: every
    table) names every REGISTRATIONS_EVERY_S and starts, stops or starts again the tables
    whose registration came, went or changed (supervision.registration_changes); a new table
    starts once its target and topic exist (`ready`), in a query of its own."""

    def __init__(self, spark, settings: Settings, tables: list[TableRegistration], available_now: bool,
                 clock=time.monotonic, lent: jobstate.Lent | None = None, starter: Queries | None = None,
                 lag=read_lag, cut=None, follow: bool = False, selection: list[str] | None = None,
                 ready=None, lineage=None):
        self.spark, self.settings, self.available_now, self.lent = spark, settings, available_now, lent
        self.starter = starter or Queries(spark, settings)  # starts and stops the queries (queries.py)
        self.lag = lag  # a table's lag: (records left, offsets applied), None while unknown (watchers.py)
        # cut(settings, sources, stop): the sources' consistent cuts advanced until `stop` is set
        # (report/cut.py: keep_advancing, given by `cdc run`), once if it is set already
        self.cut = cut
        self.clock = clock
        self.registrations = {t.name: t for t in tables}
        self.state = s.Supervision(set(self.registrations),
                                   shared.groups(tables) if settings.spark.shared_query else {},
                                   settings.spark.retry_for_s, continuous=not available_now)
        self.stopping = False  # a stop signal came (run_until_stopped): no new starts
        self.queries: dict = {}  # a running query's name -> its StreamingQuery
        self.batches: dict[str, shared.SharedBatch] = {}  # a running shared query's foreachBatch function
        self.done: dict = {}  # shared queries at Kafka's end (name -> query), their tables still applying
        self.catchups = {t.name: CatchUp(t.name, clock) for t in tables}
        self.shown_at = clock()
        self.follow, self.selection = follow, selection
        self.ready = ready or self.targets_ready  # ready(regs): the names of those whose target and topic exist
        self.lineage = lineage  # the run's lineage (register/lineage.RunLineage), told of each table's state
        self.state.fingerprints = {t.name: fingerprint(t) for t in tables}
        self.files: tuple | None = None  # the registration files as last looked at (name, mtime, size)
        self.found: dict[str, TableRegistration] = {}  # the registrations of the selection that load
        self.fingerprints: dict[str, str] = {}  # ... each one's fingerprint
        self.found_invalid: dict[str, str] = {}  # ... and those that do not, with their error
        self.follow_at = clock() + REGISTRATIONS_EVERY_S
        self.unscanned: str | None = None  # what the registrations' look could not do, as last said

    @property
    def failed(self) -> dict[str, CdcError]:
        """The tables given up, with their errors."""
        return self.state.failed

    @property
    def tables(self) -> dict[str, TableRegistration]:
        return {name: reg for name, reg in self.registrations.items() if name in self.state.tables}

    def watched(self) -> list[TableRegistration]:
        """The registrations of the tables the job runs now (not lent to a command, still
        registered), for the lag watcher's thread: copies, each made at once under the GIL."""
        regs, tables, away = dict(self.registrations), set(self.state.tables), set(self.state.away)
        return [regs[t] for t in sorted(tables - away) if t in regs]

    def running(self) -> list[str]:
        """The tables whose queries run."""
        return sorted(t for name in self.queries for t in self.state.tables_of(name))

    def applied(self, table: str) -> dict[int, int] | None:
        """The offsets a table of a running shared query has applied (None: not in one)."""
        for name, tables in list(self.state.groups.items()):
            if table in tables and name in self.batches:
                return self.batches[name].applied(table)
        return None

    def request_stop(self) -> None:
        """The stop signal's handler (jobs/shutdown.py): a flag the main loop reads; nothing
        that takes a lock the interrupted main thread might hold."""
        self.stopping = True

    # the loop

    def tell(self, *events) -> None:
        """Hand `events` to the state and perform the actions that follow each."""
        for event in events:
            self.perform_all(self.state.handle(event, self.clock()))

    def perform_all(self, actions: list) -> None:
        """Perform `actions` in order; what an action brings about (a query started, a table
        that failed) is told at once, and the actions that follow it come before the rest.
        Tables' own queries next to each other start side by side: a start waits on I/O."""
        pending = deque(actions)
        while pending:
            starts = []
            while pending and isinstance(pending[0], s.StartOwn):
                starts.append(pending.popleft().name)
            if len(starts) > 1:
                with ThreadPoolExecutor(START_THREADS, thread_name_prefix="cdc-start") as pool:
                    outcomes = list(pool.map(self.start_own, starts))
            else:
                outcomes = [self.start_own(starts[0])] if starts else [self.perform(pending.popleft())]
            followed = [a for events in outcomes for e in events for a in self.state.handle(e, self.clock())]
            pending.extendleft(reversed(followed))

    def perform(self, action) -> list:
        """Do `action`; return the events it brought about."""
        if isinstance(action, s.StartShared):
            return self.start_shared(action.name)
        if isinstance(action, s.StopQuery):
            return self.stop_query(action.name)
        if isinstance(action, s.Join):
            return self.join(action.query, action.table)
        if isinstance(action, s.LookRejoin):
            return self.look_rejoin(action.table)
        if isinstance(action, s.DropOwnCheckpoint):
            shutil.rmtree(self.settings.path(self.settings.spark.checkpoint_dir) / action.table, ignore_errors=True)
        elif isinstance(action, s.Lend):
            self.lent.lend(action.table)
        elif isinstance(action, s.Adopt):
            return self.adopt(action.table)
        elif isinstance(action, s.Forget):
            if self.lent is not None:
                self.lent.lend(action.table)
            if self.lineage is not None:
                self.lineage.removed(action.table)
        elif isinstance(action, s.CaughtUp):
            self.lag(self.settings, self.registrations[action.table], done=self.applied(action.table))
            jobstate.record(self.settings.state_dir, action.table, jobstate.CAUGHT_UP)
            log("caught up", table=action.table, event="caught-up", stream=sys.stdout)
        elif isinstance(action, s.Record):
            jobstate.record(self.settings.state_dir, action.table, action.state, action.error,
                            query=action.query, remedy=action.remedy)
            if self.lineage is not None:  # a FAIL when a table is given up, a new START when it runs again
                self.lineage.record(action.table, action.state, action.error, self.registrations.get(action.table))
        elif isinstance(action, s.Log):
            log(action.message, table=action.table, event=action.event, level=action.level, **dict(action.fields))
        else:
            raise TypeError(f"not an action: {action!r}")
        return []

    def diagnosed(self, name: str, exc: BaseException) -> CdcError:
        """The failure of query `name` (or of a table of a shared query) as a CdcError."""
        metrics.FAILURES.labels(name).inc()
        error = diagnose(self.settings, self.registrations.get(name), name, exc)
        error.table = error.table or name
        return error

    def start_all(self) -> None:
        """The shared queries, then every other table's query, START_THREADS starting at once;
        a table that fails to start is retried or given up and the others go on."""
        self.perform_all(self.state.start_all())

    def start_own(self, name: str) -> list:
        """Table `name`'s own query; on any thread (perform_all)."""
        if self.stopping:
            return []
        try:
            self.queries[name] = self.starter.start_table(self.registrations[name], self.available_now,
                                                          len(self.state.tables))
        except Exception as e:  # noqa: BLE001 - py4j: the catalog or Kafka failing under Spark
            return [s.StartFailed(name, self.diagnosed(name, e))]
        return [s.Started(name)]

    def start_shared(self, name: str) -> list:
        """Shared query `name` over those of its tables whose targets open, from their
        committed offsets; the others are `refused` (each goes on in a query of its own)."""
        def opened(table: str):
            try:
                return table, self.starter.open_member(self.registrations[table])
            except Exception as e:  # noqa: BLE001 - the table's own query tells what it is
                return table, e

        try:
            with ThreadPoolExecutor(START_THREADS, thread_name_prefix="cdc-start") as pool:
                found = dict(pool.map(opened, self.state.groups[name]))
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
                    if self.state.home.get(t) == name and t not in members]
            query, batch = self.starter.start_shared(name, members, checkpoint, self.available_now,
                                                     len(self.state.tables), away=tuple(away))
        except Exception as e:  # noqa: BLE001 - py4j: the catalog or Kafka failing under Spark
            return [s.StartFailed(name, self.diagnosed(name, e))]
        self.queries[name], self.batches[name] = query, batch
        return [s.Started(name, {t: self.diagnosed(t, e) for t, e in refused.items()})]

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
            if (old.name.startswith(same) if tables is None else tables & self.registrations.keys()):
                shutil.rmtree(old, ignore_errors=True)

    def stop_query(self, name: str) -> list:
        """Query `name` stopped between batches; a shared query's checkpoint goes (the next
        one starts from its tables' committed offsets), and the tables that failed in it are told."""
        query, batch = self.queries.pop(name, None), self.batches.pop(name, None)
        if query is not None:
            self.starter.stop(name, query)  # a shared query's tables being applied finish first
        return self.retired(name, batch)

    def retired(self, name: str, batch: shared.SharedBatch | None) -> list:
        """What ended shared query `name` leaves: its checkpoint removed, its failed tables told."""
        if batch is None:
            return []
        batch.close()
        failed = batch.take_failed()
        shutil.rmtree(batch.checkpoint, ignore_errors=True)
        return [s.MembersFailed(name, {t: self.diagnosed(t, e) for t, e in failed.items()})] if failed else []

    def join(self, name: str, table: str) -> list:
        """`table` applied by running shared query `name` from its committed offsets."""
        batch = self.batches[name]
        try:
            reg, session, target = self.starter.open_member(self.registrations[table])
            applier = self.starter.applier(session, reg, target, batch.checkpoint)
        except Exception as e:  # noqa: BLE001 - the table's own query tells what it is
            return [s.JoinFailed(table, self.diagnosed(table, e))]
        batch.join(table, applier, session, target.committed)
        return [s.Joined(table)]

    def look_rejoin(self, table: str) -> list:
        """Whether a table away from its shared query is ready to join it again: its own query
        has run a batch and is at most one shared batch behind Kafka's end."""
        query = self.queries.get(table)
        if query is None or not query.isActive or query.lastProgress is None:
            return []
        reg, batch = self.registrations[table], self.batches.get(self.state.home[table])
        if batch is not None and (topic_for(reg.source.name, reg) not in batch.subscribed
                                  or (lag := self.lag(self.settings, reg)) is None or lag[0] > batch.cap):
            return []
        return [s.RejoinReady(table)]

    def look(self) -> None:
        """One look at the queries, the clock and the command's requests. Each look at a query
        is a call into the driver's JVM, so a second's wait for any query to end comes first:
        the queries are looked at only once one has ended, and a running query's progress only
        while it is retrying (a hundred quiet tables would otherwise cost a share of a core)."""
        if self.stopping:
            self.tell(s.StopAsked())
        try:
            ended = bool(self.spark.streams.awaitAnyTermination(LOOK_EVERY_S))  # seconds
        except Exception:  # noqa: BLE001 - a query failed: handled below
            ended = True
        if ended:  # before the look: a query ending after it is seen at the next look
            self.spark.streams.resetTerminated()
        for name, query in list(self.queries.items()):
            if self.queries.get(name) is not query or (not ended and name not in self.state.failing_since):
                continue
            if not query.isActive:
                self.tell(*self.ended(name, query))
            elif name in self.state.failing_since and _input_rows(query.lastProgress) > 0:
                self.tell(s.Progressed(name))
        for name, batch in list(self.batches.items()):
            if self.batches.get(name) is batch and (failed := batch.take_failed()):
                self.tell(s.MembersFailed(name, {t: self.diagnosed(t, e) for t, e in failed.items()}))
        for name, query in list(self.done.items()):
            if self.batches[name].drained(0):
                self.finished(name, query)
        self.tell(s.Tick(self.clock()))
        if self.lent is not None:
            self.hand_over()
            self.take_back()
        if self.follow and not self.stopping and self.clock() >= self.follow_at:
            self.follow_at = self.clock() + REGISTRATIONS_EVERY_S
            self.look_at_registrations()

    def ended(self, name: str, query) -> list:
        """What query `name` having ended tells: that it failed, or (a job that stops at Kafka's
        end) that it is done; a shared query is done once its tables applied what it planned
        (`finished`)."""
        del self.queries[name]
        exc = query.exception()
        if exc is None and self.available_now and name in self.batches:
            self.done[name] = query
            return []
        self.starter.stop(name, query)
        if exc is None and self.available_now:
            return [s.Ended(name, None)]
        error = self.diagnosed(name, exc if exc is not None else ApplyError(f"table {name}: query stopped"))
        failed = self.retired(name, self.batches.pop(name, None))
        return [s.Ended(name, error, failed[0].failed if failed else {})]

    def finished(self, name: str, query) -> None:
        """Shared query `name` done, its tables having applied all it planned: caught up (their
        offsets read while its batch is there), then its checkpoint removed."""
        del self.done[name]
        failed = {t: self.diagnosed(t, e) for t, e in self.batches[name].take_failed().items()}
        self.tell(s.Ended(name, None, failed))
        self.starter.stop(name, query)
        self.retired(name, self.batches.pop(name))

    def progress(self) -> None:
        """Every PROGRESS_EVERY_S of a job catching up, a progress line of the tables of one
        query: the records left in Kafka, the rate and the time left."""
        if self.clock() - self.shown_at < PROGRESS_EVERY_S:
            return
        self.shown_at = self.clock()
        for name in sorted(self.queries)[:1]:
            for table in self.state.tables_of(name):
                lag = self.lag(self.settings, self.registrations[table], done=self.applied(table))
                if lag is not None:
                    self.catchups[table].line(*lag)

    def hand_over(self) -> None:
        """Each table a command asked for (jobstate.handover_requests), lent until it is done."""
        for table, pid in jobstate.handover_requests(self.settings.state_dir).items():
            self.tell(s.HandoverAsked(table, pid))

    def take_back(self) -> None:
        """The tables lent to a command that is done (its request withdrawn, or it died):
        locked again, with their registrations read again."""
        if not self.state.away:
            return
        asked = jobstate.handover_requests(self.settings.state_dir)
        for table, pid in sorted(self.state.away.items()):
            if asked.get(table) == pid:
                continue
            try:
                self.lent.take(table)
            except Busy:
                continue  # the command is letting it go, or another one took it
            invalid: list = []
            try:
                found = load_tables(self.settings, table, invalid=invalid)
            except ConfigError:  # no registration of that name is left (`cdc tables remove`)
                found = []
            if found:
                self.registrations[table] = found[0]
            self.tell(s.Returned(table, bool(found), invalid[0].error if invalid else None,
                                 fingerprint(found[0]) if found else None))

    # following the registrations

    def look_at_registrations(self) -> None:
        """The registrations of the job's selection, read again when a file came, went or
        changed, told to the state with those not run yet whose target and topic exist. A
        directory that cannot be read is said once and looked at again; a file that does not
        load is its table's problem (supervision.registration_changes leaves it be)."""
        directory = self.settings.path(self.settings.tables_dir)
        try:
            files = registration_files(directory)
            if files != self.files:
                invalid: list = []
                loaded = load_tables(self.settings, invalid=invalid)
                self.found = {r.name: r for r in loaded if jobstate.follows(r.name, self.selection)}
                self.fingerprints = {name: fingerprint(r) for name, r in self.found.items()}
                self.found_invalid = {b.name: str(b.error) for b in invalid if jobstate.follows(b.name, self.selection)}
        except Exception as e:  # noqa: BLE001 - the job goes on with the tables it runs
            self.say_once(f"the registrations under {directory} could not be read: {e}; the job goes on with the "
                          f"tables it runs")
            return
        new = [reg for name, reg in self.found.items() if name not in self.state.tables]
        if files == self.files and not new:
            return
        try:
            ready = frozenset(self.ready(new)) if new else frozenset()
        except Exception as e:  # noqa: BLE001 - Kafka or the catalog not answering: asked at the next look
            self.say_once(f"whether {', '.join(sorted(r.name for r in new))} are registered could not be told: {e}; "
                          f"asked again at the next look")
            ready = frozenset()
        else:
            self.unscanned = None
        self.files = files
        self.tell(s.Registrations(dict(self.fingerprints), ready, self.found_invalid))

    def say_once(self, message: str) -> None:
        """A warning about the registrations' look, unless it is the one said last."""
        if message != self.unscanned:
            log(message, event="registrations-unread", level="warning")
        self.unscanned = message

    def targets_ready(self, regs: list[TableRegistration]) -> list[str]:
        """Those of `regs` whose topic and target exist (`cdc register` has made them). Kafka
        is asked briefly: while it does not answer, the loop goes on and asks at its next look."""
        topics = existing_topics(kafka_access(self.settings), timeout_s=REGISTRATIONS_EVERY_S)
        ready = []
        for reg in regs:
            if topic_for(reg.source.name, reg) not in topics:
                continue
            try:
                load_target(self.spark, self.settings, reg)
            except Exception:  # noqa: BLE001 - not there yet (ApplyError), or the catalog not answering
                continue
            ready.append(reg.name)
        return ready

    def adopt(self, table: str) -> list:
        """Table `table` taken: its lock, and its registration as last found."""
        try:
            if self.lent is not None:
                self.lent.take(table)
        except Busy as e:
            return [s.AdoptRefused(table, e)]
        self.registrations[table] = self.found[table]
        self.catchups.setdefault(table, CatchUp(table, self.clock))
        return [s.Adopted(table)]

    def outcome(self) -> None:
        """Raise for the failed tables: a lone failed table's own error, else one naming each."""
        failed = self.failed
        if len(failed) == 1:
            raise next(iter(failed.values()))
        if failed:
            names = sorted(failed)
            raise ApplyError(f"{len(names)} of {len(self.state.tables)} tables failed ({', '.join(names)}): "
                             + "; ".join(failed[n].message for n in names),
                             hint="each table's error is above and in `cdc status`; the other tables were applied")

    def run_available_now(self) -> None:
        """Each table up to what Kafka holds now; a table that fails does not stop the others."""
        self.start_all()
        while self.state.busy():
            self.look()
            self.progress()
        if self.cut is not None:  # one advance of the cut, at what the run applied
            once = threading.Event()
            once.set()
            self.cut(self.settings, self.cut_sources(), once)
        self.outcome()

    def cut_sources(self) -> list[str]:
        """The sources of the job's tables whose cut the job advances (`cut_every_s`)."""
        return sorted(s for s in {t.source.name for t in self.tables.values()} if self.settings.sources[s].cut_every_s)

    def run_until_stopped(self) -> None:
        """Until SIGTERM/SIGINT, or until every table has failed. A failing table is retried
        with backoff, then given up and tried again every FAILED_RETRY_S while the others go
        on; failed tables make the job exit non-zero when it stops. The first signal stops
        the queries between batches: the batch under way commits, none starts after it."""
        lag_stop = threading.Event()
        with shutdown.graceful(self.request_stop):
            try:
                self.start_all()  # a stop signal ends the starts not yet made (`start_own`)
                threading.Thread(target=watch_lag, daemon=True, name="cdc-lag",
                                 args=(self.settings, self.watched, lag_stop, self.applied)).start()
                if self.cut is not None:
                    threading.Thread(target=self.cut, daemon=True, name="cdc-cut",
                                     args=(self.settings, self.cut_sources(), lag_stop)).start()
                while not self.stopping and (len(self.failed) < len(self.state.tables) or self.state.away):
                    self.look()
                if self.stopping:
                    log("stop requested: stopping the queries", event="stopping", stream=sys.stdout)
                elif not self.state.tables:
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

    def stop(self) -> None:
        """Every query stopped between batches; the shared queries' checkpoints removed."""
        for name, query in [*self.queries.items(), *self.done.items()]:
            self.starter.stop(name, query)
        for batch in self.batches.values():
            shutil.rmtree(batch.checkpoint, ignore_errors=True)


def registration_files(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """The registration files of a tables directory, each as (name, modification time, size):
    what changes when one comes, goes or is written. A directory that is not there raises
    (taken for one that cannot be read, not for one whose tables all went)."""
    if not directory.is_dir():
        raise ConfigError(f"{directory} is not a directory")
    files = []
    for f in directory.glob("*.yaml"):
        try:
            st = f.stat()
        except FileNotFoundError:  # gone since the listing
            continue
        files.append((f.name, st.st_mtime_ns, st.st_size))
    return tuple(sorted(files))


def fingerprint(reg: TableRegistration) -> str:
    """What a registration says, in a few characters: it changes when the file's meaning does."""
    return hashlib.sha256(reg.model_dump_json().encode()).hexdigest()[:16]


def _input_rows(progress) -> int:
    """Rows of a query's last progress report (a dict or a progress object, by version)."""
    if progress is None:
        return 0
    return int(progress.get("numInputRows", 0) if isinstance(progress, dict) else getattr(progress, "numInputRows", 0))


def run(settings: Settings, tables: list[TableRegistration], available_now: bool, cut=None,
        selection: list[str] | None = None) -> None:
    """The job of `tables` (`cut`: Supervisor's); a continuous one follows the registrations
    `selection` names (`cdc run --table`; None: every table), and says so in the state
    directory (jobstate.following) for `cdc status`."""
    if not tables:
        raise ApplyError("no tables are registered", hint=f"add registrations under {settings.tables_dir}/")
    names = [t.name for t in tables]
    with jobstate.exclusive(settings.state_dir, names) if available_now else \
            jobstate.lending(settings.state_dir, names) as lent, \
            nullcontext() if available_now else jobstate.following(settings.state_dir, selection):
        lineage = RunLineage(settings, tables)  # OpenLineage events, when cdc.yaml's `lineage` is on
        supervisor = Supervisor(get_session(settings), settings, tables, available_now, lent=lent, cut=cut,
                                follow=not available_now, selection=selection, lineage=lineage)
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
