"""Which batches look up a key change's unchanged values, and the placeholders of each
column type (pure Python)."""
from __future__ import annotations

from types import SimpleNamespace

from cdc.planning.unchanged import needs_resolution
from cdc.sources.types import UNAVAILABLE, Column, ambiguous_arrays, placeholder_sql, toastable


def stats(moved_creates=0, deletes=0, adds=0, places=0):
    return SimpleNamespace(moved_creates=moved_creates, moved_deletes=deletes, moved_adds=adds, moved_places=places)


def test_a_batch_looks_up_moves_only_for_a_placeholder_or_an_unpaired_delete():
    assert not needs_resolution([stats()])
    assert not needs_resolution([stats(deletes=1, adds=1, places=0)])  # the pair's hashes cancelled
    assert needs_resolution([stats(moved_creates=1, deletes=1, adds=1)])
    assert needs_resolution([stats(deletes=1, places=77)])  # its create comes in a later batch
    assert needs_resolution([stats(deletes=2, adds=2, places=5), stats(places=3)])
    # The two events of a move may sit on different partitions: their hashes cancel across them.
    assert not needs_resolution([stats(deletes=1, places=9), stats(adds=1, places=9)])


def test_placeholders_by_type():
    def col(kind, source_type="", element=None):
        return Column("c", kind, element=element, source_type=source_type)

    assert placeholder_sql(col("string")) == f"'{UNAVAILABLE}'"
    assert placeholder_sql(col("array", "_text", "string")) == f"array('{UNAVAILABLE}')"
    assert placeholder_sql(col("array", "_uuid", "string")) == "array('b68a35a7-17ad-35b3-af2a-ae46edb4545a')"
    assert placeholder_sql(col("array", "_int4", "int")).startswith("array(95, 95, 100, 101, 98")
    assert placeholder_sql(col("array", "_int8", "long")).startswith("array(95L, 95L, 100L")
    for source_type, element in (("_int2", "int"), ("_float4", "float"), ("_float8", "double"), ("_bool", "boolean")):
        assert placeholder_sql(col("array", source_type, element)) is None
    columns = (Column("id", "string"), col("string"), Column("n", "int"), Column("f", "array", element="double",
                                                                                 source_type="_float8"))
    assert [c.name for c in toastable(columns, ("id",))] == ["c"]
    assert [c.name for c in ambiguous_arrays(columns)] == ["f"]
