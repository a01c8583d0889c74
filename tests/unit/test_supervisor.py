import pytest

from cdc.config.models import Settings, SparkSettings
from cdc.errors import ApplyError, DependencyError
from cdc.jobs.failures import diagnose
from cdc.jobs.supervisor import Supervisor


class Clock:
    def __init__(self):
        self.now = 0.0
        self.slept = []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


def supervisor(bound):
    clock = Clock()
    settings = Settings(spark=SparkSettings(retry_for_s=bound))
    return Supervisor(None, settings, [], available_now=True, clock=lambda: clock.now, sleep=clock.sleep), clock


def test_retries_with_backoff_then_gives_up_naming_the_cause():
    sup, clock = supervisor(bound=20)
    err = DependencyError("Kafka at x is unreachable")
    with pytest.raises(ApplyError, match=r"gave up after 20s of retries; last error: Kafka at x is unreachable"):
        for _ in range(100):
            sup.backoff("t.a", err)
    assert clock.slept[:4] == [1.0, 2.0, 4.0, 8.0] and max(clock.slept) <= 30


def test_recovery_resets_the_budget():
    sup, clock = supervisor(bound=5)
    sup.backoff("t.a", DependencyError("down"))
    clock.now += 100
    sup.recovered("t.a")
    sup.backoff("t.a", DependencyError("down again"))  # a fresh budget, no raise
    assert clock.slept == [1.0, 1.0]


def test_verdicts_about_the_data_are_not_retried():
    sup, _ = supervisor(bound=300)
    with pytest.raises(ApplyError, match="bad record"):
        sup.backoff("t.a", ApplyError("bad record"))
    settings = Settings()
    for text in ("py4j ... cdc.errors.ApplyError: table t: 1 record(s) ...", "[KAFKA_DATA_LOSS] ...",
                 "[CAST_INVALID_INPUT] The value 'x' cannot be cast. SQLSTATE: 22018"):
        assert not diagnose(settings, None, "t.a", RuntimeError(text)).retriable
    assert diagnose(settings, None, "t.a", RuntimeError("org.apache.kafka.common.errors.TimeoutException: x")).retriable


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
    """A table's streaming query: finishes, or fails with `error` once."""

    def __init__(self, error=None):
        self.error, self.isActive, self.lastProgress = error, True, None

    def awaitTermination(self, timeout=None):
        self.isActive = False
        if self.error is not None:
            raise self.error
        return True

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
        self.away: list[tuple] = []  # the topics each shared query read for tables away
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
        self.away.append(away)
        self.checkpoints.append(checkpoint)
        return self.shared(members, away)

    def applier(self, session, reg, target, checkpoint):
        return f"{reg.name} applier"

    def stop(self, name, query):
        if query.isActive:
            query.stop()


def isolated(tmp_path, outcomes: dict, lags=None, **starter):
    """A supervisor of the tables in `outcomes` (name -> what starting its query does), each
    in a query of its own (a test of shared queries sets `groups`); `lags`: each table's lag
    (records left, applied), else unknown. Its Starter is `sup.starter`."""
    from cdc.config.models import StackSettings, TableRegistration

    settings = Settings(stack=StackSettings(state_dir=tmp_path), tables_dir=tmp_path / "tables",
                        sources={"pg": {"kind": "postgresql", "database": "db", "user": "cdc"}},
                        spark=SparkSettings(retry_for_s=0, shared_query=False, checkpoint_dir=tmp_path / "checkpoints"))
    tables = [TableRegistration(name=n, source={"name": "pg", "schema": "s", "table": n.split(".")[1]})
              for n in outcomes]

    class Spark:
        def newSession(self):
            return self

    clock = Clock()
    return Supervisor(Spark(), settings, tables, available_now=True, clock=lambda: clock.now, sleep=clock.sleep,
                      starter=Starter(outcomes, tmp_path, **starter),
                      lag=lambda settings, reg, **kw: None if lags is None else lags[reg.name])


