"""`catalog.type: rest`: Iceberg's own REST catalog test server (RESTCatalogServer, the
server of the apache/iceberg-rest-fixture image, from Maven Central jars in
.cache/jars/rest) on a free loopback port, with its warehouse in a temp directory
(file://) or in an S3 bucket (moto's S3 server, S3FileIO). Spark (through
`spark_catalog_conf`) and pyiceberg (through `pyiceberg_properties`) open it under one
name and see each other's commits; then a table is replicated end to end into the S3
warehouse (`cdc register`, `cdc run --available-now` as its own driver process) and
compared with PostgreSQL row for row."""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
import secrets
import signal
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pytest
import requests
import yaml
from pyiceberg.catalog import load_catalog as pyiceberg_load

from cdc.config import load_settings
from cdc.config.models import TableRegistration
from cdc.sinks.catalog import load_catalog, pyiceberg_properties, spark_catalog_conf
from cdc.sinks.iceberg import ensure_table
from cdc.sources.types import Column
from cdc.stack.manager import Stack
from cdc.stack.process import java
from tests.conftest import _cleanup, _drop_leftovers, free_port, postgres_env, start_driver, tail, wait_or_kill
from tests.eventually import eventually

SERVER_HEAP = "256m"
READY_S = 90
RUN_S = 420  # the most one `cdc run --available-now` may take before the test fails
PREFIX = "itr_"  # this module's sources; not `it_`, whose leftovers other runs drop
BUCKET = "warehouse"
S3_SECRET_ENV = "CDC_IT_S3_SECRET"  # the S3 secret reaches cdc.yaml as ${CDC_IT_S3_SECRET}


@dataclass
class RestServer:
    name: str  # the catalog's name in cdc.yaml (each server its own: the run's SparkSession keeps catalogs)
    uri: str
    warehouse: str  # a URI: file:///... or s3://warehouse/
    properties: dict = field(default_factory=dict)  # cdc.yaml's catalog.properties for it
    data_files: Callable[[], list[str]] = list  # every Parquet file in the warehouse

    def catalog_section(self) -> dict:
        """cdc.yaml's `catalog:` for this server (secrets as ${ENV} references)."""
        section = {"name": self.name, "type": "rest", "uri": self.uri, "warehouse": self.warehouse}
        return {**section, "properties": self.properties} if self.properties else section

    def holds(self, location: str) -> bool:
        """Whether a table location is under this server's warehouse."""
        prefix = self.warehouse.removeprefix("file://")
        return location.removeprefix("file:").removeprefix("//").startswith(prefix)


