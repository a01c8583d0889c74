"""The reference model of a batch (tests/model.py) on its own: the rules it states, on
examples, and that any generated history, applied in any batches with replays, ends with
what the source holds (unless a change went to the dead letters)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from tests.model import (MOVED_ROW_UNKNOWN, PLACEHOLDER, TOMBSTONE, VALUE_UNKNOWN, Record, Source, Target, apply,
                         history, strategies)


def rec(offset: int, op: str, key: int | None, lsn: int = 0, v=None, n=None, partition: int = 0, **kw) -> Record:
    return Record(partition, offset, op, key, v, n, commit=lsn, lsn=lsn, ts_ms=1000 + lsn, **kw)


def values(t: Target) -> dict:
    return {r["id"]: r["v"] for r in t.table()}


def test_last_change_wins_and_an_older_one_never_overwrites():
    t = Target()
    apply(t, [rec(0, "c", 1, 100, "a"), rec(1, "u", 1, 200, "b"), rec(2, "u", 1, 150, "old")])
    assert values(t) == {1: "b"} and t.rows[1]["_cdc_op"] == "u"
    apply(t, [rec(3, "u", 1, 120, "older")])
    assert values(t) == {1: "b"}


def test_a_remembered_delete_keeps_an_older_change_out_and_a_newer_one_in():
    t = Target()
    create = rec(0, "c", 1, 100, "a")
    apply(t, [create])
    apply(t, [rec(1, "d", 1, 200), rec(2, TOMBSTONE, 1)])
    apply(t, [create], skip_committed=False)  # a replay
    assert values(t) == {} and [(k, p[:32]) for k, p, _ in t.memory] == [(1, f"{200:016x}" * 2)]
    apply(t, [rec(3, "c", 1, 300, "back")])
    assert values(t) == {1: "back"}


def test_a_lone_tombstone_deletes_only_a_row_written_before_it_in_its_partition():
    t = Target()
    apply(t, [rec(5, "c", 1, 100, "a")])
    apply(t, [rec(4, TOMBSTONE, 1)], skip_committed=False)
    assert values(t) == {1: "a"}
    apply(t, [rec(6, TOMBSTONE, 1)])
    assert values(t) == {}


def test_a_truncate_removes_older_rows_and_keeps_older_changes_out():
    t = Target()
    apply(t, [rec(0, "c", 1, 100, "a"), rec(1, "c", 2, 110, "b")])
    apply(t, [rec(2, "t", None, 200), rec(3, "c", 3, 300, "c")])
    apply(t, [rec(0, "c", 1, 100, "a")], skip_committed=False)
    assert values(t) == {3: "c"} and t.truncated_at.startswith(f"{200:016x}")


def test_soft_delete_marks_and_history_closes():
    soft, hist = Target("soft_delete"), Target("history")
    for t in (soft, hist):
        apply(t, [rec(0, "c", 1, 100, "a", 1), rec(1, "u", 1, 200, "b", 2)])
        apply(t, [rec(2, "d", 1, 300), rec(3, TOMBSTONE, 1), rec(4, "c", 2, 400, "x", 1)])
        apply(t, [rec(5, "t", None, 500)])
    assert [(r["id"], r["v"], r["_cdc_deleted"], r["_cdc_op"]) for r in soft.table()] == [
        (1, "b", True, "d"), (2, "x", True, "t")]
    assert [(r["id"], r["v"], r["_cdc_valid_from"], r["_cdc_valid_to"], r["_cdc_current"]) for r in hist.table()] == [
        (1, "a", 1100, 1200, False), (1, "b", 1200, 1300, False), (2, "x", 1400, 1500, False)]


def test_unchanged_values_are_kept_found_through_key_changes_or_set_aside():
    t = Target()
    apply(t, [rec(0, "c", 1, 100, "big", 1)])
    apply(t, [rec(1, "u", 1, 200, PLACEHOLDER, 2), rec(2, "u", 3, 210, PLACEHOLDER, 1)])
    assert values(t) == {1: "big"} and t.dead == {(0, 2, VALUE_UNKNOWN)}
    # A key change in two batches: the delete memory keeps the moved row's values.
    apply(t, [rec(3, "d", 1, 300, moved_to=2), rec(4, TOMBSTONE, 1, moved_to=2)])
    assert t.memory[-1][2] == {"v": "big"}
    apply(t, [rec(5, "c", 2, 300, PLACEHOLDER, 2, moved_from=1), rec(6, "c", 5, 310, PLACEHOLDER, 1, moved_from=4)])
    assert values(t) == {2: "big"} and (0, 6, MOVED_ROW_UNKNOWN) in t.dead


def test_a_key_change_chain_within_a_batch_and_in_history_mode():
    for mode in ("upsert", "history"):
        t = Target(mode)
        apply(t, [rec(0, "c", 1, 100, "big", 1)])
        apply(t, [rec(1, "d", 1, 200, moved_to=2), rec(2, "c", 2, 200, PLACEHOLDER, 1, moved_from=1),
                  rec(3, "d", 2, 300, moved_to=3), rec(4, "c", 3, 300, PLACEHOLDER, 1, moved_from=2)])
        current = [r for r in t.table() if r.get("_cdc_current", True)]
        assert [(r["id"], r["v"]) for r in current] == [(3, "big")], mode


def test_the_source_drives_redeliveries_and_key_changes():
    s = Source(partitions=2)
    for op in [("insert", 1, "a", 1), ("move", 1, 2, True), ("update", 2, PLACEHOLDER, 3), ("redeliver", 2)]:
        s.run(op)
    assert s.live == {2: {"v": "a", "n": 3}}
    assert [(r.partition, r.offset, r.op) for r in s.log] == [
        (1, 0, "c"), (1, 1, "d"), (1, 2, TOMBSTONE), (0, 0, "c"), (0, 1, "u"),
        (1, 3, "d"), (1, 4, TOMBSTONE), (0, 2, "c"), (0, 3, "u")]


def current(t: Target) -> dict:
    """What the target says the source holds: its rows, those not marked deleted, the current versions."""
    rows = [r for r in t.table() if not r.get("_cdc_deleted") and r.get("_cdc_current", True)]
    return {r["id"]: {"v": r["v"], "n": r["n"]} for r in rows}


def test_soft_delete_takes_a_value_nobody_sent_from_the_row_it_marked_deleted():
    """Where upsert sets the change aside, a soft-deleted row is held, so its old value is kept."""
    for mode, kept in (("upsert", {}), ("soft_delete", {1: {"v": "a", "n": 0}})):
        t = Target(mode)
        apply(t, [rec(0, "c", 1, 100, "a", 1), rec(1, "t", None, 200)])
        apply(t, [rec(2, "u", 1, 300, PLACEHOLDER, 0)])
        assert current(t) == kept and bool(t.dead) == (mode == "upsert")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategies(max_statements=16, max_actions=8))
def test_any_batches_end_with_what_the_source_holds(case):
    source, steps = history(*case)
    unseen = any(s[0] == "unseen" for s in case[0])  # a value no record carries: nobody has it
    for mode in ("upsert", "soft_delete", "history"):
        t = Target(mode)
        for step in steps:
            if step[0] == "apply":
                apply(t, step[1], step[2])
        if not unseen:
            assert not t.dead and current(t) == source.live, (mode, steps)
