"""Dependencies down on the real stack: the Connect worker killed mid-stream (Debezium
re-emits, duplicates arrive), a Kafka broker restart under a running job, and a job that
gives up after its retry bound. Runs last: it restarts the shared stack's services."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from cdc.register.connector import ConnectClient, connector_name
from cdc.sinks.session import spark_log
from tests.compare import assert_equal, differences, source_rows, target_rows
from tests.conftest import interrupt, start_driver
from tests.eventually import eventually


@pytest.fixture(scope="module")
def oenv(it_env):
    s = it_env.schema
    for t in ("outage_c", "outage_k"):
        it_env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, v int, note text)')
        it_env.sql(f'INSERT INTO "{s}".{t} SELECT g, 0, \'start\' FROM generate_series(1, 100) g')
        it_env.register_table(t)
    assert it_env.cdc("register", "--table", f"{s}.outage_*") == 0
    it_env.replicate(("outage_c", "outage_k"))
    return it_env


def writer(env, table: str, stop: threading.Event, out: dict) -> threading.Thread:
    def run():
        i = 0
        while not stop.is_set():
            i += 1
            out["txid"] = env.transaction(f'UPDATE "{env.schema}".{table} SET v = v + 1 WHERE id % 7 = {i % 7}',
                                          f'INSERT INTO "{env.schema}".{table} VALUES ({1000 + i}, {i}, \'w\')',
                                          f'DELETE FROM "{env.schema}".{table} WHERE id = {1000 + i - 3}')
            time.sleep(0.02)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def connector_back(env, stack) -> None:
    """Connect healthy and the connector's tasks running again (restarting failed ones)."""
    stack.up()
    client = ConnectClient(env.settings.connect_url)
    client.restart_failed(connector_name(env.source))
    client.wait_running(connector_name(env.source))


def retrying_config(env, tmp_path, seconds: int):
    """A copy of the run's cdc.yaml whose jobs retry an outage for `seconds`."""
    doc = yaml.safe_load(env.config.read_text())
    doc["spark"]["retry_for_s"] = seconds
    config = tmp_path / "cdc.yaml"
    config.write_text(yaml.safe_dump(doc))
    return config


def test_connect_worker_killed_mid_stream(oenv, stack):
    stop, out = threading.Event(), {}
    t = writer(oenv, "outage_c", stop, out)
    try:
        eventually(lambda: "txid" in out, "the writer's first transaction", 60, 0.05, alive=t.is_alive)
        oenv.wait_captured(out["txid"])  # changes are flowing through the connector
        os.killpg(stack.connect.process.pid(), signal.SIGKILL)
        killed_at = out["txid"]
        eventually(lambda: out["txid"] >= killed_at + 20, "20 transactions while the worker is gone", 120, 0.05,
                   alive=t.is_alive)
    finally:
        stop.set()
        t.join(60)
    connector_back(oenv, stack)
    oenv.replicate("outage_c", out["txid"])  # Debezium re-emits from its last flushed offset
    assert_equal(oenv.dsn, oenv.schema, "outage_c", oenv.catalog, f"{oenv.schema}.outage_c", ("id",))


def test_broker_restart_under_a_running_job(oenv, stack, tmp_path):
    s = oenv.schema
    log = tmp_path / "run.log"
    with open(log, "w") as f:
        proc = start_driver(oenv, "outage_k", f)
    try:
        oenv.transaction(f'UPDATE "{s}".outage_k SET v = v + 1 WHERE id <= 50')
        wait_for_line(proc, log, "applied in")  # the job is running
        stack.kafka.process.stop()
        down_txid = oenv.transaction(f'DELETE FROM "{s}".outage_k WHERE id > 90',
                                     f'INSERT INTO "{s}".outage_k VALUES (500, 5, \'while down\')')
        # The broker stays down until the job has said so: the job must ride it out.
        wait_for_line(proc, log, f"Kafka at {oenv.settings.kafka_bootstrap} is unreachable", timeout=60)
        connector_back(oenv, stack)
        oenv.wait_captured(down_txid)
        eventually(lambda: not differences(source_rows(oenv.dsn, s, "outage_k", ("id",)),
                                           target_rows(oenv.catalog, f"{s}.outage_k", ("id",))),
                   "equal target after the broker came back", 240, 1, alive=lambda: proc.poll() is None,
                   detail=lambda: log.read_text()[-3000:])
    finally:
        interrupt(proc)
        stack.up()
    assert proc.returncode == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "\tat " not in text, text[-3000:]  # Java's traces: the Spark log file only
    assert f"Kafka at {oenv.settings.kafka_bootstrap} is reachable again" in text, text[-3000:]


