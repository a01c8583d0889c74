"""The catalog section of cdc.yaml (sqlite and rest) and what each engine gets from it:
Spark's catalog properties and pyiceberg's load_catalog properties (no JVM, no server)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdc.config import load_settings
from cdc.errors import ConfigError
from cdc.sinks.catalog import local_dirs, pyiceberg_properties, spark_catalog_conf

REST = """
catalog:
  name: lake
  type: rest
  uri: http://127.0.0.1:18181/
  warehouse: s3://warehouse/
  credential: ${CDC_TEST_CREDENTIAL}
  token: ${CDC_TEST_TOKEN}
  properties:
    io-impl: org.apache.iceberg.aws.s3.S3FileIO
    s3.endpoint: http://127.0.0.1:19000
    s3.path-style-access: true
    s3.access-key-id: cdc
    s3.secret-access-key: ${CDC_TEST_S3_SECRET}
    client.region: us-east-1
    rest.client.retries: 3
"""

SECRETS = {"CDC_TEST_CREDENTIAL": "client:cl13nt-s3cret", "CDC_TEST_TOKEN": "t0ken-value",
           "CDC_TEST_S3_SECRET": "minio-s3cret"}


@pytest.fixture
def config(tmp_path, monkeypatch):
    """Write cdc.yaml with `body`; return its path."""
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)

    def write(body: str) -> Path:
        path = tmp_path / "cdc.yaml"
        path.write_text(body)
        return path
    return write


def test_rest_catalog_is_read_with_its_properties_and_secrets(config):
    s = load_settings(config(REST))
    c = s.catalog
    assert (c.type, c.uri, c.warehouse) == ("rest", "http://127.0.0.1:18181", "s3://warehouse/")
    assert c.credential.get_secret_value() == SECRETS["CDC_TEST_CREDENTIAL"]
    assert c.token.get_secret_value() == SECRETS["CDC_TEST_TOKEN"]
    # YAML scalars become the strings Iceberg reads.
    assert c.properties["s3.path-style-access"] == "true" and c.properties["rest.client.retries"] == "3"
    for shown in (repr(s), str(s), repr(c)):
        for secret in SECRETS.values():
            assert secret not in shown
    assert "s3.endpoint" in repr(c) and "http://127.0.0.1:19000" in repr(c)  # the rest stays visible


def test_rest_catalog_spark_conf(config):
    conf = spark_catalog_conf(load_settings(config(REST)))
    p = "spark.sql.catalog.lake"
    assert conf == {
        p: "org.apache.iceberg.spark.SparkCatalog",
        f"{p}.type": "rest",
        f"{p}.cache-enabled": "false",
        f"{p}.uri": "http://127.0.0.1:18181",
        f"{p}.warehouse": "s3://warehouse/",
        f"{p}.credential": SECRETS["CDC_TEST_CREDENTIAL"],
        f"{p}.token": SECRETS["CDC_TEST_TOKEN"],
        f"{p}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"{p}.s3.endpoint": "http://127.0.0.1:19000",
        f"{p}.s3.path-style-access": "true",
        f"{p}.s3.access-key-id": "cdc",
        f"{p}.s3.secret-access-key": SECRETS["CDC_TEST_S3_SECRET"],
        f"{p}.client.region": "us-east-1",
        f"{p}.rest.client.retries": "3",
        "spark.redaction.regex": "(?i)secret|password|token|access[.]?key|credential",
    }
    # Spark's UI and event logs redact every secret key cdc sets.
    redact = re.compile(conf["spark.redaction.regex"])
    assert all(redact.search(k) for k in (f"{p}.credential", f"{p}.token", f"{p}.s3.secret-access-key"))


def test_rest_catalog_pyiceberg_properties(config):
    s = load_settings(config(REST))
    props = pyiceberg_properties(s)
    assert props == {
        "name": "lake", "type": "rest", "uri": "http://127.0.0.1:18181", "warehouse": "s3://warehouse/",
        "credential": SECRETS["CDC_TEST_CREDENTIAL"], "token": SECRETS["CDC_TEST_TOKEN"],
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "s3.endpoint": "http://127.0.0.1:19000",
        "s3.path-style-access": "true", "s3.access-key-id": "cdc",
        "s3.secret-access-key": SECRETS["CDC_TEST_S3_SECRET"], "client.region": "us-east-1",
        "rest.client.retries": "3",
    }
    assert local_dirs(s) == []  # nothing of a REST catalog lives on this machine


def test_minimal_rest_catalog_sends_no_warehouse(config):
    s = load_settings(config("catalog: {type: rest, uri: 'https://catalog.example.com/api/catalog'}\n"))
    assert pyiceberg_properties(s) == {"name": "lake", "type": "rest",
                                       "uri": "https://catalog.example.com/api/catalog"}
    conf = spark_catalog_conf(s)
    assert "spark.sql.catalog.lake.warehouse" not in conf and "spark.sql.catalog.lake.credential" not in conf
    assert conf["spark.sql.catalog.lake.uri"] == "https://catalog.example.com/api/catalog"


def test_rest_warehouse_is_passed_as_given(config):
    """A REST catalog interprets its warehouse (a URI, a path, or a warehouse's name)."""
    for warehouse in ("file:///data/lake", "/data/lake", "analytics"):
        s = load_settings(config(f"catalog: {{type: rest, uri: 'http://c:8181', warehouse: '{warehouse}'}}\n"))
        assert pyiceberg_properties(s)["warehouse"] == warehouse
        assert spark_catalog_conf(s)["spark.sql.catalog.lake.warehouse"] == warehouse


def test_sqlite_catalog_is_unchanged(config, tmp_path):
    s = load_settings(config("catalog: {name: lake}\n"))
    c = s.catalog
    assert (c.type, c.path, c.warehouse) == ("sqlite", Path(".state/iceberg/catalog.db"),
                                             Path(".state/iceberg/warehouse"))
    assert pyiceberg_properties(s) == {"name": "lake", "type": "sql",
                                       "uri": f"sqlite:///{tmp_path}/.state/iceberg/catalog.db",
                                       "warehouse": (tmp_path / ".state/iceberg/warehouse").as_uri()}
    assert spark_catalog_conf(s) == {
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.type": "jdbc",
        "spark.sql.catalog.lake.uri": f"jdbc:sqlite:{tmp_path}/.state/iceberg/catalog.db",
        "spark.sql.catalog.lake.jdbc.schema-version": "V1",
        "spark.sql.catalog.lake.warehouse": (tmp_path / ".state/iceberg/warehouse").as_uri(),
        "spark.sql.catalog.lake.cache-enabled": "false",
    }
    assert local_dirs(s) == [tmp_path / ".state/iceberg", tmp_path / ".state/iceberg/warehouse"]
    s = load_settings(config("catalog: {path: cat.db, warehouse: wh}\n"))
    assert s.catalog.warehouse == Path("wh") and pyiceberg_properties(s)["warehouse"] == (tmp_path / "wh").as_uri()


@pytest.mark.parametrize("body, error", [
    ("catalog: {type: rest}", r"catalog: uri is required for type rest"),
    ("catalog: {type: rest, uri: 'catalog:8181'}",
     r"catalog.uri: uri 'catalog:8181' is not an http\(s\) URL.*\(current value: 'catalog:8181'\)"),
    ("catalog: {type: rest, uri: 'http://c', path: x.db}", r"catalog: path 'x.db': a rest catalog has no SQLite"),
    ("catalog: {type: rest, uri: 'http://c', warehouse: ' '}", r"catalog: warehouse is empty"),
    ("catalog: {type: hive}", r"catalog.type: Input should be 'sqlite' or 'rest' \(current value: 'hive'\)"),
    ("catalog: {uri: 'http://c'}", r"catalog: uri: only for type rest"),
    ("catalog: {properties: {a: b}, token: t}", r"catalog: token, properties: only for type rest"),
    ("catalog: {warehouse: 's3://bucket/'}", r"warehouse 's3://bucket/': a sqlite catalog's warehouse is a local"),
    ("catalog: {type: rest, uri: 'http://c', properties: {uri: 'http://d'}}",
     r"catalog.properties: properties\['uri'\]: set catalog.uri instead"),
    ("catalog: {type: rest, uri: 'http://c', properties: {warehouse: x}}",
     r"properties\['warehouse'\]: set catalog.warehouse instead"),
    ("catalog: {type: rest, uri: 'http://c', properties: {catalog-impl: x}}",
     r"properties\['catalog-impl'\]: cdc chooses the catalog by catalog.type"),
    ("catalog: {type: rest, uri: 'http://c', properties: {s3.endpoint: [a, b]}}",
     r"properties\['s3.endpoint'\]: the value \['a', 'b'\] must be a string"),
    ("catalog: {type: rest, uri: 'http://c', properties: [a]}", r"properties must be a mapping"),
    ("catalog: {type: rest, uri: 'http://c', unknown: 1}", r"unknown key 'catalog.unknown'"),
], ids=["rest-without-uri", "uri-not-http", "rest-with-path", "empty-warehouse", "unknown-type", "sqlite-with-uri",
        "sqlite-with-rest-keys", "sqlite-on-s3", "property-uri", "property-warehouse", "property-impl",
        "property-list", "properties-list", "unknown-key"])
def test_bad_catalogs_are_refused_by_key_and_value(config, body, error):
    with pytest.raises(ConfigError, match=error):
        load_settings(config(body + "\n"))


@pytest.mark.parametrize("body", [
    "catalog: {type: rest, uri: 'http://c', credential: 12345678}",
    "catalog: {type: rest, uri: 'http://c', token: [s3cr3t-token]}",
    "catalog: {type: rest, uri: 'http://c', properties: {s3.secret-access-key: {v: s3cr3t-token}}}",
], ids=["credential", "token", "secret-property"])
def test_errors_never_echo_secrets(config, body):
    with pytest.raises(ConfigError) as e:
        load_settings(config(body + "\n"))
    assert "12345678" not in str(e.value) and "s3cr3t-token" not in str(e.value)
    assert "catalog." in str(e.value)  # the key is named all the same


def test_docker_config_points_at_the_compose_rest_catalog_and_minio(monkeypatch):
    for k, v in {"CDC_PG_PASSWORD": "pg", "CDC_MINIO_USER": "cdc", "CDC_MINIO_PASSWORD": "minio-s3cret"}.items():
        monkeypatch.setenv(k, v)
    s = load_settings(Path(__file__).resolve().parents[2] / "cdc.docker.yaml")
    props = pyiceberg_properties(s)
    assert (props["type"], props["uri"], props["warehouse"]) == ("rest", "http://127.0.0.1:18181", "s3://warehouse/")
    assert props["io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert (props["s3.access-key-id"], props["s3.secret-access-key"]) == ("cdc", "minio-s3cret")
    assert spark_catalog_conf(s)["spark.sql.catalog.lake.s3.endpoint"] == "http://127.0.0.1:19000"
    assert "minio-s3cret" not in repr(s)
