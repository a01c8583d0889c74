"""Shared queries without Spark (jobs/shared.py): which tables share one, where it starts, and
how its planner and workers apply each table."""
from cdc.config.models import Settings, SparkSettings
from cdc.jobs.supervisor import Supervisor


def test_tables_share_a_query_by_trigger_interval_unless_they_size_their_own_batches():
    from cdc.config.models import TableRegistration
    from cdc.jobs.shared import groups

    def reg(name, **options):
        return TableRegistration(name=name, source={"name": "pg", "schema": "s", "table": name.split(".")[1]},
                                 options=options)

    tables = [reg("s.a"), reg("s.b"), reg("s.c", trigger_interval_s=10), reg("s.d", trigger_interval_s=10),
              reg("s.e", trigger_interval_s=30), reg("s.f", max_offsets_per_trigger=5),
              reg("s.g", min_offsets_per_trigger=5)]
    assert groups(tables) == {"shared-1s": ["s.a", "s.b"], "shared-10s": ["s.c", "s.d"]}  # s.e alone: its own
    # by default a job's tables share queries; `spark.shared_query: false` gives each its own
    assert Supervisor(None, Settings(), tables, available_now=True).state.groups == groups(tables)
    assert Supervisor(None, Settings(spark=SparkSettings(shared_query=False)), tables, available_now=True).state.groups == {}


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
        topic, state_dir = "t.a", None

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
        state_dir = None

        def __init__(self, topic, fail=False):
            self.topic, self.fail = topic, fail

        def __call__(self, part, batch_id, waited_s, records, kafka=None, end=None, start=None):
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


def test_a_table_joins_a_running_shared_query_again_from_its_committed_offsets(tmp_path):
    """The planner, without Spark: a table that failed and left joins again from the offsets
    its target holds, which may be past the newest plan (its own query read further)."""
    import json

    from cdc.jobs.slots import BatchSlots
    from cdc.jobs.shared import SharedBatch

    (tmp_path / "offsets").mkdir()
    applied = []

    class Applier:
        state_dir = None  # no reconciler's barrier (control/barrier.py)

        def __init__(self, topic):
            self.topic = topic

        def __call__(self, part, batch_id, waited_s, records, kafka=None, end=None, start=None):
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


def test_small_batches_join_the_strongest_claim_s_job_within_its_limits():
    from cdc.jobs.shared import together

    candidates = [("a", 300, True), ("big", None, True), ("loner", 5, False), ("huge", 5000, True), ("q1", 50, True),
                  ("q2", 600, True), ("q3", 10, True)]
    # not one of unknown size, one that may not join, nor a big one
    assert together(candidates, records=4096, tables=8, small=1000) == ["a", "q1", "q2", "q3"]
    assert together(candidates, records=900, tables=8, small=1000) == ["a", "q1", "q3"]  # q2: past 900 in all
    assert together(candidates, records=4096, tables=2, small=1000) == ["a", "q1"]
    assert together(candidates, records=4096, tables=8, small=100) == ["a"]  # a big one goes alone
    for alone in ("big", "loner", "huge"):  # the first, when it may not join
        at = [c[0] for c in candidates].index(alone)
        assert together(candidates[at:], records=4096, tables=8, small=1000) == [alone]


def test_one_read_spans_the_ranges_of_the_tables_of_each_topic():
    from cdc.jobs.reading import spanning

    assert spanning([("t.a", {0: 5, 1: 7}, {0: 9, 1: 8}), ("t.a", {0: 3, 1: 8}, {0: 6, 1: 9}),
                     ("t.b", {0: 1}, {0: 2, 1: 4}), ("t.c", {0: 4}, {0: 6}), ("t.c", {}, {0: 6})]) == {
        "t.a": ({0: 3, 1: 7}, {0: 9, 1: 9}),
        "t.b": ({0: 1}, {0: 2, 1: 4}),  # partition 1: from its earliest, as its table reads it
        "t.c": ({}, {0: 6}),  # a table of it reads partition 0 from its earliest
    }