def test_a_failing_table_does_not_stop_the_others(tmp_path, capsys):
    from cdc.control import jobstate
    from cdc.errors import ConfigError

    poisoned = ConfigError("target lake.s.b of table s.b does not exist")
    sup = isolated(tmp_path, {"s.a": FakeQuery(), "s.b": poisoned, "s.c": FakeQuery()})
    with pytest.raises(ConfigError) as raised:
        sup.run_available_now()
    assert raised.value is poisoned and raised.value.table == "s.b"  # a lone failed table: its own error
    assert {n: jobstate.read(tmp_path, n)["state"] for n in ("s.a", "s.b", "s.c")} == {
        "s.a": jobstate.CAUGHT_UP, "s.b": jobstate.FAILED, "s.c": jobstate.CAUGHT_UP}
    assert "s.b: failed: target lake.s.b of table s.b does not exist (the 2 other table(s) go on)" in \
        capsys.readouterr().err


def test_tables_start_side_by_side(tmp_path):
    """START_THREADS queries start at once: here each start waits for the others to be under way."""
    import threading

    from cdc.jobs.queries import START_THREADS

    names = [f"s.t{i}" for i in range(START_THREADS)]
    sup = isolated(tmp_path, {n: FakeQuery() for n in names})
    together, start = threading.Barrier(len(names), timeout=30), sup.starter.start_table
    sup.starter.start_table = lambda *a, **k: (together.wait(), start(*a, **k))[1]
    sup.run_available_now()
    assert set(sup.queries) == set(names) and not sup.failed


def test_several_failed_tables_are_named_in_one_error(tmp_path):
    from cdc.control import jobstate

    sup = isolated(tmp_path, {"s.a": FakeQuery(ApplyError("column x cannot narrow")),
                                           "s.b": ApplyError("topic gone"), "s.c": FakeQuery()})
    with pytest.raises(ApplyError, match=r"2 of 3 tables failed \(s.a, s.b\): column x cannot narrow; topic gone"):
        sup.run_available_now()
    assert jobstate.read(tmp_path, "s.c")["state"] == jobstate.CAUGHT_UP
    assert jobstate.read(tmp_path, "s.a")["error"] == "column x cannot narrow"


def test_a_given_up_table_is_tried_again_when_due(tmp_path):
    from cdc.jobs.supervisor import FAILED_RETRY_S

    sup = isolated(tmp_path, {"s.a": [ApplyError("not yet"), FakeQuery()], "s.b": FakeQuery()})

    class Streams:
        def awaitAnyTermination(self, timeout):
            pass

        def resetTerminated(self):
            pass

    sup.spark.streams = Streams()
    sup.start_or_fail("s.a")
    sup.start_or_fail("s.b")
    assert set(sup.failed) == {"s.a"} and set(sup.queries) == {"s.b"}
    sup.poll()
    assert set(sup.failed) == {"s.a"}  # not due yet
    sup.clock = lambda: FAILED_RETRY_S + 1
    sup.poll()
    assert not sup.failed and set(sup.queries) == {"s.a", "s.b"}


def test_a_poll_looks_at_the_queries_only_once_one_has_ended(tmp_path):
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

    class Streams:
        ended = False

        def awaitAnyTermination(self, timeout):
            return self.ended

        def resetTerminated(self):
            self.ended = False

    replacement = Looked()
    sup = isolated(tmp_path, {"s.a": [Looked(), replacement], "s.b": Looked()})
    sup.spark.streams = streams = Streams()
    sup.settings = Settings(stack=sup.settings.stack, spark=SparkSettings(retry_for_s=60))
    sup.start_or_fail("s.a")
    sup.start_or_fail("s.b")
    sup.poll()
    assert Looked.looks == 0
    failed = sup.queries["s.a"]
    failed.active, failed.error, streams.ended = False, DependencyError("Kafka is unreachable"), True
    sup.poll()  # restarted
    assert sup.queries["s.a"] is replacement and "s.a" in sup.failing_since and Looked.looks == 2
    sup.poll()  # s.a retrying: only its query is looked at, and it has read nothing yet
    assert Looked.looks == 3 and "s.a" in sup.failing_since
    replacement.lastProgress = {"numInputRows": 5}
    sup.poll()
    assert Looked.looks == 4 and "s.a" not in sup.failing_since
    sup.poll()
    assert Looked.looks == 4


