"""The configuration reference under docs/reference/ and the JSON Schemas under docs/schema/
are what `make docs` generates from the models now, and the repository's own cdc.yaml
files and registrations are valid against those schemas and load through the models."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from cdc.config import load_settings
from cdc.config.loader import ENV_REF
from cdc.config.models import Settings, TableRegistration
from cdc.config.reference import DOCUMENTS, MINIMAL_REGISTRATION, SCHEMA_DIALECT, documents, sections

ROOT = Path(__file__).resolve().parents[2]
GENERATED = documents()
CONFIGS = sorted(ROOT.glob("cdc*.yaml"))
REGISTRATIONS = sorted((ROOT / "tables").glob("*.yaml"))
CDC_SCHEMA, TABLE_SCHEMA = (doc.schema for doc in DOCUMENTS)


def validator(rel: str) -> jsonschema.Draft202012Validator:
    """A validator of the committed schema `rel`."""
    schema = json.loads((ROOT / rel).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(rel: str, instance) -> list[str]:
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '(top level)'}: {e.message}"
                  for e in validator(rel).iter_errors(instance))


@pytest.mark.parametrize("rel", sorted(GENERATED))
def test_generated_file_is_current(rel):
    path = ROOT / rel
    assert path.is_file(), f"{rel} is missing: docs are stale: run `make docs`"
    assert path.read_text(encoding="utf-8") == GENERATED[rel], "docs are stale: run `make docs`"


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: d.schema)
def test_schema_is_a_2020_12_schema_of_the_file(doc):
    schema = json.loads((ROOT / doc.schema).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == SCHEMA_DIALECT and schema["title"] == doc.title
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert "${NAME}" in schema["description"]  # it says where environment references go
    assert (ROOT / doc.reference).read_text(encoding="utf-8").startswith("<!-- Generated from ")
    assert schema["$comment"].startswith("Generated from ")


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: d.model.__name__)
def test_every_key_has_a_description(doc):
    schema = doc.model.model_json_schema(mode="validation")
    keys = [(path, key, model.model_fields[field].description)
            for path, model, rows in sections(doc.model, schema) for key, field, _ in rows]
    assert len(keys) > 10
    assert [f"{path}.{key}".lstrip(".") for path, key, description in keys if not (description or "").strip()] == []


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_is_valid(path, monkeypatch):
    assert problems(CDC_SCHEMA, yaml.safe_load(path.read_text())) == []
    for name in ENV_REF.findall(path.read_text()):
        monkeypatch.setenv(name, "from-the-environment")
    assert isinstance(load_settings(path), Settings)


@pytest.mark.parametrize("text", [p.read_text() for p in REGISTRATIONS] + [MINIMAL_REGISTRATION],
                         ids=[p.name for p in REGISTRATIONS] + ["minimal"])
def test_shipped_registration_is_valid(text):
    data = yaml.safe_load(text)
    assert problems(TABLE_SCHEMA, data) == []
    assert TableRegistration(**data).source.table


def test_the_repository_has_configs_and_registrations():
    assert {p.name for p in CONFIGS} >= {"cdc.yaml", "cdc.docker.yaml"} and REGISTRATIONS


@pytest.mark.parametrize("data, where", [
    ({"kafak": {}}, "(top level)"),
    ({"stack": {"kafka_port": 70000}}, "stack.kafka_port"),
    ({"kafka": {"security": {"protocol": "TLS"}}}, "kafka.security.protocol"),
    ({"sources": {"pg": {"database": "app"}}}, "sources.pg"),
    ({"catalog": {"format_version": 1}}, "catalog.format_version"),
])
def test_config_schema_refuses_what_the_models_refuse(data, where):
    assert any(p.startswith(f"{where}:") for p in problems(CDC_SCHEMA, data))
    with pytest.raises(ValidationError):
        Settings(**data)


def test_config_schema_takes_what_the_models_take():
    """Catalog property values may be YAML booleans and numbers (made strings); secrets are
    strings, and a `${NAME}` reference stands where a string goes."""
    data = {"catalog": {"type": "rest", "uri": "http://127.0.0.1:18181", "token": "${CATALOG_TOKEN}",
                        "properties": {"s3.path-style-access": True, "s3.connect-timeout": 10}},
            "kafka": {"security": {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "cdc",
                                   "password": "${KAFKA_PASSWORD}"}}}
    assert problems(CDC_SCHEMA, data) == []
    assert Settings(**data).catalog.properties == {"s3.path-style-access": "true", "s3.connect-timeout": "10"}


@pytest.mark.parametrize("data, where", [
    ({"name": "shop.orders", "source": {"schema": "shop"}}, "source"),
    ({"name": "shop.orders", "source": {"schema": "shop", "table": "orders"}, "mode": "scd2"}, "mode"),
    ({"name": "shop.orders", "source": {"schema": "shop", "table": "orders"}, "file": "x.yaml"}, "(top level)"),
    ({"name": "shop.orders", "source": {"schema": "shop", "table": "orders"}, "options": {"on_eror": "dlq"}},
     "options"),
])
def test_registration_schema_refuses_what_the_models_refuse(data, where):
    assert any(p.startswith(f"{where}:") for p in problems(TABLE_SCHEMA, data))
    if "file" not in data:  # the loader sets `file` itself; the schema keeps it out of the files
        with pytest.raises(ValidationError):
            TableRegistration(**data)