def test_job_gives_up_after_its_retry_bound(oenv, stack, tmp_path, capsys):
    config = retrying_config(oenv, tmp_path, 6)
    from cdc.cli.main import main

    stack.kafka.process.stop()
    try:
        capsys.readouterr()
        assert main(["--config", str(config), "run", "--available-now", "--table", f"{oenv.schema}.outage_k"]) == 3
        err = capsys.readouterr().err
        assert "gave up after 6s of retries" in err and "Kafka at" in err and "retrying in 1 s" in err
    finally:
        connector_back(oenv, stack)


def test_catalog_unreachable_then_back(oenv, stack, tmp_path):
    """The catalog's database cannot be opened for a while: the job retries, then goes on."""
    s = oenv.schema
    config = retrying_config(oenv, tmp_path, 240)
    oenv.wait_captured(oenv.transaction(f'UPDATE "{s}".outage_k SET note = \'catalog outage\' WHERE id <= 10'))
    catalog = oenv.settings.path(oenv.settings.catalog.path)
    away = catalog.with_name(catalog.name + ".away")
    log = tmp_path / "run.log"
    catalog.rename(away)
    catalog.mkdir()  # a directory where the database file was: every new connection fails
    restored = False
    try:
        with open(log, "w") as f:
            proc = subprocess.Popen([sys.executable, "-m", "cdc.cli.main", "--config", str(config), "run",
                                     "--available-now", "--table", f"{s}.outage_k"], stdout=f,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_line(proc, log, "retrying in")  # the job noticed and waits
        catalog.rmdir()
        away.rename(catalog)
        restored = True
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if not restored:
            catalog.rmdir()
            away.rename(catalog)
    assert_equal(oenv.dsn, s, "outage_k", oenv.catalog, f"{s}.outage_k", ("id",))
    # One line naming the catalog, its file and why; Java's traces only in the Spark log file.
    text = log.read_text()
    assert f"{s}.outage_k: catalog lake at {catalog} is unreachable (" in text, text[-3000:]
    assert ", retrying in 1 s" in text and "REQUIRES_SINGLE_PART_NAMESPACE" not in text
    assert "\tat " not in text and "Caused by" not in text, text[-3000:]
    assert "Failed to load catalog" in spark_log(oenv.settings).read_text()


def wait_for_line(proc, log, text: str, timeout: float = 180) -> None:
    eventually(lambda: text in log.read_text(), repr(text), timeout, alive=lambda: proc.poll() is None,
               detail=lambda: log.read_text()[-3000:])


def test_warehouse_unreadable_then_back(oenv, tmp_path):
    """The target's data files cannot be read for a while: the job names the warehouse and
    the file in one line (Java's account in the JSON log's detail), retries, then goes on."""
    s = oenv.schema
    config = retrying_config(oenv, tmp_path, 240)
    oenv.wait_captured(oenv.transaction(f'UPDATE "{s}".outage_k SET note = \'warehouse outage\' WHERE id <= 20'))
    data = oenv.settings.path(oenv.settings.catalog.warehouse) / s / "outage_k" / "data"
    away = data.with_name("data.away")
    log = tmp_path / "run.log"
    data.rename(away)
    data.write_text("")  # a file where the directory was: no data file can be read
    try:
        with open(log, "w") as f:
            proc = subprocess.Popen([sys.executable, "-m", "cdc.cli.main", "--log-format", "json", "--config",
                                     str(config), "run", "--available-now", "--table", f"{s}.outage_k"], stdout=f,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_line(proc, log, '"event": "retrying"')
    finally:
        data.unlink()
        away.rename(data)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    assert_equal(oenv.dsn, s, "outage_k", oenv.catalog, f"{s}.outage_k", ("id",))
    retrying = [json.loads(line) for line in log.read_text().splitlines() if '"event": "retrying"' in line]
    first = retrying[0]
    assert first["message"].startswith(f"warehouse at {oenv.settings.path(oenv.settings.catalog.warehouse)} "
                                       "cannot be read or written ("), first["message"]
    assert "/outage_k/data/" in first["message"] and first["message"].endswith("retrying in 1 s")
    assert "FileNotFoundException" in first["detail"] and "\tat " in first["detail"]


def test_a_failure_retrying_cannot_mend_fails_at_once(oenv, spark, tmp_path, capsys):
    """A target whose columns someone changed: the job fails at once (not after its retry
    bound) naming the table, the column and what to do."""
    s = oenv.schema
    oenv.sql(f'CREATE TABLE "{s}".outage_v (id int PRIMARY KEY, v int)')
    oenv.register_table("outage_v")
    assert oenv.cdc("register", "--table", f"{s}.outage_v") == 0
    oenv.replicate("outage_v", oenv.transaction(f'INSERT INTO "{s}".outage_v VALUES (1, 1)'))
    spark.sql(f"ALTER TABLE {oenv.target_ref('outage_v')} DROP COLUMN v")
    oenv.wait_captured(oenv.transaction(f'UPDATE "{s}".outage_v SET v = 2'))
    from cdc.cli.main import main

    capsys.readouterr()
    started = time.monotonic()
    assert main(["--config", str(oenv.config), "run", "--available-now", "--table", f"{s}.outage_v"]) == 3
    assert time.monotonic() - started < 120  # the retry bound is 300 s
    err = capsys.readouterr().err
    assert "retrying in" not in err and "gave up" not in err, err
    assert f"table {s}.outage_v: " in err and "`v`" in err and "SQLSTATE 42" in err, err
    assert "retrying cannot mend this" in err and "\tat " not in err, err


def test_initial_snapshot_cut_short_restarts_from_scratch_without_duplicates(it_env, stack, settings,
                                                                             tmp_path_factory):
    """A new connector's initial snapshot is killed with the Connect worker half way; the
    part already in Kafka is applied (a bulk append into the empty target); Debezium then
    snapshots the table again from the start. The target ends exact, each key once."""
    from cdc.config import load_tables
    from cdc.register.registrar import register
    from tests.conftest import _cleanup, end_offset, postgres_env

    env = postgres_env(stack, settings, tmp_path_factory.mktemp("snap"), it_env.source + "s")
    try:
        rows = 100_000
        env.sql(f'CREATE TABLE "{env.schema}".snap (id bigint PRIMARY KEY, v text)')
        env.sql(f'INSERT INTO "{env.schema}".snap SELECT g, md5(g::text) FROM generate_series(1, {rows}) g')
        name = env.register_table("snap")
        register(env.settings, load_tables(env.settings, name), wait_snapshot=False)
        topic = f"{env.source}.{env.schema}.snap"
        deadline = time.monotonic() + 180
        while end_offset(env, topic) == 0:  # the snapshot has begun
            assert time.monotonic() < deadline, "the initial snapshot did not start"
            time.sleep(0.02)
        os.killpg(stack.connect.process.pid(), signal.SIGKILL)
        cut = end_offset(env, topic)
        assert 0 < cut < rows, f"the snapshot was not cut short ({cut} of {rows} records)"
        assert env.cdc("run", "--available-now", "--table", name) == 0
        target = env.catalog.load_table(name)
        assert target.scan().count() == cut and target.snapshots()[0].summary.operation.value == "append"
        connector_back(env, stack)
        ConnectClient(env.settings.connect_url).wait_streaming(connector_name(env.source))
        assert end_offset(env, topic) >= cut + rows  # snapshotted again, from the start
        env.replicate("snap", env.marker())
        ids = env.catalog.load_table(name).scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
        assert len(ids) == len(set(ids)) == rows
        env.assert_equal("snap")
    finally:
        _cleanup(env)
