"""The supervisor's decisions as events in and actions out (jobs/supervision.py), and the loop
that performs them (jobs/supervisor.py) over queries without Spark."""
import pytest

from cdc.config.models import Settings, SparkSettings
from cdc.control import jobstate
from cdc.errors import ApplyError, ConfigError, DependencyError
from cdc.jobs import supervision as s
from cdc.jobs.failures import diagnose
from cdc.jobs.supervision import FAILED_RETRY_S, REJOIN_EVERY_S, Supervision


class Clock:
    def __init__(self):
        self.now = 0.0


def state(tables, groups=None, bound=300.0, continuous=True) -> Supervision:
    return Supervision(set(tables), dict(groups or {}), bound, continuous)


def of(actions, kind) -> list:
    return [a for a in actions if isinstance(a, kind)]


def test_a_failing_query_starts_again_after_a_doubling_backoff_then_is_given_up_naming_the_cause():
    sup = state(["t.a"], bound=20)
    assert sup.start_all() == [s.StartOwn("t.a")]
    sup.handle(s.Started("t.a"), 0.0)
    down = DependencyError("Kafka at x is unreachable")
    said = sup.handle(s.Ended("t.a", down), 0.0)
    assert [(a.message, a.level) for a in said] == [("Kafka at x is unreachable, retrying in 1 s", "warning")]
    assert sup.handle(s.Tick(0.5), 0.5) == []  # no sleep: the start waits for its time
    delays, now = [], 0.0
    while True:
        (due,) = sup.retry_at.values()
        delays.append(due - now)
        now = due
        assert sup.handle(s.Tick(now), now) == [s.StartOwn("t.a")]
        out = sup.handle(s.StartFailed("t.a", down), now)
        if not sup.retry_at:
            break
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0]
    (record,) = of(out, s.Record)
    assert record.state == jobstate.FAILED and record.error == (
        "table t.a: gave up after 20s of retries; last error: Kafka at x is unreachable")
    assert "raise spark.retry_for_s" in record.remedy and set(sup.failed) == {"t.a"}


def test_a_backoff_caps_at_thirty_seconds_and_recovery_resets_the_budget():
    sup = state(["t.a"], bound=1000)
    now = 0.0
    for _ in range(8):
        sup.handle(s.StartFailed("t.a", DependencyError("down")), now)
        now = sup.retry_at["t.a"]
    assert sup.delay["t.a"] == 30.0
    sup.handle(s.Started("t.a"), now)
    sup.handle(s.Progressed("t.a"), now)  # it read records again
    sup.handle(s.Ended("t.a", DependencyError("down again")), now + 2000)  # a fresh budget: retried
    assert sup.retry_at == {"t.a": now + 2001} and not sup.failed


def test_a_verdict_about_the_data_is_given_up_at_once_and_the_others_go_on():
    sup = state(["t.a", "t.b"])
    for name in ("t.a", "t.b"):
        sup.handle(s.Started(name), 0.0)
    out = sup.handle(s.Ended("t.a", ApplyError("bad record", hint="fix it")), 0.0)
    assert out[:2] == [s.Record("t.a", jobstate.FAILED, "bad record", remedy="fix it"),
                       s.Log("failed: bad record (the 1 other table(s) go on); to do: fix it", "t.a", "table-failed",
                             "error", (("error", "bad record"), ("hint", "fix it"), ("detail", None)))]
    assert not sup.retry_at and sup.running == {"t.b"}
    settings = Settings()
    for text in ("py4j ... cdc.errors.ApplyError: table t: 1 record(s) ...", "[KAFKA_DATA_LOSS] ...",
                 "[CAST_INVALID_INPUT] The value 'x' cannot be cast. SQLSTATE: 22018"):
        assert not diagnose(settings, None, "t.a", RuntimeError(text)).retriable
    assert diagnose(settings, None, "t.a", RuntimeError("org.apache.kafka.common.errors.TimeoutException: x")).retriable


