"""What `cdc run`'s supervisor decides, apart from what it does: the job's tables and queries
as one value (`Supervision`), events in (a query started, ended or failed, a table failed in
a shared query, a clock tick, a table asked for or given back, the registrations as the
tables directory holds them now), actions out (start, stop, join, lend, adopt, forget, record,
log). It does no I/O and never waits: a backoff is a time at which a
tick starts the query again, so one table's backoff never holds the others back. The loop
that observes Spark, Kafka and the state directory and performs the actions is
jobs/supervisor.py."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cdc.control import jobstate
from cdc.errors import ApplyError, CdcError

FAILED_RETRY_S = 60.0  # how long a continuous job waits before it tries a failed table again
REJOIN_EVERY_S = 10.0  # how often a table away from its shared query is looked at (rejoin)
FIRST_DELAY_S, MAX_DELAY_S = 1.0, 30.0  # a failing query's backoff, doubling between them


# Events: what the loop saw.

@dataclass(frozen=True)
class Started:
    """Query `name` runs; of a shared query, its tables whose targets did not open (`refused`)."""
    name: str
    refused: Mapping[str, CdcError] = field(default_factory=dict)


@dataclass(frozen=True)
class StartFailed:
    name: str
    error: CdcError


@dataclass(frozen=True)
class Ended:
    """Query `name` ended: with `error`, or done (None: all Kafka held, in a job that stops
    there); of a shared query, its tables that failed in it (`failed`)."""
    name: str
    error: CdcError | None
    failed: Mapping[str, CdcError] = field(default_factory=dict)


@dataclass(frozen=True)
class MembersFailed:
    """Tables that failed in running shared query `query`; it goes on without them."""
    query: str
    failed: Mapping[str, CdcError]


@dataclass(frozen=True)
class Progressed:
    """Retrying query `name` read records again: it has recovered."""
    name: str


@dataclass(frozen=True)
class Tick:
    now: float


@dataclass(frozen=True)
class RejoinReady:
    """A table away from its shared query runs well in its own, close to Kafka's end."""
    table: str


@dataclass(frozen=True)
class Joined:
    table: str


@dataclass(frozen=True)
class JoinFailed:
    table: str
    error: CdcError


@dataclass(frozen=True)
class HandoverAsked:
    table: str
    pid: int


@dataclass(frozen=True)
class Returned:
    """A lent table is locked again: its registration found again (with its `fingerprint`),
    gone (`registered` False), or found invalid (`invalid`)."""
    table: str
    registered: bool
    invalid: CdcError | None = None
    fingerprint: str | None = None


@dataclass(frozen=True)
class Registrations:
    """The registrations of the job's selection as the tables directory holds them now:
    those that load, each with its `fingerprint` (it changes with what the file says); of
    those the job does not run, the ones `ready` to start (their target and topic exist:
    `cdc register` is done); and those that do not load, with their error (`invalid`)."""
    found: Mapping[str, str]
    ready: frozenset[str] = frozenset()
    invalid: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Adopted:
    """The job holds table `table`'s lock and its registration as last found."""
    table: str


@dataclass(frozen=True)
class AdoptRefused:
    """Table `table`'s lock is held by another process (a bootstrap, another job)."""
    table: str
    error: CdcError


@dataclass(frozen=True)
class StopAsked:
    pass


# Actions: what the loop does.

@dataclass(frozen=True)
class StartOwn:
    """Start table `name`'s own query, from its checkpoint or its committed offsets."""
    name: str


@dataclass(frozen=True)
class StartShared:
    """Start shared query `name` over its tables now (`Supervision.groups`), in a new checkpoint."""
    name: str


@dataclass(frozen=True)
class StopQuery:
    """Stop query `name` between batches; a shared query's checkpoint goes with it and the
    tables that failed in it are told (MembersFailed)."""
    name: str


@dataclass(frozen=True)
class DropOwnCheckpoint:
    table: str


@dataclass(frozen=True)
class Join:
    """Table `table` applied by running shared query `query` from its committed offsets."""
    query: str
    table: str


