"""A batch's plan (jobs/plan.py), decided from its stats with no JVM."""
from __future__ import annotations

import json

from cdc.control import commits
from cdc.jobs.plan import Changes, PartitionStats, Target, Truncate, plan_batch, truncate_steps


def target(mode: str = "upsert", toast: tuple[str, ...] = (), committed: dict | None = None,
           bucket: str | None = None, schemas: dict | None = None, refusal: str | None = None) -> Target:
    return Target("src.shop.t", "topic-id", "job-1", mode, toast, bucket, committed or {}, None, schemas, refusal)


def offsets(plan) -> dict:
    return json.loads(plan.props[commits.OFFSETS])["src.shop.t"]


def test_a_batch_with_nothing_new_commits_only_a_planned_end_ahead_of_the_target():
    assert plan_batch([], target(committed={0: 10}), 7, {0: 10}) is None
    plan = plan_batch([], target(committed={0: 10}), 7, {0: 12, 1: 3})
    assert plan.empty and offsets(plan) == {"0": 12, "1": 3} and plan.props[commits.BATCH_ID] == "7"


def test_offsets_follow_the_records_and_the_planned_end_and_never_go_back():
    stats = [PartitionStats(0, 10, 19, 10, position="0000000005", source_ts_ms=50),
             PartitionStats(1, 0, 4, 5, position="0000000009", source_ts_ms=40)]
    plan = plan_batch(stats, target(committed={0: 10, 2: 7}), 3, {0: 25})
    assert offsets(plan) == {"0": 25, "1": 5, "2": 7}
    assert plan.props[commits.POSITION] == "0000000009" and plan.props[commits.SOURCE_TS] == "50"
    assert plan.steps == (Changes(),) and plan.direct == ()


def test_the_commit_names_the_transaction_of_the_change_at_its_position():
    stats = [PartitionStats(0, 10, 19, 10, position="0000000005", transaction=("t5", 3)),
             PartitionStats(1, 0, 4, 5, position="0000000009", transaction=("t9", 1))]
    plan = plan_batch(stats, target(), 3, {})
    assert commits.parse_transaction(plan.props) == ("t9", 1)


def test_truncates_are_steps_in_position_order():
    truncates = [("0000000007", 70), ("0000000003", 30)]
    assert truncate_steps(sorted(truncates), "upsert") == (Truncate("0000000007", 70), Changes(after="0000000007"))
    assert truncate_steps(sorted(truncates), "history") == (
        Changes(None, "0000000003", final=False), Truncate("0000000003", 30),
        Changes("0000000003", "0000000007", final=False), Truncate("0000000007", 70), Changes(after="0000000007"))


def test_a_small_batch_names_its_buckets_and_a_large_one_does_not():
    small = [PartitionStats(0, 0, 9, 10, buckets=frozenset({3, 1}))]
    assert plan_batch(small, target(bucket="t_bucket"), 1, {}).buckets == ("t_bucket", (1, 3))
    large = [PartitionStats(0, 0, 9999, 10_000, buckets=frozenset({3}))]
    assert plan_batch(large, target(bucket="t_bucket"), 1, {}).buckets is None
    assert plan_batch(small, target(), 1, {}).buckets is None


def test_dead_letters_deletes_and_record_schemas():
    stats = [PartitionStats(0, 0, 9, 10, errors=2, deletes=1), PartitionStats(1, 0, 0, 1, errors=1)]
    plan = plan_batch(stats, target(schemas={5: ["s"]}), 1, {})
    assert plan.dead_letters == 3 and plan.deletes
    assert json.loads(plan.props[commits.RECORD_SCHEMAS]) == {"5": ["s"]}
    assert not plan_batch(stats, target("history"), 1, {}).deletes  # history keeps its own


def test_why_a_batch_cannot_be_written_directly():
    toast = ("body",)
    moved = PartitionStats(0, 0, 1, 2, moved_deletes=1, moved_adds=0, moved_places=5)
    assert plan_batch([moved], target(toast=toast), 1, {}).direct == ("a key change",)
    assert not plan_batch([moved], target(), 1, {}).key_changes  # no column to look up
    lacking = PartitionStats(0, 0, 1, 2, placeholders=1, deletes=1, truncates=(("0000000001", 1),))
    assert plan_batch([lacking], target("soft_delete", toast), 1, {}).direct == (
        "soft_delete mode", "a truncate", "unchanged values to look up")
    assert plan_batch([PartitionStats(0, 0, 1, 2, deletes=1)], target(), 1, {}).direct == ()
    big = [PartitionStats(0, 0, 59_999, 60_000)]
    assert plan_batch(big, target(refusal="a partitioned target"), 1, {}).direct == (
        "a partitioned target", "more than 50,000 records")
    assert plan_batch(big[:1], target(), 1, {}).direct == ("more than 50,000 records",)