@contextmanager
def rest_catalog_server(settings, work: Path, warehouse: str, extra_env: dict):
    """RESTCatalogServer in front of a JDBC catalog on a SQLite file, heap capped; ready
    once GET /v1/config answers; its process group stopped on exit. Yields its URI."""
    jars = settings.path(settings.jars_dir) / "rest"
    assert any(jars.glob("iceberg-open-api-*-test-fixtures.jar")), \
        f"no REST catalog server in {jars}: run `make setup` (jvm/rest/pom.xml)"
    port = free_port()
    # The server reads its catalog properties from CATALOG_* variables (CATALOG_REST_PORT
    # is rest.port, CATALOG_IO__IMPL io-impl); none of the caller's may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "AWS_"))}
    env.update(CATALOG_REST_PORT=str(port), CATALOG_WAREHOUSE=warehouse,
               CATALOG_URI=f"jdbc:sqlite:{work / 'catalog.db'}", **extra_env)
    log = work / "rest-catalog.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([java(), f"-Xmx{SERVER_HEAP}", "-XX:+UseSerialGC", "-cp", f"{jars}/*",
                                 "org.apache.iceberg.rest.RESTCatalogServer"],
                                env=env, cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            try:
                r = requests.get(f"{uri}/v1/config", timeout=2)
            except requests.RequestException:
                return False  # not listening yet
            return r.status_code == 200 and "overrides" in r.json()

        eventually(ready, "the REST catalog server ready", READY_S, 0.3, alive=lambda: proc.poll() is None,
                   detail=lambda: tail(log))
        yield uri
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def file_catalog(settings, tmp_path_factory):
    """A REST catalog whose warehouse is a local directory (file://)."""
    work = tmp_path_factory.mktemp("rest-file")
    warehouse = work / "warehouse"
    warehouse.mkdir()
    with rest_catalog_server(settings, work, warehouse.as_uri(), {}) as uri:
        yield RestServer("rest_file", uri, warehouse.as_uri(),
                         data_files=lambda: [str(p) for p in warehouse.rglob("*.parquet")])


@pytest.fixture(scope="module")
def s3_catalog(settings, tmp_path_factory):
    """A REST catalog whose warehouse is an S3 bucket: moto's S3 server on loopback, S3FileIO
    in the server and in Spark, pyarrow's S3 filesystem in pyiceberg; cdc.yaml's catalog
    properties as cdc.docker.yaml has them for MinIO, the secret from the environment."""
    import boto3
    from moto.server import ThreadedMotoServer

    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    s3.start()
    endpoint = "http://{}:{}".format(*s3.get_host_and_port())
    key_id, secret = "cdc-it", f"s3-{secrets.token_hex(8)}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key_id, aws_secret_access_key=secret,
                          region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    os.environ[S3_SECRET_ENV] = secret
    try:
        with rest_catalog_server(settings, tmp_path_factory.mktemp("rest-s3"), f"s3://{BUCKET}/", {
                "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO", "CATALOG_S3_ENDPOINT": endpoint,
                "CATALOG_S3_PATH__STYLE__ACCESS": "true", "AWS_ACCESS_KEY_ID": key_id,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "us-east-1"}) as uri:
            yield RestServer("rest_s3", uri, f"s3://{BUCKET}/", properties={
                "io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "s3.endpoint": endpoint,
                "s3.path-style-access": "true", "s3.access-key-id": key_id,
                "s3.secret-access-key": "${" + S3_SECRET_ENV + "}", "client.region": "us-east-1"},
                data_files=lambda: [f"s3://{BUCKET}/{o['Key']}" for page in
                                    client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
                                    for o in page.get("Contents", []) if o["Key"].endswith(".parquet")])
    finally:
        os.environ.pop(S3_SECRET_ENV, None)
        s3.stop()


def rest_settings(server: RestServer, work: Path):
    config = work / "cdc.yaml"
    config.write_text(yaml.safe_dump({"catalog": server.catalog_section()}))
    return load_settings(config)


COLUMNS = (Column("id", "long", nullable=False), Column("name", "string"),
           Column("amount", "decimal", precision=12, scale=2))


def rows(table, columns=("id", "name", "amount", "_cdc_op", "_cdc_kafka_offset")) -> list[tuple]:
    """A pyarrow table's rows as tuples of `columns`, by id."""
    return sorted(tuple(r[c] for c in columns) for r in table.to_pylist())


@pytest.mark.parametrize("storage", ["file", "s3"])
def test_spark_and_pyiceberg_share_one_rest_catalog(spark, storage, request, tmp_path):
    server = request.getfixturevalue(f"{storage}_catalog")
    settings = rest_settings(server, tmp_path)
    catalog = load_catalog(settings)  # pyiceberg's RestCatalog, from cdc's properties
    assert type(catalog).__name__ == "RestCatalog"
    ns = f"rest_{secrets.token_hex(3)}"
    reg = TableRegistration(name=f"{ns}.items", source={"schema": "public", "table": "items"},
                            partitioning={"buckets": 2})
    # cdc's own path that registers a target: namespace and table created through REST.
    assert ensure_table(catalog, reg, COLUMNS, ("id",), "cdc.public.items") is True
    assert ensure_table(catalog, reg, COLUMNS, ("id",), "cdc.public.items") is False  # found there again
    assert (ns,) in catalog.list_namespaces()

    # Spark opens the same catalog from cdc's conf (set at runtime, as tests/spark does).
    conf = spark_catalog_conf(settings)
    assert conf[f"spark.sql.catalog.{server.name}.type"] == "rest"
    for k, v in conf.items():
        if k.startswith(f"spark.sql.catalog.{server.name}"):
            spark.conf.set(k, v)
    ref = f"{server.name}.{ns}.items"
    spark.sql(f"INSERT INTO {ref} SELECT CAST(id AS BIGINT), name, CAST(amount AS DECIMAL(12,2)), 'c', "
              f"CAST(id AS STRING), TIMESTAMP '2024-01-01 00:00:00 UTC', 0, CAST(id AS BIGINT) "
              f"FROM VALUES (1, 'one', '1.50'), (2, 'two', '2.50'), (3, 'three', '3.50'), (4, 'four', NULL) "
              f"AS v(id, name, amount)")
    # Row-level changes as the jobs make them (merge-on-read: position deletes).
    spark.sql(f"UPDATE {ref} SET name = 'two, changed', _cdc_op = 'u' WHERE id = 2")
    spark.sql(f"DELETE FROM {ref} WHERE id = 3")

    table = catalog.load_table(f"{ns}.items")
    expected = [(1, "one", Decimal("1.50"), "c", 1), (2, "two, changed", Decimal("2.50"), "u", 2),
                (4, "four", None, "c", 4)]
    assert rows(table.scan().to_arrow()) == expected
    assert server.holds(table.location()), table.location()  # the server's warehouse holds it
    written = server.data_files()
    assert written and all(server.holds(f) for f in written), written

    # And the other way: a pyiceberg commit that Spark reads.
    table.append(pa.Table.from_pylist(
        [{"id": 5, "name": "five", "amount": Decimal("5.00"), "_cdc_op": "c", "_cdc_position": "5",
          "_cdc_source_ts": dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), "_cdc_kafka_partition": 0,
          "_cdc_kafka_offset": 5}], schema=table.schema().as_arrow()))
    seen = sorted(tuple(r) for r in spark.sql(
        f"SELECT id, name, amount, _cdc_op, _cdc_kafka_offset FROM {ref}").collect())
    assert seen == expected + [(5, "five", Decimal("5.00"), "c", 5)]
    assert rows(catalog.load_table(f"{ns}.items").scan().to_arrow()) == seen
    catalog.purge_table(f"{ns}.items")


# ---- end to end: PostgreSQL -> Debezium -> Kafka -> `cdc run` -> the REST catalog ----


@pytest.fixture(scope="module")
def rest_env(stack, settings, s3_catalog, tmp_path_factory):
    """A source of its own on the stack's PostgreSQL whose cdc.yaml has the REST catalog
    with its warehouse in S3, and a job that runs as its own driver (local[1], 1g): the
    run's SparkSession already has its catalogs, and `cdc run` gives each table a new
    session of its SparkContext."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("itr"), f"{PREFIX}{secrets.token_hex(3)}")
    try:
        doc = yaml.safe_load(env.config.read_text())
        doc["catalog"] = s3_catalog.catalog_section()
        doc["spark"].update(master="local[1]", driver_memory="1g", shuffle_partitions=2)
        env.config.write_text(yaml.safe_dump(doc))
        rest = load_settings(env.config)
        env = dataclasses.replace(env, settings=rest, catalog=load_catalog(rest))
        _drop_leftovers(env, PREFIX, keep=env.source)
        yield env
    finally:
        _cleanup(env)


def run_driver(env, table: str) -> None:
    """`cdc run --available-now --table` as its own process; fails with its output."""
    log = env.config.parent / f"run-{table}.log"
    with open(log, "wb") as out:
        proc = start_driver(env, table, out, args=("--available-now",))
    code = wait_or_kill(proc, RUN_S)
    assert code == 0, f"cdc run exited {code}:\n{tail(log, 80)}"


def test_a_table_replicates_into_the_rest_catalog_on_s3(rest_env, s3_catalog):
    env, s = rest_env, rest_env.schema
    env.sql(f'CREATE TABLE "{s}".orders (id bigint PRIMARY KEY, customer text, total numeric(12,2), '
            f'placed timestamptz, paid boolean)')
    env.sql(f'INSERT INTO "{s}".orders SELECT g, \'customer \' || g, g * 3.25, '
            f'TIMESTAMPTZ \'2024-03-01 00:00:00+00\' + g * INTERVAL \'1 minute\', g % 2 = 0 '
            f'FROM generate_series(1, 200) g')
    # A batch takes at most the snapshot: the first is a bulk append, the changes a MERGE.
    env.register_table("orders", options={"max_offsets_per_trigger": 200})
    assert env.cdc("register", "--table", f"{s}.orders") == 0
    target = env.catalog.load_table(f"{s}.orders")  # created through the REST catalog
    assert s3_catalog.holds(target.location()), target.location()
    env.wait_captured(env.transaction(
        f'UPDATE "{s}".orders SET total = total + 1, paid = NOT paid WHERE id <= 30',
        f'DELETE FROM "{s}".orders WHERE id BETWEEN 50 AND 59',
        f'INSERT INTO "{s}".orders (id, customer) SELECT g, \'late \' || g FROM generate_series(201, 215) g'))

    run_driver(env, "orders")

    assert env.assert_equal("orders") == 200 - 10 + 15
    target = env.catalog.load_table(f"{s}.orders")
    commits = [(snap.summary.additional_properties.get("cdc.batch-id"), snap.summary.operation.value)
               for snap in target.snapshots()]
    # Both batches committed through the REST catalog with their offsets: the snapshot
    # appended, then the updates, deletes and inserts merged into those rows.
    assert [batch for batch, _ in commits] == ["0", "1"], commits
    assert commits[0][1] == "append" and commits[1][1] != "append", commits
    assert target.current_snapshot().summary.additional_properties.get("cdc.offsets"), commits
    assert any(f.startswith(target.location() + "/") for f in s3_catalog.data_files())  # the job wrote to S3
    # `cdc stack status --json` reports this catalog as load_catalog's properties.
    props = dict(Stack(env.settings).status()["catalog"])
    assert props == pyiceberg_properties(env.settings) and props["type"] == "rest"
    assert props["s3.secret-access-key"] == os.environ[S3_SECRET_ENV]  # ${ENV} resolved for both engines
    reopened = pyiceberg_load(props.pop("name"), **props)
    assert (s, "orders") in reopened.list_tables(s)