@dataclass(frozen=True)
class LookRejoin:
    """See whether a table away from its shared query is ready to join it (RejoinReady)."""
    table: str


@dataclass(frozen=True)
class Lend:
    table: str


@dataclass(frozen=True)
class Adopt:
    """Take table `table`'s lock and its registration as last found (a table newly
    registered, or registered anew); Adopted, or AdoptRefused while another process holds it."""
    table: str


@dataclass(frozen=True)
class Forget:
    """Table `table` is no longer registered: its lock let go, its lineage run ended."""
    table: str


@dataclass(frozen=True)
class CaughtUp:
    """A table applied up to what Kafka held when the job started."""
    table: str


@dataclass(frozen=True)
class Record:
    """The table's state in the state directory (jobstate.record)."""
    table: str
    state: str
    error: str | None = None
    remedy: str | None = None
    query: str | None = None


@dataclass(frozen=True)
class Log:
    message: str
    table: str | None
    event: str
    level: str = "info"
    fields: tuple[tuple[str, object], ...] = ()


# The registrations' changes: which tables a job that follows them starts, stops or starts again.

@dataclass(frozen=True)
class Changes:
    """What changed in the registrations of a running job's tables."""
    added: tuple[str, ...] = ()  # registered and ready, not run by the job: started
    removed: tuple[str, ...] = ()  # run by the job, their registration gone: stopped
    changed: tuple[str, ...] = ()  # run by the job, their registration changed: started again with it


def registration_changes(runs: Mapping[str, str | None], found: Mapping[str, str], ready: Iterable[str] = (),
                         invalid: Iterable[str] = ()) -> Changes:
    """The tables to start, stop and start again, from the job's tables (`runs`: each with
    the fingerprint of the registration it runs; None: unknown, never taken for a change) and
    the registrations found now (`found`: name -> fingerprint, of those that load; `ready`:
    of them, those whose target and topic exist; `invalid`: those whose file does not load).
    A table whose file does not load is left as it is, run or not: one bad file is that
    table's problem, and a half-written one is read again at the next look."""
    ready, invalid = set(ready), set(invalid)
    added = sorted(t for t in found if t not in runs and t in ready)
    removed = sorted(t for t in runs if t not in found and t not in invalid)
    changed = sorted(t for t, fingerprint in runs.items()
                     if t in found and fingerprint is not None and found[t] != fingerprint)
    return Changes(tuple(added), tuple(removed), tuple(changed))