def test_batch_sizing_caps_a_backlog_and_waits_for_a_minimum_only_when_continuous():
    from cdc.config.models import TableOptions
    from cdc.jobs.backlog import batch_sizing

    assert batch_sizing(TableOptions(), available_now=False) == {}
    assert batch_sizing(TableOptions(), available_now=True, auto_cap=70_000) == {"maxOffsetsPerTrigger": "70000"}
    opts = TableOptions(max_offsets_per_trigger=50_000, min_offsets_per_trigger=2_000, max_trigger_delay_s=10)
    assert batch_sizing(opts, available_now=False, auto_cap=70_000) == {
        "maxOffsetsPerTrigger": "50000", "minOffsetsPerTrigger": "2000", "maxTriggerDelay": "10s"}
    assert batch_sizing(opts, available_now=True) == {"maxOffsetsPerTrigger": "50000"}


def test_an_automatic_cap_keeps_the_batches_under_way_within_a_share_of_the_memory():
    from cdc.jobs.backlog import AUTO_MAX_RECORDS, AUTO_MIN_RECORDS, AUTO_UNKNOWN_RECORDS, auto_batch_cap

    gib = 1 << 30
    assert auto_batch_cap(2 * gib, 2048, batches=1) == 524_288  # half of 2 GiB in 2 KiB records
    assert auto_batch_cap(2 * gib, 2048, batches=4) == 131_072  # four batches under way at once share it
    assert auto_batch_cap(2 * gib, 2048, batches=100) == AUTO_MIN_RECORDS  # never below the floor
    assert auto_batch_cap(64 * gib, 100, batches=1) == AUTO_MAX_RECORDS  # nor above the ceiling
    assert auto_batch_cap(2 * gib, None, batches=1) == AUTO_UNKNOWN_RECORDS  # an empty topic


def test_catching_up_tells_the_rate_and_the_time_left(capsys):
    from cdc.jobs.backlog import BEHIND_RECORDS, PROGRESS_EVERY_S, CatchUp

    now = [0.0]
    c = CatchUp("s.a", clock=lambda: now[0])
    assert c.line(5_000_000, 100) == "catching up: 5,000,000 record(s) left"
    now[0] = 100.0  # 400,000 applied while 100,000 arrived: the backlog shrinks by 3,000/s
    assert c.line(4_700_000, 400_100) == ("catching up: 4,700,000 record(s) left, 4,000 records/s, "
                                         "about 26 min left")
    now[0] = 200.0  # nothing applied since, and more arrived than it had gained
    assert c.line(5_100_000, 400_100).endswith("2,000 records/s, not gaining on the source")

    watched, seen = CatchUp("s.b", clock=lambda: now[0]), []
    watched.line = lambda left, applied: seen.append(left)  # noqa: E731 - records the lines logged
    watched.seen(BEHIND_RECORDS - 1, 0)  # not behind: nothing
    watched.seen(BEHIND_RECORDS * 5, 0)
    now[0] += 1
    watched.seen(BEHIND_RECORDS * 4, 10_000)  # within PROGRESS_EVERY_S of the last line
    now[0] += PROGRESS_EVERY_S
    watched.seen(BEHIND_RECORDS * 3, 20_000)
    assert seen == [BEHIND_RECORDS * 5, BEHIND_RECORDS * 3]
    watched.seen(0, 50_000)
    assert "s.b: caught up" in capsys.readouterr().err and watched.shown_at is None