def test_a_table_given_up_is_stopped_and_tried_again_a_minute_later_by_a_continuous_job_only():
    for continuous in (True, False):
        sup = state(["t.a"], continuous=continuous)
        sup.handle(s.Started("t.a"), 0.0)
        sup.handle(s.Progressed("t.a"), 0.0)
        assert sup.handle(s.MembersFailed("nothing", {}), 0.0) == []
        sup.running.add("t.a")
        out = sup.handle(s.StartFailed("t.a", ConfigError("target gone")), 5.0)
        assert out[0] == s.StopQuery("t.a") and "t.a" not in sup.running
        assert sup.handle(s.Tick(5.0 + FAILED_RETRY_S - 1), 5.0 + FAILED_RETRY_S - 1) == []
        again = sup.handle(s.Tick(5.0 + FAILED_RETRY_S), 5.0 + FAILED_RETRY_S)
        if continuous:
            assert again == [s.Log("trying the failed table again", "t.a", "table-retried"), s.StartOwn("t.a")]
            assert not sup.failed
        else:
            assert again == [] and set(sup.failed) == {"t.a"} and not sup.busy()


def test_a_job_that_stops_at_kafka_s_end_is_busy_until_every_query_is_done_or_given_up():
    sup = state(["s.a", "s.b", "s.c"], continuous=False)
    assert sup.start_all() == [s.StartOwn("s.a"), s.StartOwn("s.b"), s.StartOwn("s.c")]
    sup.handle(s.Started("s.a"), 0.0)
    sup.handle(s.StartFailed("s.b", DependencyError("Kafka is down")), 0.0)
    sup.handle(s.Started("s.c"), 0.0)
    assert sup.handle(s.Ended("s.a", None), 1.0) == [s.CaughtUp("s.a")]
    sup.handle(s.Ended("s.c", None), 1.0)
    assert sup.busy()  # s.b starts again at 1.0
    assert sup.handle(s.Tick(1.0), 1.0) == [s.StartOwn("s.b")] and not sup.busy()
    sup.handle(s.Started("s.b"), 1.0)
    assert sup.handle(s.Ended("s.b", None), 2.0) == [s.CaughtUp("s.b")] and not sup.busy()


def test_a_shared_query_s_table_that_does_not_open_leaves_it_for_its_own_query():
    sup = state(["s.a", "s.b", "s.c"], groups={"shared-2s": ["s.a", "s.b", "s.c"]})
    assert sup.start_all() == [s.StartShared("shared-2s")]
    out = sup.handle(s.Started("shared-2s", {"s.b": DependencyError("catalog down")}), 0.0)
    assert out[0].event == "shared-query-left" and out[0].table == "s.b"
    assert of(out, s.Record) == [s.Record("s.a", jobstate.RUNNING, query="shared-2s"),
                                 s.Record("s.c", jobstate.RUNNING, query="shared-2s")]
    assert sup.groups == {"shared-2s": ["s.a", "s.c"]} and sup.retry_at == {"s.b": 1.0}
    assert sup.handle(s.Tick(1.0), 1.0) == [s.StartOwn("s.b")]  # its own query; it joins again later
    out = sup.handle(s.Started("shared-2s", {"s.a": ApplyError("target gone")}), 2.0)
    assert of(out, s.Record)[-1] == s.Record("s.a", jobstate.FAILED, "target gone")  # a verdict: given up at once


def test_a_shared_query_that_failed_for_some_tables_starts_again_at_once_without_them():
    sup = state(["s.a", "s.b", "s.c"], groups={"shared-2s": ["s.a", "s.b", "s.c"]})
    sup.handle(s.Started("shared-2s"), 0.0)
    out = sup.handle(s.Ended("shared-2s", ApplyError("batch 0: 1 table(s) failed (s.b)"),
                             {"s.b": ApplyError("bad record")}), 0.0)
    assert [type(a) for a in out] == [s.Log, s.StartShared, s.Record, s.Log]
    assert sup.groups == {"shared-2s": ["s.a", "s.c"]} and set(sup.failed) == {"s.b"}
    assert "shared-2s" not in sup.failing_since  # not the query's failure: no backoff for it


def test_a_table_failing_while_a_shared_query_runs_leaves_it_and_the_query_goes_on():
    sup = state(["s.a", "s.b"], groups={"shared-2s": ["s.a", "s.b"]}, continuous=False)
    sup.handle(s.Started("shared-2s"), 0.0)
    out = sup.handle(s.MembersFailed("shared-2s", {"s.b": DependencyError("registry down")}), 0.0)
    assert [a.event for a in out] == ["shared-query-left", "retrying"] and sup.running == {"shared-2s"}
    assert sup.handle(s.Tick(1.0), 1.0) == [s.StartOwn("s.b")]
    assert sup.handle(s.Ended("shared-2s", None), 2.0) == [s.CaughtUp("s.a")]


