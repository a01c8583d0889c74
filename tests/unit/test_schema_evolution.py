import json

import pytest

from cdc.errors import ApplyError
from cdc.decoding.envelope import row_fields
from cdc.planning.schema import evolve
from cdc.sources.types import Column, debezium_column


def src(pg_type, length=0, scale=0):
    return {"__debezium.source.column.type": pg_type, "__debezium.source.column.length": str(length),
            "__debezium.source.column.scale": str(scale)}


CURRENT = (Column("id", "int", False, source_type="integer"), Column("a", "int", source_type="integer"),
           Column("f", "float"), Column("d", "decimal", True, 6, 2), Column("v", "string"))


def test_event_schemas_name_the_kind_of_a_column():
    assert debezium_column("x", "int64", None, src("INT8", 19), "t").kind == "long"
    assert debezium_column("x", "string", None, src("NUMERIC", 10, 2), "t").spark_type == "DECIMAL(10,2)"
    assert debezium_column("x", "string", None, src("NUMERIC", 131089), "t").spark_type == "DECIMAL(38,18)"
    assert debezium_column("x", "int64", "io.debezium.time.Timestamp", src("TIMESTAMP", 26, 3), "t").kind == \
        "timestamp_ms"
    assert debezium_column("x", "array", None, src("_TEXT"), "t").spark_type == "ARRAY<STRING>"
    assert debezium_column("x", "string", "io.debezium.data.Enum", src("MOOD"), "t").kind == "string"
    assert debezium_column("x", "int32", "io.debezium.time.Date", None, "t").kind == "date"  # no source type
    assert debezium_column("x", "int32", None, src("INT4"), "t").nullable


def test_new_columns_are_added_and_safe_widenings_applied():
    seen = [Column("a", "long", source_type="bigint"), Column("f", "double"), Column("d", "decimal", True, 12, 2),
            Column("v", "string", source_type="character varying"), Column("extra", "string")]
    e = evolve("s.t", CURRENT, seen, ("id",))
    assert [c.name for c in e.added] == ["extra"] and [c.name for c in e.widened] == ["a", "f", "d"]
    assert [(c.name, c.spark_type) for c in e.columns] == [
        ("id", "INT"), ("a", "BIGINT"), ("f", "DOUBLE"), ("d", "DECIMAL(12,2)"), ("v", "STRING"), ("extra", "STRING")]
    assert not evolve("s.t", e.columns, seen, ("id",)).changed  # applied once, nothing more
    assert not evolve("s.t", CURRENT, [], ("id",)).changed  # a dropped source column stays


def test_a_narrower_form_of_a_column_in_older_records_fits_the_target_as_it_is():
    """A batch holding records from before a widening (a replay): the target's wider column
    holds their values; the newest records' schema alone is judged."""
    older = [Column("d", "decimal", True, 4, 2), Column("a", "int", source_type="integer")]
    widened = evolve("s.t", CURRENT, [Column("a", "long", source_type="bigint")], ("id",)).columns
    assert not evolve("s.t", widened, [Column("a", "long", source_type="bigint")], ("id",), older=older).changed
    with pytest.raises(ApplyError, match="column 'a' changed type"):
        evolve("s.t", widened, [Column("a", "int", source_type="integer")], ("id",))  # the newest: a narrowing


@pytest.mark.parametrize("new", [Column("a", "string", source_type="text"), Column("d", "decimal", True, 4, 2),
                                 Column("d", "decimal", True, 8, 3), Column("f", "int"),
                                 Column("id", "long", False, source_type="bigint")])
def test_other_type_changes_stop_the_job_naming_column_and_types(new):
    with pytest.raises(ApplyError, match=rf"(?s)table s.t: column '{new.name}' changed type at the source.*"
                                         rf"not a safe widening.*cdc bootstrap --table s.t"):
        evolve("s.t", CURRENT, [new], ("id",))


def test_row_fields_are_read_from_a_json_converter_message():
    row = [{"type": "int64", "optional": False, "field": "id", "parameters": src("INT8", 19)},
           {"type": "string", "optional": True, "name": "io.debezium.data.Json", "field": "doc"}]
    message = {"schema": {"type": "struct", "fields": [
        {"type": "struct", "fields": row, "field": "before"}, {"type": "struct", "fields": row, "field": "after"},
        {"type": "struct", "fields": [], "field": "source"}]}, "payload": {"op": "c"}}
    fields = row_fields(json.dumps(message).encode())
    assert [f["field"] for f in fields] == ["id", "doc"]
    assert fields[0]["parameters"]["__debezium.source.column.type"] == "INT8" and fields[1]["parameters"] is None
    assert fields[1]["name"] == "io.debezium.data.Json"
    for bad in (b"\x00\x01", b"[]", b'{"schema": 1}', b'{"payload": {}}', b'{"schema": {"fields": [3]}}'):
        assert row_fields(bad) == []