def test_tables_share_a_query_by_trigger_interval_unless_they_size_their_own_batches():
    from cdc.config.models import TableRegistration
    from cdc.jobs.shared import groups

    def reg(name, **options):
        return TableRegistration(name=name, source={"name": "pg", "schema": "s", "table": name.split(".")[1]},
                                 options=options)

    tables = [reg("s.a"), reg("s.b"), reg("s.c", trigger_interval_s=10), reg("s.d", trigger_interval_s=10),
              reg("s.e", trigger_interval_s=30), reg("s.f", max_offsets_per_trigger=5),
              reg("s.g", min_offsets_per_trigger=5)]
    assert groups(tables) == {"shared-2s": ["s.a", "s.b"], "shared-10s": ["s.c", "s.d"]}  # s.e alone: its own
    # by default a job's tables share queries; `spark.shared_query: false` gives each its own
    assert Supervisor(None, Settings(), tables, available_now=True).groups == groups(tables)
    assert Supervisor(None, Settings(spark=SparkSettings(shared_query=False)), tables, available_now=True).groups == {}


def test_a_shared_query_starts_from_each_tables_committed_offsets_and_applies_only_the_tables_read():
    import json

    from cdc.jobs.shared import due, starting_offsets

    start = starting_offsets([("t.a", {0: 5}, (0, 1)), ("t.b", {}, (0,)), ("t.c", {0: 7, 1: 3}, (0, 1))])
    assert json.loads(start) == {"t.a": {"0": 5, "1": -2}, "t.b": {"0": -2}, "t.c": {"0": 7, "1": 3}}
    two = starting_offsets([("t.a", {0: 9, 1: 4}, (0, 1)), ("t.a", {0: 5, 1: 6}, (0, 1)), ("t.a", {0: 7}, (0, 1))])
    assert json.loads(two) == {"t.a": {"0": 5, "1": -2}}  # two tables of one topic: the lower of each
    topics = {"a": "t.a", "b": "t.b", "c": "t.c"}
    assert due(topics, {"a": {0: 5, 1: 0}, "b": {0: 3}, "c": {0: 7}},
               {"t.a": {0: 5, 1: 0}, "t.b": {0: 4}, "t.c": {0: 7}}) == ["b"]
    assert due(topics, {"a": {0: 5}, "b": {0: 4}}, {"t.a": {0: 5, 1: 2}, "t.b": {0: 4}}) == ["a"]  # a new partition


def test_a_table_s_first_plan_with_records_is_found_by_bisection_as_by_asking_every_plan(tmp_path):
    """Plans' ends only grow (a partition may appear): the plans a table has records in are
    the last ones, wherever it starts (before, inside or past the plans, a partition lacking)."""
    import random

    from cdc.jobs.shared import SharedBatch, due
    from cdc.jobs.slots import BatchSlots

    class Applier:
        topic = "t.a"

        def __call__(self, *args):
            raise AssertionError("no plan is applied")

    batch = SharedBatch({"a": Applier()}, None, tmp_path, BatchSlots(1), "{}", cap=100)
    rng = random.Random(7)
    try:
        with batch.cond:  # the worker waits for the condition: it never sees these plans
            end = {0: 0}
            for batch_id in range(40):
                end = {p: o + rng.choice((0, 0, 1, 5)) for p, o in end.items()}
                if batch_id == 20:
                    end[1] = 3
                batch.plans.append((batch_id, {"t.a": dict(end), "t.other": {0: batch_id}}, 0.0))
            for start in ({}, {0: 0}, {0: 30}, {0: 10_000}, {0: 10_000, 1: 2}, {0: 10_000, 1: 3}):
                brute = next((i for i, (_, e, _) in enumerate(batch.plans) if due({"a": "t.a"}, {"a": start}, e)),
                             len(batch.plans))
                assert batch._first_due("a", "t.a", start) == brute
            batch.plans.clear()
    finally:
        batch.close()