def test_a_shared_query_that_fails_for_none_of_its_tables_past_its_budget_goes_on_as_queries_of_their_own():
    sup = state(["s.a", "s.b"], groups={"shared-2s": ["s.a", "s.b"]}, bound=10)
    sup.handle(s.Started("shared-2s"), 0.0)
    sup.handle(s.Ended("shared-2s", DependencyError("Kafka at x is unreachable")), 0.0)
    assert sup.handle(s.Tick(1.0), 1.0) == [s.StartShared("shared-2s")]
    out = sup.handle(s.StartFailed("shared-2s", DependencyError("Kafka at x is unreachable")), 11.0)
    assert out[0].event == "shared-query-dissolved" and out[1:] == [s.StartOwn("s.a"), s.StartOwn("s.b")]
    assert sup.groups == {} and "shared-2s" not in sup.failing_since  # started again, a new budget
    for name in ("s.a", "s.b"):
        sup.handle(s.Started(name), 11.0)
    assert sup.handle(s.Tick(11.0 + FAILED_RETRY_S - 1), 11.0 + FAILED_RETRY_S - 1) == []
    assert sup.handle(s.Tick(11.0 + FAILED_RETRY_S), 11.0 + FAILED_RETRY_S) == [s.LookRejoin("s.a"),
                                                                                   s.LookRejoin("s.b")]
    out = sup.handle(s.RejoinReady("s.a"), 11.0 + FAILED_RETRY_S)  # all its tables had left it: it starts again
    assert out == [s.StopQuery("s.a"), s.DropOwnCheckpoint("s.a"), s.StartShared("shared-2s"),
                   s.Log("joins the shared query shared-2s again", "s.a", "shared-query-joined",
                         fields=(("query", "shared-2s"),))]
    assert sup.groups == {"shared-2s": ["s.a"]}


def test_a_table_away_from_its_running_shared_query_is_looked_at_every_ten_seconds_and_joins_it():
    sup = state(["s.a", "s.b", "s.c"], groups={"shared-2s": ["s.a", "s.b", "s.c"]})
    sup.handle(s.Started("shared-2s"), 0.0)
    sup.handle(s.MembersFailed("shared-2s", {"s.b": DependencyError("down"), "s.c": DependencyError("down")}), 0.0)
    assert sup.handle(s.Tick(1.0), 1.0) == [s.StartOwn("s.b"), s.StartOwn("s.c")]
    sup.handle(s.Started("s.b"), 1.0)
    sup.handle(s.Started("s.c"), 1.0)
    assert sup.handle(s.Tick(1.0), 1.0) == []  # both still failing: their budgets are not reset yet
    sup.handle(s.Progressed("s.b"), 2.0)
    assert sup.handle(s.Tick(2.0), 2.0) == [s.LookRejoin("s.b")]
    assert sup.handle(s.Tick(2.0 + REJOIN_EVERY_S - 1), 3.0) == []  # looked at again only later
    out = sup.handle(s.RejoinReady("s.b"), 12.0)
    assert out == [s.StopQuery("s.b"), s.DropOwnCheckpoint("s.b"), s.Join("shared-2s", "s.b")]
    assert sup.groups == {"shared-2s": ["s.a", "s.b"]} and sup.running == {"shared-2s", "s.c"}
    assert of(sup.handle(s.Joined("s.b"), 12.0), s.Record) == [s.Record("s.b", jobstate.RUNNING, query="shared-2s")]
    sup.handle(s.RejoinReady("s.c"), 12.0)
    out = sup.handle(s.JoinFailed("s.c", ApplyError("target gone")), 12.0)  # back to a query of its own, given up
    assert out[0].event == "shared-query-left" and set(sup.failed) == {"s.c"} and sup.groups["shared-2s"] == ["s.a", "s.b"]