@dataclass
class Supervision:
    """The state of a job's tables: their shared queries (`groups`, and each table's `home`),
    the queries running, the failing ones' backoff, the tables given up, those away from their
    shared query and those lent to a command. `handle` takes an event and returns the actions."""

    tables: set[str]
    groups: dict[str, list[str]]  # a shared query -> its tables now
    retry_for_s: float
    continuous: bool
    home: dict[str, str] = field(default_factory=dict)  # a table -> its shared query
    running: set[str] = field(default_factory=set)  # the queries started and not ended
    failing_since: dict[str, float] = field(default_factory=dict)
    delay: dict[str, float] = field(default_factory=dict)  # a failing query's next backoff
    retry_at: dict[str, float] = field(default_factory=dict)  # when a failing query starts again
    failed: dict[str, CdcError] = field(default_factory=dict)  # tables given up, with their error
    failed_retry_at: dict[str, float] = field(default_factory=dict)  # when a given-up table is tried again
    rejoin_at: dict[str, float] = field(default_factory=dict)  # when a table away is looked at next
    away: dict[str, int] = field(default_factory=dict)  # tables lent to a command, with its pid
    fingerprints: dict[str, str] = field(default_factory=dict)  # a table -> its registration's, as run
    adopting: set[str] = field(default_factory=set)  # tables taken since the registrations' last look
    held_elsewhere: set[str] = field(default_factory=set)  # new tables whose lock another process holds
    invalid: dict[str, str] = field(default_factory=dict)  # registrations that do not load, with their error
    stopping: bool = False
    now: float = 0.0  # the time of the last event

    def __post_init__(self):
        self.groups = {name: sorted(members) for name, members in self.groups.items()}
        self.home = self.home or {t: name for name, members in self.groups.items() for t in members}

    def tables_of(self, name: str) -> list[str]:
        """The tables of query `name`: a shared query's, or the table's own."""
        return list(self.groups.get(name, [name]))

    def busy(self) -> bool:
        """Whether a query runs or is to start again (a job that stops at Kafka's end waits)."""
        return bool(self.running or self.retry_at)

    def start_all(self) -> list:
        """The shared queries, then every other table's query."""
        grouped = {t for members in self.groups.values() for t in members}
        out = [a for name in list(self.groups) for a in self._start(name)]
        return out + [StartOwn(t) for t in sorted(self.tables - grouped)]

    def handle(self, event, now: float) -> list:
        """The actions that follow `event`, seen at `now`."""
        self.now = now
        return getattr(self, f"_on_{type(event).__name__}")(event)

    # events

    def _on_Started(self, e: Started) -> list:
        self.running.add(e.name)
        out = []
        for table in sorted(e.refused):
            out += self._leave(e.name, table)
        query = e.name if e.name in self.groups else None
        out += [Record(t, jobstate.RUNNING, query=query) for t in self.tables_of(e.name)]
        for table, error in sorted(e.refused.items()):  # after the backoff its error calls for
            out += self._failure(table, error)
        return out

    def _on_StartFailed(self, e: StartFailed) -> list:
        return self._failure(e.name, e.error)

    def _on_Ended(self, e: Ended) -> list:
        self.running.discard(e.name)
        out = []
        for table in sorted(e.failed):
            out += self._leave(e.name, table)
        if e.error is None:  # done: its tables are caught up
            self._recovered(e.name)
            out += [CaughtUp(t) for t in self.tables_of(e.name)]
        elif e.failed:  # the others start again at once, without the tables that failed
            out += self._start(e.name)
        else:
            out += self._failure(e.name, e.error)
        for table, error in sorted(e.failed.items()):
            out += self._failure(table, error)
        return out

    def _on_MembersFailed(self, e: MembersFailed) -> list:
        out = []
        for table, error in sorted(e.failed.items()):
            if table in self.groups.get(e.query, ()):
                out += self._leave(e.query, table) + self._failure(table, error)
        return out

    def _on_Progressed(self, e: Progressed) -> list:
        self._recovered(e.name)
        return []

    def _on_Tick(self, e: Tick) -> list:
        if self.stopping:
            return []
        out = []
        for name in sorted(n for n, at in self.retry_at.items() if at <= self.now):
            out += self._start(name)
        if not self.continuous:
            return out
        for name in sorted(n for n, at in self.failed_retry_at.items() if at <= self.now):
            del self.failed[name], self.failed_retry_at[name]
            self._recovered(name)
            out += [Log("trying the failed table again", name, "table-retried"), *self._start(name)]
        for table, name in sorted(self.home.items()):
            if (table not in self.running or table in self.failing_since
                    or self.rejoin_at.get(table, 0.0) > self.now):
                continue
            self.rejoin_at[table] = self.now + REJOIN_EVERY_S
            out.append(LookRejoin(table))
        return out

    def _on_RejoinReady(self, e: RejoinReady) -> list:
        table, name = e.table, self.home[e.table]
        if table not in self.running:
            return []
        self.running.discard(table)
        self.groups[name] = sorted({*self.groups.get(name, ()), table})
        out = [StopQuery(table), DropOwnCheckpoint(table)]
        if name in self.running:
            return out + [Join(name, table)]
        return out + self._start(name) + [self._joined(name, table)]  # all its tables had left it

    def _on_Joined(self, e: Joined) -> list:
        name = self.home[e.table]
        return [Record(e.table, jobstate.RUNNING, query=name), self._joined(name, e.table)]

    def _on_JoinFailed(self, e: JoinFailed) -> list:
        return self._leave(self.home[e.table], e.table) + self._failure(e.table, e.error)

    def _on_HandoverAsked(self, e: HandoverAsked) -> list:
        if e.table not in self.tables or e.table in self.away:
            return []
        self.away[e.table] = e.pid
        return self._set_aside(e.table) + [
            Lend(e.table), Record(e.table, jobstate.HANDED_OVER),
            Log(f"handed over to process {e.pid} until it is done; the other tables go on", e.table,
                "handed-over", fields=(("pid", e.pid),))]

    def _on_Returned(self, e: Returned) -> list:
        self.away.pop(e.table, None)
        if e.invalid is not None:
            return self._fail(e.table, e.invalid)
        if not e.registered:  # no registration of that name is left (`cdc tables remove`)
            return self._remove(e.table)
        if e.fingerprint is not None:
            self.fingerprints[e.table] = e.fingerprint
        return [Log("taken back: its query starts again from what its target holds", e.table, "taken-back"),
                *self._start(e.table)]

    def _on_Registrations(self, e: Registrations) -> list:
        """New tables adopted and started, removed ones stopped, changed ones started again
        with their new registration (a failed one at once); a table lent to a command is left
        to `Returned`, which reads its registration again."""
        if self.stopping:
            return []
        out = self._invalid(e.invalid)
        changes = registration_changes({t: self.fingerprints.get(t) for t in self.tables}, e.found, e.ready,
                                       e.invalid)
        for table in changes.removed:
            if table not in self.away:
                out += self._set_aside(table) + self._remove(table)
        for table in changes.changed:
            if table not in self.away:
                self.fingerprints[table] = e.found[table]
                out += self._set_aside(table) + [Adopt(table)]
        for table in changes.added:
            if table not in self.adopting and table not in self.away:
                self.adopting.add(table)
                self.fingerprints[table] = e.found[table]
                out.append(Adopt(table))
        self.held_elsewhere &= set(e.found)
        return out

    def _on_Adopted(self, e: Adopted) -> list:
        self.adopting.discard(e.table)
        self.held_elsewhere.discard(e.table)
        if e.table in self.tables:
            log = Log("its registration changed: its query starts again with it", e.table, "registration-changed")
        else:
            self.tables.add(e.table)
            log = Log("registered: the job starts it", e.table, "table-added")
        return [log, *self._start(e.table)]

    def _on_AdoptRefused(self, e: AdoptRefused) -> list:
        """Asked again at the next look; said once."""
        self.adopting.discard(e.table)
        self.fingerprints.pop(e.table, None)
        if e.table in self.held_elsewhere:
            return []
        self.held_elsewhere.add(e.table)
        return [Log(f"registered, but {e.error.message}: the job starts it once that process lets it go",
                    e.table, "table-held-elsewhere", "warning")]

    def _on_StopAsked(self, e: StopAsked) -> list:
        self.stopping = True
        return []

    # decisions

    def _start(self, name: str) -> list:
        """Start query `name` now (a pending retry of it is done by this start)."""
        self.retry_at.pop(name, None)
        if name in self.running or self.stopping:
            return []
        if name not in self.groups:
            return [StartOwn(name)]
        if not self.groups[name]:  # every table of it has left
            del self.groups[name]
            return []
        return [StartShared(name)]

    def _recovered(self, name: str) -> None:
        self.failing_since.pop(name, None)
        self.delay.pop(name, None)

    def _failure(self, name: str, error: CdcError) -> list:
        """After a failure of query `name`: started again after its backoff, or given up
        once retrying cannot mend it (a verdict about the data, or `retry_for_s` spent)."""
        if not error.retriable:
            return self._give_up(name, error)
        first = self.failing_since.setdefault(name, self.now)
        if self.now - first >= self.retry_for_s:
            gave_up = ApplyError(f"table {name}: gave up after {self.retry_for_s}s of retries; last error: "
                                 f"{error.message}",
                                 hint=(error.hint or "bring it back") + "; then run the job again "
                                      "(raise spark.retry_for_s in cdc.yaml to wait longer)", table=name)
            gave_up.detail = error.detail
            return self._give_up(name, gave_up)
        delay = self.delay.get(name, FIRST_DELAY_S)
        self.delay[name] = min(delay * 2, MAX_DELAY_S)
        self.retry_at[name] = self.now + delay
        return [Log(f"{error.message.removeprefix(f'table {name}: ')}, retrying in {delay:.0f} s", name,
                    "retrying", "warning", (("delay_s", delay), ("detail", error.detail)))]

    def _give_up(self, name: str, error: CdcError) -> list:
        """A table given up (`_fail`); a shared query's tables each go on in a query of their
        own, to join it again after FAILED_RETRY_S."""
        self.retry_at.pop(name, None)
        if name not in self.groups:
            return self._fail(name, error)
        tables = self.groups.pop(name)
        self._recovered(name)  # started again (rejoin), it has a new retry budget
        for table in tables:
            self.rejoin_at[table] = self.now + FAILED_RETRY_S
        out = [Log(f"the shared query failed: {error.message}; its {len(tables)} tables go on in queries of "
                   f"their own", name, "shared-query-dissolved", "warning", (("error", error.message),))]
        return out + [a for table in tables for a in self._start(table)]

    def _fail(self, name: str, error: CdcError) -> list:
        """A table given up: recorded and reported, and the other tables go on. A continuous
        job tries it again after FAILED_RETRY_S."""
        self.failed[name] = error
        self.failed_retry_at[name] = self.now + FAILED_RETRY_S
        out = [StopQuery(name)] if name in self.running else []
        self.running.discard(name)
        others = len(self.tables) - len(self.failed)
        message = (f"failed: {error.message}" + (f" (the {others} other table(s) go on)" if others else "")
                   + (f"; to do: {error.hint}" if error.hint else ""))
        return out + [Record(name, jobstate.FAILED, error.message, remedy=error.hint),
                      Log(message, name, "table-failed", "error",
                          (("error", error.message), ("hint", error.hint), ("detail", error.detail)))]

    def _leave(self, name: str, table: str) -> list:
        """`table` leaves shared query `name`, for a query of its own."""
        if table not in self.groups.get(name, ()):
            return []
        self.groups[name].remove(table)
        return [Log(f"leaves the shared query {name} for a query of its own", table, "shared-query-left",
                    fields=(("query", name),))]

    def _joined(self, name: str, table: str) -> Log:
        return Log(f"joins the shared query {name} again", table, "shared-query-joined", fields=(("query", name),))

    def _set_aside(self, table: str) -> list:
        """The table no longer run nor retried: its own query stopped, or its shared query
        started again without it."""
        self.failed.pop(table, None)
        self.failed_retry_at.pop(table, None)
        self.retry_at.pop(table, None)
        self._recovered(table)
        if table in self.running:
            self.running.discard(table)
            return [StopQuery(table)]
        name = next((n for n, members in self.groups.items() if table in members), None)
        if name is None:
            return []
        out = self._leave(name, table)
        if name in self.running:
            self.running.discard(name)
            out.append(StopQuery(name))
        return out + self._start(name)

    def _remove(self, table: str) -> list:
        """A table no longer registered: run no more, its lock let go."""
        self.tables.discard(table)
        self.home.pop(table, None)
        self.rejoin_at.pop(table, None)
        self.fingerprints.pop(table, None)
        return [Forget(table), Log("no longer registered: the job runs it no more", table, "table-removed")]

    def _invalid(self, invalid: Mapping[str, str]) -> list:
        """A line for each registration that stopped loading (or whose error changed): a
        table the job runs goes on as it was loaded, another is not started."""
        out = []
        for table, error in sorted(invalid.items()):
            if self.invalid.get(table) == error:
                continue
            doing = ("the job goes on with the registration it loaded" if table in self.tables
                     else "it is not started")
            out.append(Log(f"its registration does not load, {doing}: {error}", table, "registration-invalid",
                           "error", (("error", error),)))
        self.invalid = dict(invalid)
        return out
