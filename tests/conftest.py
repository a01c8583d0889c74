"""Shared fixtures: one SparkSession and one local stack per test run.

Nothing skips for lack of a service: a missing one fails the run."""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import requests
import yaml

from cdc.cli.main import main as cdc_main
from cdc.config import load_settings
from cdc.register.connector import ConnectClient, connector_name
from cdc.sinks.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption("--soak", type=int, default=0, metavar="SECONDS",
                     help="chaos tier: run the randomized workload this long (default: a short CI run)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in ("spark", "integration", "chaos"):
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def settings():
    return load_settings(ROOT / "cdc.yaml")


@pytest.fixture(scope="session")
def spark(settings):
    """The run's one SparkSession (the same one `cdc run` in-process gets)."""
    from cdc.jobs.session import get_session

    session = get_session(settings, app_name="cdc-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def stack(settings):
    """The local stack, started if it is not running (idempotent). A service that cannot
    start fails the run: nothing skips for lack of one."""
    from cdc.stack.manager import Stack

    stack = Stack(settings)
    stack.up()
    return stack


# ---- the integration and chaos tiers' own source on the real stack ----


@dataclass
class Env:
    config: Path
    settings: object
    source: str
    schema: str
    dsn: str
    catalog: object

    def cdc(self, *args: str) -> int:
        """The command line, in this process (so it shares the run's SparkSession)."""
        return cdc_main(["--config", str(self.config), *args])

    def sql(self, statement: str, params=None):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else None

    def transaction(self, *statements: str) -> int:
        """Run statements in one transaction; return its transaction id."""
        with psycopg.connect(self.dsn) as conn:
            for s in statements:
                conn.execute(s)
            txid = conn.execute("SELECT txid_current()").fetchone()[0]
        return txid

    def register_table(self, table: str, key: list[str] | None = None, name: str | None = None,
                       options: dict | None = None) -> str:
        name = name or f"{self.schema}.{table}"
        body = {"name": name, "source": {"schema": self.schema, "table": table}}
        if key:
            body["key"] = key
        if options:
            body["options"] = options
        (self.settings.path(self.settings.tables_dir) / f"{name}.yaml").write_text(yaml.safe_dump(body))
        return name

    def marker(self) -> int:
        """A transaction the connector certainly captures; returns its id."""
        from cdc.sources.postgres import write_marker

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return write_marker(conn, self.settings.sources[self.source].signal_table)

    def wait_captured(self, txid: int) -> None:
        """Until every change of transaction `txid` is in Kafka (a polled condition)."""
        ConnectClient(self.settings.connect_url).wait_captured(connector_name(self.source), txid & 0xFFFFFFFF)

    def replicate(self, table: str, txid: int | None = None) -> None:
        if txid is not None:
            self.wait_captured(txid)
        assert self.cdc("run", "--available-now", "--table", f"{self.schema}.{table}") == 0


@pytest.fixture(scope="session")
def it_env(stack, spark, settings, tmp_path_factory):
    suffix = secrets.token_hex(3)
    source, schema = f"it_{suffix}", f"it_{suffix}"
    work = tmp_path_factory.mktemp("it")
    (work / "tables").mkdir()
    doc = yaml.safe_load((ROOT / "cdc.yaml").read_text())
    base = dict(doc["sources"]["stack_postgres"])
    base["password_file"] = str(settings.path(Path(base["password_file"])))
    doc["sources"] = {source: base}
    doc["stack"]["state_dir"] = str(settings.state_dir)
    doc["catalog"]["path"] = str(settings.path(settings.catalog.path))
    doc["catalog"]["warehouse"] = str(settings.path(settings.catalog.warehouse))
    doc["spark"]["checkpoint_dir"] = str(work / "checkpoints")
    doc["tables_dir"] = str(work / "tables")
    doc["jars_dir"] = str(settings.path(settings.jars_dir))
    doc["debezium_dir"] = str(settings.path(settings.debezium_dir))
    config = work / "cdc.yaml"
    config.write_text(yaml.safe_dump(doc))
    env_settings = load_settings(config)
    env = Env(config, env_settings, source, schema, stack.postgres.dsn(), load_catalog(env_settings))
    _drop_leftovers(env)
    env.sql(f'CREATE SCHEMA "{schema}"')
    yield env
    _cleanup(env)


def _drop_leftovers(env: Env) -> None:
    """Connectors, slots, publications and schemas of earlier runs that were killed."""
    client = ConnectClient(env.settings.connect_url)
    for name in requests.get(f"{env.settings.connect_url}/connectors", timeout=10).json():
        if name.startswith("cdc-it_"):
            client.delete(name)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        active = env.sql("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'cdc\\_it\\_%' AND active")
        if not active[0][0]:
            break
        time.sleep(0.5)
    env.sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name LIKE 'cdc\\_it\\_%' AND NOT active")
    for (pub,) in env.sql("SELECT pubname FROM pg_publication WHERE pubname LIKE 'cdc\\_it\\_%'"):
        env.sql(f'DROP PUBLICATION "{pub}"')
    for (nsp,) in env.sql("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'it\\_%'"):
        env.sql(f'DROP SCHEMA "{nsp}" CASCADE')


def _cleanup(env: Env) -> None:
    client = ConnectClient(env.settings.connect_url)
    client.delete(connector_name(env.source))
    deadline = time.monotonic() + 60
    slot = f"cdc_{env.source}"
    while time.monotonic() < deadline:
        rows = env.sql("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        if not rows:
            break
        if not rows[0][0]:
            env.sql("SELECT pg_drop_replication_slot(%s)", (slot,))
            break
        time.sleep(0.5)
    env.sql(f'DROP PUBLICATION IF EXISTS "cdc_{env.source}"')
    env.sql(f'DROP SCHEMA IF EXISTS "{env.schema}" CASCADE')
    for ident in env.catalog.list_tables(env.schema) if env.schema in [n[0] for n in env.catalog.list_namespaces()] else []:
        env.catalog.purge_table(ident)


def end_offset(env: Env, topic: str, partition: int = 0) -> int:
    from cdc.register.topics import watermarks

    return watermarks(env.settings.kafka_bootstrap, topic)[partition][1]


def start_driver(env: Env, table: str, log, extra_env: dict | None = None) -> subprocess.Popen:
    """A continuous `cdc run --table` as its own driver process, output to `log`."""
    return subprocess.Popen([sys.executable, "-m", "cdc.cli.main", "--config", str(env.config), "run", "--table",
                             f"{env.schema}.{table}"], env={**os.environ, **(extra_env or {})}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def interrupt(proc, timeout: float = 120) -> None:
    """Ask a driver to stop (SIGINT), as an operator would; kill it if it does not."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
