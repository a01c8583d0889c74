"""Every commit of a batch checks, as it commits, that the target's last offsets are those the
batch started from (an offsets compare-and-swap: jvm/direct OffsetsCheck). Another writer's
commit or a rollback between the batch's read of the table and its commit makes the commit
lose and leave no file behind; the batch is then applied again from where the table is, or
stops naming the replay that repairs the table. Each test checks that the race it stages
happened (the commit retries counted), on the direct path and on the MERGE's."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from urllib.parse import urlparse

import pytest

from cdc.control.commits import OFFSETS, OFFSETS_BEFORE
from cdc.errors import ApplyError
from cdc.jobs import metrics
from tests.spark.test_merge_semantics import KAFKA_SCHEMA, Harness, before_commit

PATHS = ("direct", "merge")


def harness(scratch, table_name, path: str) -> Harness:
    spark, catalog = scratch
    h = Harness(spark, catalog, f"{table_name}_{path}")
    h.applier.direct_writes = path == "direct"
    return h


def retries(h: Harness) -> float:
    return metrics.COMMIT_RETRIES.labels(h.applier.name)._value.get()


def offsets_chain(h: Harness) -> list[tuple[dict | None, dict]]:
    """Each commit with offsets, oldest first: (the offsets it started from, those it carries)."""
    return [(json.loads(s[OFFSETS_BEFORE]) if OFFSETS_BEFORE in s else None, json.loads(s[OFFSETS]))
            for s in h.summaries() if OFFSETS in s]


def assert_exactly_once(h: Harness) -> None:
    """Each commit starts where the one before it ended, and no commit's offsets go behind."""
    chain = offsets_chain(h)
    assert chain, "no commit carries offsets"
    for (_, previous), (start, offsets) in zip(chain, chain[1:]):
        assert start == previous, f"a commit started from {start}, the table was at {previous}"
        for topic, parts in previous.items():
            assert all(offsets[topic][p] >= o for p, o in parts.items()), chain


def stray_files(h: Harness) -> set[str]:
    """Files under the target's location that no snapshot of it references."""
    table = h.catalog.load_table(h.ident)
    root = Path(urlparse(table.location()).path)
    on_disk = {str(p) for p in (root / "data").rglob("*") if p.is_file() and not p.name.startswith(".")}
    referenced = {urlparse(r["file_path"]).path for kind in ("all_files", "all_delete_files")
                  for r in h.spark.sql(f"SELECT file_path FROM {h.applier.target_ref}.{kind}").collect()}
    return on_disk - referenced


@pytest.mark.parametrize("path", PATHS)
def test_a_commit_that_lost_to_another_writer_is_applied_again_from_where_the_table_is(scratch, table_name, path):
    h = harness(scratch, table_name, path)
    t = h.topic
    t.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.apply()
    t.change("u", {"id": 1, "v": "b", "n": 1}, 200, 210)
    t.change("c", {"id": 2, "v": "c", "n": 2}, 300, 310)
    batch = h.spark.createDataFrame([(*r, []) for r in t.take()], KAFKA_SCHEMA)
    # Another job applies the batch's first record to the same target first.
    other = dataclasses.replace(h.applier, job="other-job")
    before_commit(h, lambda: other(batch.where("offset < 2"), 7))
    lost = retries(h)
    h.applier(batch, 1)
    assert retries(h) > lost, "the other writer's commit did not come between the batch's read and commit"
    assert h.values() == {1: "b", 2: "c"}
    assert [(s and s[t.name], o[t.name]) for s, o in offsets_chain(h)] == [
        (None, {"0": 1}), ({"0": 1}, {"0": 2}), ({"0": 2}, {"0": 3})]
    assert [s["cdc.job"] for s in h.summaries() if OFFSETS in s] == ["test", "other-job", "test"]
    assert_exactly_once(h)
    assert stray_files(h) == set()


@pytest.mark.parametrize("path", PATHS)
def test_a_table_rolled_back_under_the_batch_stops_it_naming_the_replay(scratch, table_name, path):
    h = harness(scratch, table_name, path)
    t = h.topic
    for i in range(3):
        t.change("c", {"id": i, "v": "a", "n": i}, 100 + i, 110 + i)
        h.apply()
    first = h.catalog.load_table(h.ident).snapshots()[0].snapshot_id
    t.change("u", {"id": 0, "v": "b", "n": 0}, 200, 210)
    batch = h.spark.createDataFrame([(*r, []) for r in t.take()], KAFKA_SCHEMA)
    before_commit(h, lambda: h.spark.sql(f"CALL scratch.system.rollback_to_snapshot('{h.ident}', {first})"))
    lost = retries(h)
    with pytest.raises(ApplyError) as e:
        h.applier(batch, 3, start={0: 3})
    assert retries(h) > lost, "the rollback did not come between the batch's read and commit"
    assert "ahead of the table's committed offsets (partition 0: table at 1, checkpoint at 3)" in str(e.value)
    assert f"""cdc replay --table {h.reg.name} --from-offsets '{{"{t.name}": {{"0": 1}}}}'""" in e.value.hint
    assert h.values() == {0: "a"}, "the batch committed on top of the gap"
    assert stray_files(h) == set()
    # Between two batches alike: the next batch stops before it writes anything.
    with pytest.raises(ApplyError, match="rolled back or lost commits"):
        h.applier(batch, 3, start={0: 3})
    assert h.values() == {0: "a"}


def test_a_staged_merge_that_loses_leaves_no_snapshot(scratch, table_name):
    h = harness(scratch, table_name, "merge")
    t = h.topic
    t.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.apply()
    t.change("u", {"id": 1, "v": "b", "n": 1}, 200, 210)
    batch = h.spark.createDataFrame([(*r, []) for r in t.take()], KAFKA_SCHEMA)
    other = dataclasses.replace(h.applier, job="other-job")
    before_commit(h, lambda: other(batch, 7))
    lost = retries(h)
    h.applier(batch, 1)
    assert retries(h) > lost, "the other writer's commit did not come between the batch's read and commit"
    table = h.catalog.load_table(h.ident)
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    ancestry, at = [], table.current_snapshot()
    while at is not None:
        ancestry.append(at.snapshot_id)
        at = by_id.get(at.parent_snapshot_id)
    assert sorted(ancestry) == sorted(by_id), "a staged snapshot stayed in the table's metadata"
    assert [by_id[i].summary.additional_properties["cdc.job"] for i in reversed(ancestry)] == ["test", "other-job"]
    assert stray_files(h) == set()