def test_a_table_asked_for_is_handed_over_from_its_shared_query_and_taken_back_or_forgotten():
    sup = state(["s.a", "s.b", "s.c"], groups={"shared-2s": ["s.a", "s.b", "s.c"]})
    sup.handle(s.Started("shared-2s"), 0.0)
    out = sup.handle(s.HandoverAsked("s.b", 42), 1.0)
    assert [type(a) for a in out] == [s.Log, s.StopQuery, s.StartShared, s.Lend, s.Record, s.Log]
    assert out[4] == s.Record("s.b", jobstate.HANDED_OVER) and sup.away == {"s.b": 42}
    assert sup.handle(s.HandoverAsked("s.b", 42), 1.0) == []  # asked again: it is away already
    sup.handle(s.Started("shared-2s"), 1.0)
    sup.handle(s.HandoverAsked("s.c", 42), 1.0)
    sup.handle(s.Started("shared-2s"), 1.0)
    assert sup.groups == {"shared-2s": ["s.a"]}
    assert sup.handle(s.Returned("s.b", registered=True), 2.0)[1:] == [s.StartOwn("s.b")]
    assert sup.handle(s.Returned("s.c", registered=False), 2.0)[0] == s.Forget("s.c")  # `cdc tables remove`
    assert sup.tables == {"s.a", "s.b"} and "s.c" not in sup.home and not sup.away
    sup.handle(s.Started("s.b"), 2.0)
    out = sup.handle(s.HandoverAsked("s.b", 43), 3.0)  # in a query of its own now
    assert out[0] == s.StopQuery("s.b") and "s.b" not in sup.running
    assert sup.handle(s.Returned("s.b", registered=True, invalid=ConfigError("bad yaml")), 4.0)[0] == \
        s.Record("s.b", jobstate.FAILED, "bad yaml")


def test_after_a_stop_is_asked_for_nothing_starts():
    sup = state(["s.a"])
    sup.handle(s.StartFailed("s.a", DependencyError("down")), 0.0)
    sup.handle(s.StopAsked(), 0.5)
    assert sup.handle(s.Tick(5.0), 5.0) == [] and sup.handle(s.Returned("s.a", True), 5.0)[1:] == []


# The loop, over queries and shared batches without Spark.

class FakeBatch:
    """A shared query's SharedBatch: its tables that failed, already drained."""

    subscribed, cap = frozenset(), 0

    def __init__(self, failed: dict, tmp_path):
        self.failed, self.checkpoint = dict(failed), tmp_path / "shared-checkpoint"

    def drained(self, timeout_s):
        return True

    def take_failed(self):
        failed, self.failed = self.failed, {}
        return failed

    def applied(self, table):
        return {}

    def close(self):
        pass


class FakeQuery:
    """A table's streaming query, done at once: finished, or failed with `error`."""

    def __init__(self, error=None, active=False):
        self.error, self.isActive, self.lastProgress = error, active, None

    def exception(self):
        return self.error

    def stop(self):
        self.isActive = False


class Starter:
    """The supervisor's Queries (jobs/queries.py) without Spark: starting a table's query does
    what `outcomes` says (a query, or an error raised; a list: one at each start), a shared
    query's start returns what `shared` makes of its members, and a target opens as `opens`
    says. It records the tables started and the shared queries' members and checkpoints."""

    def __init__(self, outcomes: dict, tmp_path, shared=None, opens=lambda reg: object()):
        self.outcomes, self.tmp_path, self.opens = outcomes, tmp_path, opens
        self.shared = shared or (lambda members, away: (FakeQuery(), FakeBatch({}, tmp_path)))
        self.started: list[str] = []  # tables whose own query started
        self.members: list[list[str]] = []  # each shared query's tables, as it started
        self.checkpoints: list = []

    def start_table(self, reg, available_now, tables=1):
        self.started.append(reg.name)
        outcome = self.outcomes[reg.name]
        outcome = outcome.pop(0) if isinstance(outcome, list) else outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def open_member(self, reg):
        return reg, f"{reg.name} session", self.opens(reg)

    def start_shared(self, name, members, checkpoint, available_now, tables, away=()):
        self.members.append(sorted(members))
        self.checkpoints.append(checkpoint)
        return self.shared(members, away)

    def applier(self, session, reg, target, checkpoint):
        return f"{reg.name} applier"

    def stop(self, name, query):
        if query.isActive:
            query.stop()


class Streams:
    """The session's query manager: every wait sees a query that ended, unless `quiet`."""

    quiet = False

    def awaitAnyTermination(self, timeout):
        return not self.quiet

    def resetTerminated(self):
        pass


