"""Key changes whose create carries unchanged TOASTed values as placeholders, and
placeholders nobody can fill: every mode on both sinks, through the real apply step, read
back by the second reader (pyiceberg, delta-rs)."""
from __future__ import annotations

import pytest

from cdc.planning.unchanged import MOVED_ROW_UNKNOWN, VALUE_UNKNOWN
from cdc.sources.types import Column
from tests.spark.test_merge_semantics import Harness

PLACEHOLDER = "__debezium_unavailable_value"


def big(i: int) -> str:
    return f"value {i} " + "x" * 100


@pytest.fixture(params=[(sink, mode) for sink in ("iceberg", "delta") for mode in ("upsert", "history", "soft_delete")],
                ids=lambda p: "-".join(p))
def h(request, scratch, table_name, tmp_path):
    sink, mode = request.param
    return Harness(*scratch, table_name, sink=sink, delta_root=tmp_path, mode=mode)


def current(h) -> dict[int, tuple]:
    """Each key's current row as (v, n): the row (upsert), the row not marked deleted
    (soft_delete), the current version (history)."""
    rows = h._read()
    if h.reg.mode == "history":
        rows = [r for r in rows if r["_cdc_current"]]
    elif h.reg.mode == "soft_delete":
        rows = [r for r in rows if not r["_cdc_deleted"]]
    assert len({r["id"] for r in rows}) == len(rows)
    return {r["id"]: (r["v"], None if r["n"] is None else int(r["n"])) for r in rows}


def test_a_key_change_keeps_the_old_rows_unchanged_values(h):
    h.topic.change("c", {"id": 1, "v": big(1), "n": 1}, 100, 110)
    h.topic.change("c", {"id": 10, "v": big(10), "n": 10}, 100, 120)
    h.topic.change("c", {"id": 20, "v": big(20), "n": 20}, 100, 130)
    h.apply()
    # The old row in the target from an earlier batch.
    h.topic.key_change({"id": 1}, {"id": 2, "v": PLACEHOLDER, "n": 1}, 200, 210)
    # The old row created and updated earlier in the same batch.
    h.topic.change("c", {"id": 30, "v": big(30), "n": 30}, 200, 220)
    h.topic.change("u", {"id": 30, "v": big(31), "n": 31}, 200, 230)
    h.topic.key_change({"id": 30}, {"id": 31, "v": PLACEHOLDER, "n": 31}, 200, 240)
    # A chain within one batch.
    h.topic.key_change({"id": 10}, {"id": 11, "v": PLACEHOLDER, "n": 10}, 300, 310)
    h.topic.key_change({"id": 11}, {"id": 12, "v": PLACEHOLDER, "n": 10}, 400, 410)
    # A key change, then an update of another column.
    h.topic.key_change({"id": 20}, {"id": 21, "v": PLACEHOLDER, "n": 20}, 500, 510)
    h.topic.change("u", {"id": 21, "v": PLACEHOLDER, "n": 99}, 600, 610)
    second = h.apply()
    # A chain across batches.
    h.topic.key_change({"id": 2}, {"id": 3, "v": PLACEHOLDER, "n": 1}, 700, 710)
    h.apply()
    want = {3: (big(1), 1), 31: (big(31), 31), 12: (big(10), 10), 21: (big(20), 99)}
    assert current(h) == want
    assert h.dead_letters() == []
    h.applier.skip_committed = False  # a replay of the second batch changes nothing
    h.apply(second)
    assert current(h) == want and h.dead_letters() == []


def test_a_batch_that_ends_between_a_key_changes_delete_and_its_create(h):
    h.topic.change("c", {"id": 1, "v": big(1), "n": 1}, 100, 110)
    h.apply()
    h.topic.key_change({"id": 1}, {"id": 2, "v": PLACEHOLDER, "n": 1}, 200, 210)
    delete, tombstone, create = h.topic.take()
    h.apply([delete, tombstone])  # the old row leaves the target; its values wait in the delete memory
    assert current(h) == {}
    h.apply([create])
    assert current(h) == {2: (big(1), 1)}
    assert h.dead_letters() == []


def test_replica_identity_full_sends_the_values_itself(h):
    h.topic.change("c", {"id": 1, "v": big(1), "n": 1}, 100, 110)
    h.apply()
    h.topic.key_change({"id": 1}, {"id": 2, "v": big(1), "n": 1}, 200, 210, before={"id": 1, "v": big(1), "n": 1})
    h.apply()
    assert current(h) == {2: (big(1), 1)} and h.dead_letters() == []


def test_a_value_nobody_has_goes_to_the_dead_letters_never_a_null(h):
    h.topic.change("c", {"id": 1, "v": big(1), "n": 1}, 100, 110)
    h.apply()
    h.topic.key_change({"id": 40}, {"id": 41, "v": PLACEHOLDER, "n": 4}, 200, 210)  # 40 never seen
    h.topic.change("u", {"id": 50, "v": PLACEHOLDER, "n": 5}, 200, 220)  # a row the target does not hold
    h.topic.change("u", {"id": 1, "v": PLACEHOLDER, "n": 2}, 200, 230)  # held: keeps its value
    h.apply()
    h.topic.change("u", {"id": 41, "v": PLACEHOLDER, "n": 6}, 300, 310)  # still unknown in a later batch
    h.apply()
    assert current(h) == {1: (big(1), 2)}
    letters = sorted((r["offset"], r["error_class"]) for r in h.dead_letters())
    assert letters == [(3, MOVED_ROW_UNKNOWN), (4, VALUE_UNKNOWN), (6, VALUE_UNKNOWN)]
    assert all("TOASTed" in r["error_message"] for r in h.dead_letters())


ARRAYS = (Column("id", "int", nullable=False), Column("v", "string"), Column("n", "int"),
          Column("tags", "array", element="string", source_type="_text"),
          Column("nums", "array", element="int", source_type="_int4"),
          Column("bigs", "array", element="long", source_type="_int8"),
          Column("ids", "array", element="string", source_type="_uuid"))
ARRAY_PLACEHOLDERS = {"tags": [PLACEHOLDER], "nums": [ord(ch) for ch in PLACEHOLDER],
                      "bigs": [ord(ch) for ch in PLACEHOLDER], "ids": ["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]}


@pytest.mark.parametrize("sink", ["iceberg", "delta"])
def test_unchanged_toasted_arrays_keep_their_values(scratch, table_name, tmp_path, sink):
    h = Harness(*scratch, table_name, sink=sink, delta_root=tmp_path, columns=ARRAYS)
    row = {"id": 1, "v": "a", "n": 1, "tags": ["x", None], "nums": [1, 2], "bigs": [2 ** 40],
           "ids": ["123e4567-e89b-12d3-a456-426614174000"]}
    h.topic.change("c", row, 100, 110)
    h.apply()
    h.topic.change("u", {**row, "n": 2, **ARRAY_PLACEHOLDERS}, 200, 210)
    h.topic.key_change({"id": 1}, {**row, "id": 2, "n": 3, **ARRAY_PLACEHOLDERS}, 300, 310)
    h.apply()
    (got,) = h._read()
    assert {k: got[k] for k in row} == {**row, "id": 2, "n": 3}