def test_a_shared_query_applies_the_busiest_table_first_each_table_all_planned_for_it_up_to_the_cap(tmp_path):
    """The planner and its workers, without Spark: the checkpoint's offset log as Spark
    writes it, appliers that record what they are given."""
    import json

    from cdc.jobs.slots import BatchSlots
    from cdc.jobs.shared import SharedBatch

    (tmp_path / "offsets").mkdir()
    applied = []

    class Applier:
        def __init__(self, topic, fail=False):
            self.topic, self.fail = topic, fail

        def __call__(self, part, batch_id, waited_s, records):
            if self.fail:
                raise ValueError("bad record")
            applied.append((part, batch_id, records))

    appliers = {"busy": Applier("t.busy"), "quiet": Applier("t.quiet"), "idle": Applier("t.idle"),
                "bad": Applier("t.bad", fail=True)}
    start = json.dumps({"t.busy": {"0": 0}, "t.quiet": {"0": 10}, "t.idle": {"0": 4}, "t.bad": {"0": 0}})
    batch = SharedBatch(appliers, lambda name, first, last: (name, first, last), tmp_path, BatchSlots(1), start,
                        cap=100)
    try:
        with batch.cond:  # three batches planned before a worker looks
            for batch_id, busy, quiet in ((0, 60, 11), (1, 90, 12), (2, 150, 12)):
                ends = {"t.busy": {"0": busy}, "t.quiet": {"0": quiet}, "t.idle": {"0": 4}, "t.bad": {"0": 1}}
                (tmp_path / "offsets" / str(batch_id)).write_text("v1\n{}\n" + json.dumps(ends))
                batch(None, batch_id)
        assert batch.drained(30)
    finally:
        batch.close()
    # the busy table first (the most records), as far as 100 records allow, then the rest of
    # it; the quiet table once, both its changes; the idle table never; the bad one set aside
    # each with the records of its range (what sizes its pool and picks its path)
    assert applied == [(("busy", {0: 0}, {0: 90}), 1, 90), (("busy", {0: 90}, {0: 150}), 2, 60),
                       (("quiet", {0: 10}, {0: 12}), 2, 2)]
    # what the lag gauge counts as applied: where each table's next read starts
    assert [batch.applied(n) for n in ("busy", "quiet", "idle")] == [{0: 150}, {0: 12}, {0: 4}]
    assert list(batch.take_failed()) == ["bad"] and batch.take_failed() == {}


def test_a_table_failing_in_a_shared_query_leaves_it_and_the_others_start_again_without_it(tmp_path):
    from cdc.control import jobstate

    class Batch(FakeBatch):
        def __init__(self, members):
            super().__init__({"s.b": ApplyError("bad record")} if "s.b" in members else {}, tmp_path)

    def shared(members, away):
        return (FakeQuery(ApplyError("batch 0: 1 table(s) failed (s.b)")) if "s.b" in members else FakeQuery(),
                Batch(members))

    sup = isolated(tmp_path, {"s.a": FakeQuery(), "s.b": ApplyError("bad record"), "s.c": FakeQuery()},
                   shared=shared)
    spark = sup.settings.spark.model_copy(update={"shared_query": True})
    sup.settings = sup.settings.model_copy(update={"spark": spark})
    sup.groups = {"shared-2s": ["s.a", "s.b", "s.c"]}
    with pytest.raises(ApplyError, match="bad record"):
        sup.run_available_now()
    assert sup.starter.members == [["s.a", "s.b", "s.c"], ["s.a", "s.c"]]
    assert sup.groups == {"shared-2s": ["s.a", "s.c"]} and set(sup.failed) == {"s.b"}
    assert {n: jobstate.read(tmp_path, n)["state"] for n in ("s.a", "s.b", "s.c")} == {
        "s.a": jobstate.CAUGHT_UP, "s.b": jobstate.FAILED, "s.c": jobstate.CAUGHT_UP}