def supervisor(tmp_path, outcomes: dict, groups=None, available_now=True, starter=Starter, lags=None, lent=None,
               **options):
    """A supervisor of the tables in `outcomes` (name -> what starting its query does), each in
    a query of its own unless `groups` shares them; `lags`: each table's lag (records left,
    applied), else unknown; `lent`: a continuous job's locks. Its Starter is `sup.starter`."""
    from types import SimpleNamespace

    from cdc.config.models import StackSettings, TableRegistration
    from cdc.jobs.supervisor import Supervisor

    settings = Settings(stack=StackSettings(state_dir=tmp_path), tables_dir=tmp_path / "tables",
                        sources={"pg": {"kind": "postgresql", "database": "db", "user": "cdc"}},
                        spark=SparkSettings(retry_for_s=0, shared_query=False, checkpoint_dir=tmp_path / "checkpoints"))
    tables = [TableRegistration(name=n, source={"name": "pg", "schema": "s", "table": n.split(".")[1]})
              for n in outcomes]
    clock = Clock()
    sup = Supervisor(SimpleNamespace(streams=Streams()), settings, tables, available_now=available_now,
                     clock=lambda: clock.now, starter=starter(outcomes, tmp_path, **options), lent=lent,
                     lag=lambda settings, reg, **kw: None if lags is None else lags[reg.name])
    if groups:
        sup.state.groups.update(groups)
        sup.state.home.update({t: name for name, members in groups.items() for t in members})
    return sup, clock


def test_a_failing_table_does_not_stop_the_others(tmp_path, capsys):
    poisoned = ConfigError("target lake.s.b of table s.b does not exist")
    sup, _ = supervisor(tmp_path, {"s.a": FakeQuery(), "s.b": poisoned, "s.c": FakeQuery()})
    with pytest.raises(ConfigError) as raised:
        sup.run_available_now()
    assert raised.value is poisoned and raised.value.table == "s.b"  # a lone failed table: its own error
    assert {n: jobstate.read(tmp_path, n)["state"] for n in ("s.a", "s.b", "s.c")} == {
        "s.a": jobstate.CAUGHT_UP, "s.b": jobstate.FAILED, "s.c": jobstate.CAUGHT_UP}
    assert "s.b: failed: target lake.s.b of table s.b does not exist (the 2 other table(s) go on)" in \
        capsys.readouterr().err


def test_several_failed_tables_are_named_in_one_error(tmp_path):
    sup, _ = supervisor(tmp_path, {"s.a": FakeQuery(ApplyError("column x cannot narrow")),
                                   "s.b": ApplyError("topic gone"), "s.c": FakeQuery()})
    with pytest.raises(ApplyError, match=r"2 of 3 tables failed \(s.a, s.b\): column x cannot narrow; topic gone"):
        sup.run_available_now()
    assert jobstate.read(tmp_path, "s.c")["state"] == jobstate.CAUGHT_UP
    assert jobstate.read(tmp_path, "s.a")["error"] == "column x cannot narrow"


def test_one_table_s_backoff_does_not_hold_the_others_back(tmp_path):
    """s.a fails to start and waits 1 s for its next start; s.b's query, meanwhile, is seen
    done and caught up at the next look, and the loop never sleeps."""
    sup, clock = supervisor(tmp_path, {"s.a": [DependencyError("Kafka is down"), FakeQuery()], "s.b": FakeQuery()})
    sup.state.retry_for_s = 60
    sup.start_all()
    assert sup.state.retry_at == {"s.a": 1.0} and set(sup.queries) == {"s.b"}
    sup.look()
    assert jobstate.read(tmp_path, "s.b")["state"] == jobstate.CAUGHT_UP and sup.starter.started == ["s.a", "s.b"]
    clock.now = 1.0
    sup.look()
    assert sup.starter.started == ["s.a", "s.b", "s.a"] and set(sup.queries) == {"s.a"}


def test_tables_start_side_by_side(tmp_path):
    """START_THREADS queries start at once: here each start waits for the others to be under way."""
    import threading

    from cdc.jobs.queries import START_THREADS

    together = threading.Barrier(START_THREADS, timeout=30)

    class Together(Starter):
        def start_table(self, reg, available_now, tables=1):
            together.wait()
            return super().start_table(reg, available_now, tables)

    names = [f"s.t{i}" for i in range(START_THREADS)]
    sup, _ = supervisor(tmp_path, {n: FakeQuery(active=True) for n in names}, starter=Together)
    sup.start_all()
    assert set(sup.queries) == set(names) and not sup.failed


