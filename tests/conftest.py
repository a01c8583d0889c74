"""Shared fixtures: one SparkSession and one local stack per test run.

Nothing skips for lack of a service: a missing one fails the run."""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
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
from cdc.waiting import poll_until

ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption("--soak", type=int, default=0, metavar="SECONDS",
                     help="chaos tier: run the randomized workload this long (default: a short CI run)")
    parser.addoption("--diff-rounds", type=int, default=1, metavar="N",
                     help="chaos tier: rounds of the differential test's workload (default: a short CI run)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in ("spark", "integration", "chaos"):
            item.add_marker(getattr(pytest.mark, tier))
        if config.getoption("--soak") or config.getoption("--diff-rounds") > 1:
            item.add_marker(pytest.mark.timeout(0))  # a long run by request: no per-test bound
        callspec = getattr(item, "callspec", None)
        if item.get_closest_marker("delta_long") and callspec and on_delta(callspec.params):
            item.add_marker(pytest.mark.long)


def on_delta(params: dict) -> bool:
    """Whether a parametrized test writes a Delta target: its harness `h`, its env or its
    (source, sink) pair names the Delta sink."""
    return any(v == "delta" or (isinstance(v, tuple) and "delta" in v) for v in params.values())


@pytest.fixture(scope="session")
def settings():
    return load_settings(ROOT / "cdc.yaml")


SPARK_LOG: dict = {}  # the run's driver log, and its size when the run began


def pytest_terminal_summary(terminalreporter):
    """The run's driver JVM's fatal errors, when it had any: a JVM that ended (out of heap,
    say) fails every later test that reaches it with `Connection refused`."""
    path = SPARK_LOG.get("path")
    if path is None or not path.exists():
        return
    with path.open("rb") as f:
        f.seek(SPARK_LOG["start"])
        lines = f.read().decode(errors="replace").splitlines()
    fatal = [line for line in lines if "OutOfMemoryError" in line or "Uncaught exception" in line]
    if fatal:
        terminalreporter.write_sep("=", f"the Spark driver's fatal errors, from {path}")
        for line in fatal[:5]:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def spark(settings):
    """The run's one SparkSession (the same one `cdc run` in-process gets, and the benchmark's
    direct path prototype on its class path for tests/spark/test_direct_delta.py)."""
    from bench.direct import with_prototype
    from cdc.sinks.session import get_session, spark_log

    log = spark_log(settings)
    SPARK_LOG.update(path=log, start=log.stat().st_size if log.exists() else 0)
    session = get_session(with_prototype(settings), app_name="cdc-tests")
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
    """A source of the stack (PostgreSQL, or MariaDB with `kind`), its own schema (for
    MariaDB: database), its own cdc.yaml and tables directory."""

    config: Path
    settings: object
    source: str
    schema: str
    dsn: str | None  # PostgreSQL
    catalog: object
    kind: str = "postgresql"
    sink: str = "iceberg"  # what register_table writes: targets in the Iceberg catalog or Delta tables

    def cdc(self, *args: str) -> int:
        """The command line, in this process (so it shares the run's SparkSession)."""
        return cdc_main(["--config", str(self.config), *args])

    def _mariadb(self):
        from cdc.sources import mariadb

        return mariadb.connect(self.settings, self.source)

    def sql(self, statement: str, params=None):
        if self.kind == "mariadb":
            with self._mariadb() as conn, conn.cursor() as cur:
                cur.execute(statement, params)
                return list(cur.fetchall()) if cur.description else None
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else None

    def transaction(self, *statements: str):
        """Run statements in one transaction; return it (PostgreSQL: its id; MariaDB: a
        marker written right after it)."""
        if self.kind == "mariadb":
            with self._mariadb() as conn, conn.cursor() as cur:
                cur.execute("BEGIN")
                for s in statements:
                    cur.execute(s)
                cur.execute("COMMIT")
            return self.marker()
        with psycopg.connect(self.dsn) as conn:
            for s in statements:
                conn.execute(s)
            txid = conn.execute("SELECT txid_current()").fetchone()[0]
        return txid

    def q(self, table: str) -> str:
        """The quoted, qualified name of a table of this env's schema."""
        return f"`{self.schema}`.`{table}`" if self.kind == "mariadb" else f'"{self.schema}"."{table}"'

    def source_rows(self, table: str, key: tuple[str, ...]) -> dict:
        from tests.compare import mariadb_source_rows, source_rows

        if self.kind == "mariadb":
            with self._mariadb() as conn:
                return mariadb_source_rows(conn, self.schema, table, key)
        return source_rows(self.dsn, self.schema, table, key)

    def assert_equal(self, table: str, key: tuple[str, ...] = ("id",), float32: frozenset = frozenset()) -> int:
        """The target equals the source, row for row and column for column; returns the rows."""
        from tests.compare import differences, rows_by_key

        src = self.source_rows(table, key)
        # MariaDB sends FLOAT as it prints it (6 significant digits) in snapshot reads.
        diffs = differences(src, rows_by_key(self.target_records(table), key), float32,
                            6 if self.kind == "mariadb" else None)
        assert not diffs, f"{self.kind} {self.schema}.{table} != target ({len(src)} source rows):\n" + "\n".join(diffs)
        return len(src)

    def delta_path(self, table: str) -> Path:
        from cdc.sinks import delta

        return delta.location(self.settings, f"{self.schema}.{table}")

    def target_records(self, table: str) -> list[dict]:
        """Every row of the table's target, read by the second reader (pyiceberg, delta-rs)."""
        from tests.compare import delta_records

        if self.sink == "delta":
            return delta_records(self.delta_path(table))
        return self.catalog.load_table(f"{self.schema}.{table}").scan().to_arrow().to_pylist()

    def summaries(self, table: str) -> list[dict]:
        """The cdc keys of the target's commits, oldest first (Iceberg: the snapshots of the
        current ancestry's log; Delta: each commit's userMetadata)."""
        if self.sink == "delta":
            from tests.compare import delta_summaries

            return delta_summaries(self.delta_path(table))
        return [s.summary.additional_properties for s in self.catalog.load_table(f"{self.schema}.{table}").snapshots()]

    def target_ref(self, table: str) -> str:
        """The target's Spark SQL name."""
        from cdc.sinks import delta

        if self.sink == "delta":
            return delta.ref(self.delta_path(table))
        return f"{self.settings.catalog.name}.{self.schema}.{table}"

    def register_table(self, table: str, key: list[str] | None = None, name: str | None = None,
                       options: dict | None = None, **more) -> str:
        """Write tables/<name>.yaml (`more`: other top-level keys, e.g. snapshot="never")."""
        name = name or f"{self.schema}.{table}"
        body = {"name": name, "source": {"schema": self.schema, "table": table}, **more}
        if self.sink != "iceberg":
            body["sink"] = self.sink
        if key:
            body["key"] = key
        if options:
            body["options"] = options
        (self.settings.path(self.settings.tables_dir) / f"{name}.yaml").write_text(yaml.safe_dump(body))
        return name

    def marker(self):
        """A transaction the connector certainly captures."""
        from cdc.sources import module_of

        kind = module_of(self.settings, self.source)
        with kind.connect(self.settings, self.source) as conn:
            return kind.write_marker(conn, self.settings.sources[self.source].signal_table)

    def wait_captured(self, marker) -> None:
        """Until every change of a transaction (a marker, or a committed PostgreSQL
        transaction's id) is in Kafka (a polled condition). For a transaction id, a marker
        written now stands in: the offset of a transaction's first event (its BEGIN) already
        carries its id while its rows are still being sent, but a later transaction's offset
        is committed only once every earlier record is in Kafka."""
        marker = self.marker() if isinstance(marker, int) else marker
        ConnectClient(self.settings.connect_url).wait_captured(connector_name(self.source), marker)

    def replicate(self, table: str | tuple[str, ...], marker=None) -> None:
        """`cdc run --available-now` of a table, or of several in one run (after `marker` is
        captured, when given)."""
        if marker is not None:
            self.wait_captured(marker)
        names = (table,) if isinstance(table, str) else table
        assert self.cdc("run", "--available-now", *[a for t in names for a in ("--table", f"{self.schema}.{t}")]) == 0


def write_config(settings, work: Path, sources: dict) -> Path:
    """A cdc.yaml in `work` for `sources`, with its own tables directory and checkpoints,
    on the run's stack and catalog."""
    (work / "tables").mkdir()
    doc = yaml.safe_load((ROOT / "cdc.yaml").read_text())
    doc["sources"] = sources
    doc["stack"]["state_dir"] = str(settings.state_dir)
    doc["catalog"]["path"] = str(settings.path(settings.catalog.path))
    doc["catalog"]["warehouse"] = str(settings.path(settings.catalog.warehouse))
    doc["spark"]["checkpoint_dir"] = str(work / "checkpoints")
    doc["tables_dir"] = str(work / "tables")
    doc["jars_dir"] = str(settings.path(settings.jars_dir))
    doc["debezium_dir"] = str(settings.connector_templates)
    config = work / "cdc.yaml"
    config.write_text(yaml.safe_dump(doc))
    return config


def postgres_env(stack, settings, work: Path, name: str, sink: str = "iceberg", **source) -> Env:
    """A source of the stack's PostgreSQL with a connector, slot, schema and cdc.yaml of
    its own (`name`, which starts with `it_`); `source` adds settings (`format="avro"`)."""
    base = dict(yaml.safe_load((ROOT / "cdc.yaml").read_text())["sources"]["stack_postgres"], **source)
    base["password_file"] = str(settings.path(Path(base["password_file"])))
    config = write_config(settings, work, {name: base})
    env_settings = load_settings(config)
    env = Env(config, env_settings, name, name, stack.postgres.dsn(), load_catalog(env_settings), sink=sink)
    env.sql(f'CREATE SCHEMA IF NOT EXISTS "{name}"')
    return env


@pytest.fixture(scope="session")
def it_env(stack, spark, settings, tmp_path_factory):
    name = f"it_{secrets.token_hex(3)}"
    work = tmp_path_factory.mktemp("it")
    _drop_leftovers(Env(None, settings, "", "", stack.postgres.dsn(), None))
    env = postgres_env(stack, settings, work, name)
    yield env
    _cleanup(env)


@pytest.fixture(scope="session")
def it_delta(stack, spark, settings, it_env, tmp_path_factory):
    """A PostgreSQL source of its own whose registrations have Delta targets."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("itd"), it_env.source + "d", sink="delta")
    yield env
    _cleanup(env)


@pytest.fixture(scope="session")
def it_mariadb(stack, spark, settings, tmp_path_factory):
    """The same for the stack's MariaDB: a source and a database of its own."""
    yield from mariadb_env(stack, settings, tmp_path_factory, "itm")


@pytest.fixture(scope="session")
def it_mariadb_delta(stack, spark, settings, tmp_path_factory):
    """A MariaDB source of its own whose registrations have Delta targets."""
    yield from mariadb_env(stack, settings, tmp_path_factory, "itmd", sink="delta")


def mariadb_env(stack, settings, tmp_path_factory, prefix: str, sink: str = "iceberg"):
    """A source of the stack's MariaDB and a database of its own, `<prefix>_<hex>`; those
    an earlier run with the same prefix left are dropped first."""
    suffix = secrets.token_hex(3)
    source = schema = f"{prefix}_{suffix}"
    config = write_config(settings, tmp_path_factory.mktemp(prefix), {source: {
        "kind": "mariadb", "host": "127.0.0.1", "port": stack.mariadb.port, "database": schema, "user": "cdc",
        "password_file": str(stack.mariadb.password_file)}})
    import pymysql

    admin = pymysql.connect(host="127.0.0.1", port=stack.mariadb.port, user="cdc",
                            password=stack.mariadb.password(), autocommit=True)
    client = ConnectClient(settings.connect_url)
    with admin.cursor() as cur:
        for name in requests.get(f"{settings.connect_url}/connectors", timeout=10).json():
            if name.startswith(f"cdc-{prefix}_"):
                client.retire(name)
        cur.execute(f"SHOW DATABASES LIKE '{prefix}\\_%'")
        for (db,) in cur.fetchall():
            cur.execute(f"DROP DATABASE `{db}`")
        cur.execute(f"CREATE DATABASE `{schema}`")
    env_settings = load_settings(config)
    env = Env(config, env_settings, source, schema, None, load_catalog(env_settings), kind="mariadb", sink=sink)
    yield env
    client.retire(connector_name(source))
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
    admin.close()
    if schema in [n[0] for n in env.catalog.list_namespaces()]:
        for ident in env.catalog.list_tables(schema):
            env.catalog.purge_table(ident)


def _drop_leftovers(env: Env, prefix: str = "it_", keep: str | None = None) -> None:
    """Connectors, slots, publications and schemas of earlier runs that were killed: those
    of the sources named `<prefix>...`, but `keep` (a source in use)."""
    like = prefix.replace("_", "\\_") + "%"
    mine = (f"cdc\\_{like}", f"cdc_{keep}")  # slots and publications are cdc_<source>
    client = ConnectClient(env.settings.connect_url)
    for name in requests.get(f"{env.settings.connect_url}/connectors", timeout=10).json():
        if name.startswith(f"cdc-{prefix}") and name != f"cdc-{keep}":
            client.retire(name)
    poll_until(lambda: not env.sql("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE %s AND active "
                                   "AND slot_name <> %s", mine)[0][0], 60)
    env.sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name LIKE %s AND NOT active AND slot_name <> %s", mine)
    for (pub,) in env.sql("SELECT pubname FROM pg_publication WHERE pubname LIKE %s AND pubname <> %s", mine):
        env.sql(f'DROP PUBLICATION "{pub}"')
    for (nsp,) in env.sql("SELECT nspname FROM pg_namespace WHERE nspname LIKE %s AND nspname <> %s",
                          (like, str(keep))):
        env.sql(f'DROP SCHEMA "{nsp}" CASCADE')


def _cleanup(env: Env) -> None:
    client = ConnectClient(env.settings.connect_url)
    client.retire(connector_name(env.source))
    slot = f"cdc_{env.source}"

    def released() -> bool:
        rows = env.sql("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        if rows and not rows[0][0]:
            env.sql("SELECT pg_drop_replication_slot(%s)", (slot,))
        return not rows or not rows[0][0]

    poll_until(released, 60)
    env.sql(f'DROP PUBLICATION IF EXISTS "cdc_{env.source}"')
    env.sql(f'DROP SCHEMA IF EXISTS "{env.schema}" CASCADE')
    for ident in env.catalog.list_tables(env.schema) if env.schema in [n[0] for n in env.catalog.list_namespaces()] else []:
        env.catalog.purge_table(ident)


def end_offset(env: Env, topic: str, partition: int = 0) -> int:
    from cdc.control.kafka import watermarks

    return watermarks(env.settings.kafka_bootstrap, topic)[partition][1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"


def wait_or_kill(proc: subprocess.Popen, timeout: float) -> int:
    """The exit code of a process started in a session of its own; on a timeout (or an
    interrupt) its whole process group is killed, whatever happens."""
    try:
        return proc.wait(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def start_driver(env: Env, table: str, log, extra_env: dict | None = None, args: tuple = (),
                 config: Path | None = None) -> subprocess.Popen:
    """A continuous `cdc run --table` (a name or a pattern) as its own driver process, output
    to `log`; `config`: another cdc.yaml than the env's."""
    return subprocess.Popen([sys.executable, "-m", "cdc.cli.main", "--config", str(config or env.config), "run",
                             "--table", f"{env.schema}.{table}", *args], env={**os.environ, **(extra_env or {})},
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def interrupt(proc, timeout: float = 120) -> None:
    """Ask a driver to stop (SIGINT), as an operator would; kill it if it does not."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