def test_a_shared_query_drops_the_checkpoints_a_killed_job_left_of_its_tables(tmp_path):
    import hashlib
    import json

    from cdc.jobs.supervisor import SHARED_TABLES

    sup = isolated(tmp_path, {"s.a": FakeQuery(), "s.b": FakeQuery()})
    sup.groups = {"shared-2s": ["s.a", "s.b"]}
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


def test_a_table_whose_target_does_not_open_starts_on_its_own_once(tmp_path):
    from cdc.control import jobstate

    def opens(reg):
        if reg.name == "s.b":
            raise ApplyError("target gone")
        return object()

    sup = isolated(tmp_path, {"s.a": FakeQuery(), "s.b": [ApplyError("target gone")], "s.c": FakeQuery()},
                   opens=opens)
    sup.groups = {"shared-2s": ["s.a", "s.b", "s.c"]}
    sup.start_all()
    assert sup.groups == {"shared-2s": ["s.a", "s.c"]} and set(sup.failed) == {"s.b"}
    assert set(sup.queries) == {"shared-2s"} and sup.starter.started == []  # given up at once (a verdict), not started again
    assert [jobstate.read(tmp_path, n).get("query") for n in ("s.a", "s.b", "s.c")] == ["shared-2s", None, "shared-2s"]


def test_a_table_failing_while_a_shared_query_runs_leaves_it_and_the_query_goes_on(tmp_path):
    from cdc.control import jobstate

    sup = isolated(tmp_path, {"s.a": FakeQuery(), "s.b": ApplyError("bad record"), "s.c": FakeQuery()},
                   shared=lambda members, away: (FakeQuery(), FakeBatch({"s.b": ApplyError("bad record")}, tmp_path)))
    sup.groups = {"shared-2s": ["s.a", "s.b", "s.c"]}
    with pytest.raises(ApplyError, match="bad record"):
        sup.run_available_now()
    assert sup.starter.members == [["s.a", "s.b", "s.c"]]  # not started again: its other tables were applied
    assert sup.groups == {"shared-2s": ["s.a", "s.c"]} and set(sup.failed) == {"s.b"}
    assert {n: jobstate.read(tmp_path, n)["state"] for n in ("s.a", "s.b", "s.c")} == {
        "s.a": jobstate.CAUGHT_UP, "s.b": jobstate.FAILED, "s.c": jobstate.CAUGHT_UP}


def test_a_table_joins_a_running_shared_query_again_from_its_committed_offsets(tmp_path):
    """The planner, without Spark: a table that failed and left joins again from the offsets
    its target holds, which may be past the newest plan (its own query read further)."""
    import json

    from cdc.jobs.slots import BatchSlots
    from cdc.jobs.shared import SharedBatch

    (tmp_path / "offsets").mkdir()
    applied = []

    class Applier:
        def __init__(self, topic):
            self.topic = topic

        def __call__(self, part, batch_id, waited_s, records):
            applied.append((part, batch_id))

    def plan(batch_id, ends):
        (tmp_path / "offsets" / str(batch_id)).write_text("v1\n{}\n" + json.dumps(ends))
        batch(None, batch_id)

    # t.b is read from its end: its table is away, in a query of its own
    start = json.dumps({"t.a": {"0": 0}, "t.b": {"0": 40, "1": 7}})
    batch = SharedBatch({"a": Applier("t.a")}, lambda name, first, last: (name, first, last), tmp_path,
                        BatchSlots(1), start, cap=100)
    try:
        assert batch.subscribed == {"t.a", "t.b"}
        plan(0, {"t.a": {"0": 5}, "t.b": {"0": 50, "1": 7}})
        assert batch.drained(30)
        batch.join("b", Applier("t.b"), "b's session", {0: 45, 1: 9})  # partition 1: past the plans
        assert batch.sessions == {"b": "b's session"}
        assert batch.drained(30)
        plan(1, {"t.a": {"0": 5}, "t.b": {"0": 60, "1": 12}})
        assert batch.drained(30)
    finally:
        batch.close()
    assert applied == [(("a", {0: 0}, {0: 5}), 0),
                       (("b", {0: 45, 1: 9}, {0: 50, 1: 9}), 0),  # never an end below where it starts
                       (("b", {0: 50, 1: 9}, {0: 60, 1: 12}), 1)]
    assert batch.applied("b") == {0: 60, 1: 12}