def test_a_look_looks_at_the_queries_only_once_one_has_ended(tmp_path):
    """Quiet tables cost no call into the JVM a second: a query is looked at when one has
    ended, and a running query's progress only while its table is retrying."""

    class Looked(FakeQuery):
        looks = 0

        @property
        def isActive(self):
            Looked.looks += 1
            return self.active

        @isActive.setter
        def isActive(self, value):
            self.active = value

    replacement = Looked(active=True)
    sup, clock = supervisor(tmp_path, {"s.a": [Looked(active=True), replacement], "s.b": Looked(active=True)},
                            available_now=False)
    sup.state.retry_for_s = 60
    streams = sup.spark.streams
    streams.quiet = True
    sup.start_all()
    sup.look()
    assert Looked.looks == 0
    failed = sup.queries["s.a"]
    failed.active, failed.error, streams.quiet = False, DependencyError("Kafka is unreachable"), False
    sup.look()  # seen (and looked at once more as it is stopped), to start again at 1.0
    assert Looked.looks == 3 and "s.a" not in sup.queries
    streams.quiet, clock.now = True, 1.0
    sup.look()  # started again
    assert sup.queries["s.a"] is replacement and "s.a" in sup.state.failing_since and Looked.looks == 3
    sup.look()  # s.a retrying: only its query is looked at, and it has read nothing yet
    assert Looked.looks == 4 and "s.a" in sup.state.failing_since
    replacement.lastProgress = {"numInputRows": 5}
    sup.look()
    assert Looked.looks == 5 and "s.a" not in sup.state.failing_since
    sup.look()
    assert Looked.looks == 5


def test_a_table_failing_in_a_shared_query_leaves_it_and_the_others_start_again_without_it(tmp_path):
    def shared(members, away):
        failed = {"s.b": ApplyError("bad record")} if "s.b" in members else {}
        query = FakeQuery(ApplyError("batch 0: 1 table(s) failed (s.b)") if failed else None)
        return query, FakeBatch(failed, tmp_path)

    sup, _ = supervisor(tmp_path, {"s.a": FakeQuery(), "s.b": ApplyError("bad record"), "s.c": FakeQuery()},
                        groups={"shared-2s": ["s.a", "s.b", "s.c"]}, shared=shared)
    with pytest.raises(ApplyError, match="bad record"):
        sup.run_available_now()
    assert sup.starter.members == [["s.a", "s.b", "s.c"], ["s.a", "s.c"]]
    assert sup.state.groups == {"shared-2s": ["s.a", "s.c"]} and set(sup.failed) == {"s.b"}
    assert {n: jobstate.read(tmp_path, n)["state"] for n in ("s.a", "s.b", "s.c")} == {
        "s.a": jobstate.CAUGHT_UP, "s.b": jobstate.FAILED, "s.c": jobstate.CAUGHT_UP}


def test_a_shared_query_drops_the_checkpoints_a_killed_job_left_of_its_tables(tmp_path):
    import hashlib
    import json

    from cdc.jobs.supervisor import SHARED_TABLES

    sup, _ = supervisor(tmp_path, {"s.a": FakeQuery(), "s.b": FakeQuery()}, groups={"shared-2s": ["s.a", "s.b"]})
    directory = tmp_path / "checkpoints" / "_shared"
    running = FakeBatch({}, tmp_path)  # another shared query of this job, running
    running.checkpoint = directory / "shared-20s-1"
    sup.batches["shared-20s"] = running
    left = {"dead": ["s.a", "s.z"], "other": ["s.y", "s.z"], "shared-20s-1": ["s.b"]}  # a killed job's; a live one's
    for name, tables in left.items():
        (directory / name).mkdir(parents=True)
        (directory / name / SHARED_TABLES).write_text(json.dumps(tables))
    (directory / "unnamed").mkdir()  # an older release's, of other tables
    tag = hashlib.sha256(b"s.a\ns.b").hexdigest()[:12]
    (directory / f"shared-2s-{tag}-1").mkdir()  # an older release's, of this query's tables
    sup.start_all()
    made = sup.starter.checkpoints
    assert sorted(p.name for p in directory.iterdir()) == sorted(["other", "shared-20s-1", "unnamed", made[0].name])
    assert json.loads((made[0] / SHARED_TABLES).read_text()) == ["s.a", "s.b"]


