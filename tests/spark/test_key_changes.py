"""Key changes whose create carries unchanged TOASTed values as placeholders, and
placeholders nobody can fill: every mode on both sinks, through the real apply step, read
back by the second reader (pyiceberg, delta-rs). `make test` runs the Iceberg upsert variant;
the others are `long` (`make test-long`): `make test` meets key changes with unchanged
values in every mode on both sinks through the differential test."""
from __future__ import annotations

import pytest

from cdc.planning.unchanged import MOVED_ROW_UNKNOWN, VALUE_UNKNOWN
from cdc.sources.types import Column
from tests.spark.test_merge_semantics import Harness

PLACEHOLDER = "__debezium_unavailable_value"


def big(i: int) -> str:
    return f"value {i} " + "x" * 100


@pytest.fixture(params=[pytest.param((sink, mode), id=f"{sink}-{mode}", marks=[pytest.mark.long] * (sink == "delta" or mode != "upsert"))
                        for sink in ("iceberg", "delta") for mode in ("upsert", "history", "soft_delete")])
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


def test_key_changes_keep_unchanged_values_and_unknown_ones_are_set_aside(h):
    """One workload per mode and sink: a key change whose old row is in the target, in the
    same batch, in a chain within a batch and across batches, followed by an update; a
    batch that ends between a key change's delete and its create; REPLICA IDENTITY FULL;
    placeholders nobody can fill (dead letters, never a null); a replay."""
    for i in (1, 10, 20, 60, 70, 80):
        h.topic.change("c", {"id": i, "v": big(i), "n": i}, 100, 100 + i)
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
    # REPLICA IDENTITY FULL: Debezium sends the values itself.
    h.topic.key_change({"id": 70}, {"id": 71, "v": big(70), "n": 70}, 600, 620, before={"id": 70, "v": big(70), "n": 70})
    # Placeholders nobody can fill: a move from a key never seen, a row the target does not hold.
    h.topic.key_change({"id": 40}, {"id": 41, "v": PLACEHOLDER, "n": 4}, 600, 630)
    unknown = [h.topic.records[-1][4], h.topic.change("u", {"id": 50, "v": PLACEHOLDER, "n": 5}, 600, 640)[4]]
    h.topic.change("u", {"id": 80, "v": PLACEHOLDER, "n": 81}, 600, 650)  # held: keeps its value
    # The batch ends between a key change's delete and its create.
    h.topic.key_change({"id": 60}, {"id": 61, "v": PLACEHOLDER, "n": 60}, 700, 710)
    create = h.topic.records.pop()
    second = h.apply()
    assert 60 not in current(h)
    h.topic.records.append(create)
    # A chain across batches; the unknown row stays unknown.
    h.topic.key_change({"id": 2}, {"id": 3, "v": PLACEHOLDER, "n": 1}, 800, 810)
    unknown.append(h.topic.change("u", {"id": 41, "v": PLACEHOLDER, "n": 6}, 800, 820)[4])
    h.apply()
    want = {3: (big(1), 1), 31: (big(31), 31), 12: (big(10), 10), 21: (big(20), 99), 61: (big(60), 60),
            71: (big(70), 70), 80: (big(80), 81)}
    assert current(h) == want
    letters = sorted((r["offset"], r["error_class"]) for r in h.dead_letters())
    assert letters == list(zip(unknown, [MOVED_ROW_UNKNOWN, VALUE_UNKNOWN, VALUE_UNKNOWN]))
    assert all("TOASTed" in r["error_message"] for r in h.dead_letters())
    h.applier.skip_committed = False  # a replay of the second batch changes nothing
    h.apply(second)
    assert current(h) == want
    assert sorted((r["offset"], r["error_class"]) for r in h.dead_letters()) == letters


ARRAYS = (Column("id", "int", nullable=False), Column("v", "string"), Column("n", "int"),
          Column("tags", "array", element="string", source_type="_text"),
          Column("nums", "array", element="int", source_type="_int4"),
          Column("bigs", "array", element="long", source_type="_int8"),
          Column("ids", "array", element="string", source_type="_uuid"))
ARRAY_PLACEHOLDERS = {"tags": [PLACEHOLDER], "nums": [ord(ch) for ch in PLACEHOLDER],
                      "bigs": [ord(ch) for ch in PLACEHOLDER], "ids": ["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]}


@pytest.mark.parametrize("sink", ["iceberg", pytest.param("delta", marks=pytest.mark.long)])
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