def test_a_table_away_from_its_shared_query_joins_it_again_once_its_own_query_runs(tmp_path):
    from types import SimpleNamespace

    from cdc.control import jobstate
    from cdc.jobs.supervisor import REJOIN_EVERY_S

    lags = {"s.b": (5, 0), "s.c": (500, 0)}  # s.c: more than a shared batch behind
    sup = isolated(tmp_path, {"s.a": FakeQuery(), "s.b": FakeQuery(), "s.c": FakeQuery()}, lags=lags,
                   opens=lambda reg: SimpleNamespace(committed={0: 3}))
    sup.groups = {"shared-2s": ["s.a"]}
    sup.home = {"s.a": "shared-2s", "s.b": "shared-2s", "s.c": "shared-2s"}
    clock = Clock()
    sup.clock = lambda: clock.now
    joined = []

    class Batch(FakeBatch):
        subscribed, cap = {"pg.s.a", "pg.s.b", "pg.s.c"}, 100

        def join(self, name, applier, session, committed):
            joined.append((name, applier, committed))

    sup.batches["shared-2s"] = Batch({}, tmp_path)
    own = {t: FakeQuery() for t in ("s.b", "s.c")}
    sup.queries.update(own)
    own_checkpoint = tmp_path / "checkpoints" / "s.b"
    own_checkpoint.mkdir(parents=True)
    sup.failing_since["s.b"] = 0.0
    sup.rejoin()  # s.b still failing; s.c's own query has run no batch yet
    own["s.c"].lastProgress = {"numInputRows": 0}
    clock.now += REJOIN_EVERY_S
    sup.rejoin()  # s.c too far behind
    assert joined == [] and set(sup.queries) == {"s.b", "s.c"}
    sup.recovered("s.b")
    own["s.b"].lastProgress = {"numInputRows": 3}
    clock.now += REJOIN_EVERY_S
    sup.rejoin()
    assert joined == [("s.b", "s.b applier", {0: 3})] and sup.groups == {"shared-2s": ["s.a", "s.b"]}
    assert not own["s.b"].isActive and own["s.c"].isActive and set(sup.queries) == {"s.c"}
    assert not own_checkpoint.exists()  # a query of its own later starts from the table's commits
    assert jobstate.read(tmp_path, "s.b").get("query") == "shared-2s"
    lags["s.c"] = (0, 0)
    sup.rejoin()  # looked at again only after REJOIN_EVERY_S
    assert len(joined) == 1
    clock.now += REJOIN_EVERY_S
    sup.rejoin()
    assert [name for name, _, _ in joined] == ["s.b", "s.c"] and sup.queries == {}


def test_a_shared_query_all_of_whose_tables_left_starts_again_with_the_first_back(tmp_path):
    sup = isolated(tmp_path, {"s.a": FakeQuery(), "s.b": FakeQuery()}, lags={"s.a": (0, 0), "s.b": (0, 0)})
    sup.home = {"s.a": "shared-2s", "s.b": "shared-2s"}  # the query ended, every table left it
    own = {t: FakeQuery() for t in ("s.a", "s.b")}
    own["s.a"].lastProgress = {"numInputRows": 1}
    sup.queries.update(own)
    sup.rejoin()
    # it also reads the topic of the table still away, so that it can join it in place
    assert sup.starter.members == [["s.a"]] and sup.starter.away == [("pg.s.b",)] and sup.groups == {"shared-2s": ["s.a"]}
    assert set(sup.queries) == {"shared-2s", "s.b"}