def test_a_worker_applies_several_tables_in_one_job_and_alone_those_that_need_it(tmp_path):
    """The planner and its workers, without Spark: the due tables that may join go to
    `apply_together` at once; one it says needs a batch of its own is applied alone with the
    direct path off, one that failed in it leaves, and the others' next reads start past
    their ranges."""
    import json

    from cdc.jobs.slots import BatchSlots
    from cdc.jobs.shared import SharedBatch

    (tmp_path / "offsets").mkdir()
    alone, together_calls = [], []

    class Applier:
        state_dir = None

        def __init__(self, topic, joins=True):
            self.topic, self.joins = topic, joins

        def joins_others(self):
            return self.joins

        def __call__(self, part, batch_id, waited_s, records, direct=True, kafka=None, end=None, start=None):
            alone.append((part[0], batch_id, records, direct))

    def apply_together(ranges, waited_s):
        together_calls.append(dict(ranges))
        return {"a": True, "b": False, "c": ValueError("its target is gone")}

    appliers = {"a": Applier("t.a"), "b": Applier("t.b"), "c": Applier("t.c"), "d": Applier("t.d", joins=False)}
    start = json.dumps({t: {"0": 0} for t in ("t.a", "t.b", "t.c", "t.d")})
    batch = SharedBatch(appliers, lambda name, first, last: (name, first, last), tmp_path, BatchSlots(1), start,
                        cap=100, apply_together=apply_together)
    batch.together_tables = 3
    try:
        with batch.cond:
            (tmp_path / "offsets" / "0").write_text("v1\n{}\n" + json.dumps(
                {"t.a": {"0": 30}, "t.b": {"0": 20}, "t.c": {"0": 10}, "t.d": {"0": 5}}))
            batch(None, 0)
        assert batch.drained(30)
    finally:
        batch.close()
    assert together_calls == [{"a": (0, {0: 0}, {0: 30}, 30), "b": (0, {0: 0}, {0: 20}, 20),
                               "c": (0, {0: 0}, {0: 10}, 10)}]
    assert alone == [("b", 0, 20, False), ("d", 0, 5, True)]
    assert [batch.applied(n) for n in "abd"] == [{0: 30}, {0: 20}, {0: 5}]
    assert list(batch.take_failed()) == ["c"]


def test_the_tables_joining_a_job_are_those_waiting_longest(tmp_path):
    """A job's first table is the strongest claim; the tables that join it are the ones waiting
    longest, not the next claims: a quiet table's few changes ride along with the busy ones."""
    import json

    from cdc.jobs.slots import BatchSlots
    from cdc.jobs.shared import SharedBatch

    (tmp_path / "offsets").mkdir()
    calls, now = [], [0.0]

    class Applier:
        state_dir = None  # no reconciler's barrier (control/barrier.py)

        def __init__(self, topic):
            self.topic = topic

        def joins_others(self):
            return True

    def apply_together(ranges, waited_s):
        calls.append(sorted(ranges))
        return dict.fromkeys(ranges, True)

    names = ("a", "b", "c", "quiet")
    start = json.dumps({f"t.{n}": {"0": 0} for n in names})
    batch = SharedBatch({n: Applier(f"t.{n}") for n in names}, None, tmp_path, BatchSlots(1), start, cap=10_000,
                        clock=lambda: now[0], apply_together=apply_together)
    batch.together_tables = 3
    try:
        with batch.cond:
            (tmp_path / "offsets" / "0").write_text("v1\n{}\n" + json.dumps({"t.quiet": {"0": 2}}))
            batch(None, 0)  # the quiet table's 2 changes, planned at 0 s
            now[0] = 30.0
            (tmp_path / "offsets" / "1").write_text("v1\n{}\n" + json.dumps(
                {"t.a": {"0": 900}, "t.b": {"0": 800}, "t.c": {"0": 700}, "t.quiet": {"0": 2}}))
            batch(None, 1)  # the busy tables' changes, 30 s later
        assert batch.drained(30)
    finally:
        batch.close()
    # by claim alone: a, b, c (the quiet table's claim, log2(3) + 3, is below theirs)
    assert calls[0] == ["a", "b", "quiet"]