def test_a_table_joins_its_running_shared_query_again_and_its_own_checkpoint_goes(tmp_path):
    from types import SimpleNamespace

    joined = []

    class Batch(FakeBatch):
        subscribed, cap = {"pg.s.a", "pg.s.b"}, 100

        def join(self, name, applier, session, committed):
            joined.append((name, applier, committed))

    lags = {"s.b": (500, 0)}  # more than a shared batch behind
    sup, clock = supervisor(tmp_path, {"s.a": FakeQuery(), "s.b": FakeQuery(active=True)},
                            groups={"shared-2s": ["s.a", "s.b"]}, available_now=False,
                            shared=lambda members, away: (FakeQuery(active=True), Batch({}, tmp_path)),
                            opens=lambda reg: SimpleNamespace(committed={0: 3}), lags=lags)
    sup.state.retry_for_s = 60
    sup.spark.streams.quiet = True
    sup.start_all()
    sup.batches["shared-2s"].failed = {"s.b": DependencyError("registry down")}
    sup.look()  # s.b leaves, to start on its own at 1.0
    clock.now = 1.0
    sup.look()
    own = sup.queries["s.b"]
    own_checkpoint = tmp_path / "checkpoints" / "s.b"
    own_checkpoint.mkdir(parents=True)
    own.lastProgress = {"numInputRows": 3}
    sup.look()  # recovered, but too far behind
    assert joined == [] and "s.b" in sup.queries
    lags["s.b"] = (5, 0)
    clock.now += REJOIN_EVERY_S
    sup.look()
    assert joined == [("s.b", "s.b applier", {0: 3})] and sup.state.groups == {"shared-2s": ["s.a", "s.b"]}
    assert not own.isActive and set(sup.queries) == {"shared-2s"} and not own_checkpoint.exists()
    assert jobstate.read(tmp_path, "s.b").get("query") == "shared-2s"


def test_a_table_asked_for_is_handed_over_from_its_shared_query_and_taken_back(tmp_path):
    """A command asks for a table of a running shared query: the query starts again without
    it, its lock is lent, and once the request is withdrawn the table is locked again,
    read again from its registration and started in a query of its own; a table whose
    registration went meanwhile is run no more."""
    import json
    import os

    lent = jobstate.Lent(tmp_path)
    for t in ("s.a", "s.b", "s.c"):
        lent.take(t)
    sup, _ = supervisor(tmp_path, {"s.a": FakeQuery(), "s.b": FakeQuery(active=True), "s.c": FakeQuery()},
                        groups={"shared-2s": ["s.a", "s.b", "s.c"]}, available_now=False, lent=lent,
                        shared=lambda members, away: (FakeQuery(active=True), FakeBatch({}, tmp_path)))
    sup.spark.streams.quiet = True
    started = sup.starter.members
    (tmp_path / "tables").mkdir()  # s.c's registration is removed while it is lent
    (tmp_path / "tables" / "s.b.yaml").write_text("name: s.b\nsource: {name: pg, schema: s, table: b}\n")
    sup.start_all()
    requests = tmp_path / "handover"
    requests.mkdir()
    for t in ("s.b", "s.c"):
        (requests / f"{t}.json").write_text(json.dumps({"pid": os.getpid()}))
    sup.look()
    assert started == [["s.a", "s.b", "s.c"], ["s.a", "s.c"], ["s.a"]]
    assert sup.state.away == {"s.b": os.getpid(), "s.c": os.getpid()} and sup.lent.held == {"s.a"}
    assert jobstate.read(tmp_path, "s.b")["state"] == jobstate.HANDED_OVER
    sup.look()  # still asked for
    assert set(sup.state.away) == {"s.b", "s.c"}
    for t in ("s.b", "s.c"):
        (requests / f"{t}.json").unlink()
    sup.look()
    assert not sup.state.away and set(sup.queries) == {"shared-2s", "s.b"} and sup.lent.held == {"s.a", "s.b"}
    assert "s.c" not in sup.tables and sup.state.groups == {"shared-2s": ["s.a"]}
    sup.lent.release_all()