def test_the_tables_of_a_dissolved_shared_query_join_it_again_a_minute_later(tmp_path):
    from cdc.errors import DependencyError
    from cdc.jobs.supervisor import FAILED_RETRY_S

    sup = isolated(tmp_path, {"s.a": FakeQuery(), "s.b": FakeQuery()}, lags={"s.a": (0, 0), "s.b": (0, 0)})
    sup.groups = {"shared-2s": ["s.a", "s.b"]}
    sup.home = {"s.a": "shared-2s", "s.b": "shared-2s"}
    clock = Clock()
    sup.clock = lambda: clock.now
    started = sup.starter.members
    sup.failing_since["shared-2s"] = 0.0
    sup.dissolve("shared-2s", DependencyError("Kafka at x is unreachable"))  # retries ran out
    assert sup.groups == {} and set(sup.queries) == {"s.a", "s.b"}
    assert "shared-2s" not in sup.failing_since  # started again, it has a new retry budget
    for query in sup.queries.values():
        query.lastProgress = {"numInputRows": 0}
    clock.now += FAILED_RETRY_S - 1
    sup.rejoin()
    assert started == [] and set(sup.queries) == {"s.a", "s.b"}
    clock.now += 1
    sup.rejoin()  # s.b: the restarted query's topics are FakeBatch's (none); it stays on its own
    assert started == [["s.a"]] and set(sup.queries) == {"shared-2s", "s.b"}


def test_a_table_asked_for_is_handed_over_from_its_shared_query_and_taken_back(tmp_path):
    """A command asks for a table of a running shared query: the query starts again without
    it, its lock is lent, and once the request is withdrawn the table is locked again,
    read again from its registration and started in a query of its own; a table whose
    registration went meanwhile is run no more."""
    import json
    import os

    from cdc.control import jobstate

    sup = isolated(tmp_path, {"s.a": FakeQuery(), "s.b": FakeQuery(), "s.c": FakeQuery()})
    sup.available_now = False
    sup.groups = {"shared-2s": ["s.a", "s.b", "s.c"]}
    sup.home = {t: "shared-2s" for t in ("s.a", "s.b", "s.c")}
    sup.lent = jobstate.Lent(tmp_path)
    for t in sup.tables:
        sup.lent.take(t)
    started = sup.starter.members
    (tmp_path / "tables").mkdir()  # s.c's registration is removed while it is lent
    (tmp_path / "tables" / "s.b.yaml").write_text("name: s.b\nsource: {name: pg, schema: s, table: b}\n")
    sup.start_all()
    requests = tmp_path / "handover"
    requests.mkdir()
    for t in ("s.b", "s.c"):
        (requests / f"{t}.json").write_text(json.dumps({"pid": os.getpid()}))
    sup.hand_over()
    assert started == [["s.a", "s.b", "s.c"], ["s.a", "s.c"], ["s.a"]]
    assert sup.away == {"s.b": os.getpid(), "s.c": os.getpid()} and sup.lent.held == {"s.a"}
    assert jobstate.read(tmp_path, "s.b")["state"] == jobstate.HANDED_OVER
    sup.take_back()  # still asked for
    assert set(sup.away) == {"s.b", "s.c"}
    for t in ("s.b", "s.c"):
        (requests / f"{t}.json").unlink()
    sup.take_back()
    assert not sup.away and set(sup.queries) == {"shared-2s", "s.b"} and sup.lent.held == {"s.a", "s.b"}
    assert "s.c" not in sup.tables and sup.groups == {"shared-2s": ["s.a"]}
    sup.lent.release_all()
