"""Avro pieces that need no Spark: the row fields of a Debezium envelope's writer schema
(for schema evolution), the settings and the connector's converter config."""
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from cdc.config.models import Settings, SourceSettings, TableRegistration
from cdc.decoding.avro import row_fields
from cdc.register.connector import connector_config
from cdc.sources.types import debezium_column

ROOT = Path(__file__).resolve().parents[2]

# The shape Debezium's envelope takes through a Connect Avro converter (Confluent's AvroData):
# the row record defined at `before`, named at `after`; Connect types and parameters as attributes.
ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "src.s.t", "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": {"type": "long", "connect.parameters": {"__debezium.source.column.type": "INT8"}}},
        {"name": "small", "type": ["null", {"type": "int", "connect.type": "int16"}], "default": None},
        {"name": "amount", "type": ["null", {"type": "string", "connect.parameters": {
            "__debezium.source.column.type": "NUMERIC", "__debezium.source.column.length": "12",
            "__debezium.source.column.scale": "2"}}], "default": None},
        {"name": "born", "type": ["null", {"type": "int", "connect.version": 1,
                                           "connect.name": "io.debezium.time.Date"}], "default": None},
        {"name": "note", "type": ["null", "string"], "default": None},
    ], "connect.name": "src.s.t.Value"}], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "op", "type": "string"},
]}


def test_row_fields_read_the_writer_schema_like_the_json_converter_schema():
    fields = row_fields(json.dumps(ENVELOPE))
    assert [(f["field"], f["type"], f["name"]) for f in fields] == [
        ("id", "int64", None), ("small", "int16", None), ("amount", "string", None),
        ("born", "int32", "io.debezium.time.Date"), ("note", "string", None)]
    amount = debezium_column("amount", fields[2]["type"], fields[2]["name"], fields[2]["parameters"], "t")
    assert (amount.kind, amount.precision, amount.scale) == ("decimal", 12, 2)
    assert debezium_column("born", "int32", "io.debezium.time.Date", {}, "t").kind == "date"
    assert row_fields(json.dumps({"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]})) == []


def test_avro_sources_need_a_registry_and_get_the_converter_template():
    src = SourceSettings(database="app", user="cdc", password="x", format="avro")
    with pytest.raises(ValidationError, match="needs a schema registry"):
        Settings(root=ROOT, sources={"pg": src})
    settings = Settings(root=ROOT, sources={"pg": src}, stack={"registry_port": 18099})
    assert settings.registry_url == "http://127.0.0.1:18099/apis/ccompat/v7"
    reg = TableRegistration(name="s.t", source={"name": "pg", "schema": "s", "table": "t"})
    config = connector_config(settings, "pg", [reg], "ref")
    assert config["value.converter"] == config["key.converter"] == "io.apicurio.registry.utils.converter.AvroConverter"
    assert config["value.converter.apicurio.registry.url"] == "http://127.0.0.1:18099/apis/registry/v2"
    assert "value.converter.schemas.enable" not in config and "value.converter.decimal.format" not in config
    confluent = Settings(root=ROOT, sources={"pg": src}, schema_registry={"url": "http://sr:8081/"})
    assert confluent.registry_url == confluent.registry_converter_url == "http://sr:8081"
