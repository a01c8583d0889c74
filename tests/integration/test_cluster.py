"""The jobs under `spark-submit` on a Spark standalone cluster: a master and a worker
from the PySpark distribution on loopback, `cdc/jobs/submit.py run --available-now`
submitted to them in client mode (the driver here, the tasks in the worker's executor),
the Iceberg target read back with pyiceberg and compared with PostgreSQL row for row."""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest
import requests

from cdc.sinks.session import LOG_CONFIG
from tests.conftest import ROOT, _cleanup, free_port, postgres_env, tail, wait_or_kill
from tests.eventually import eventually

SPARK_HOME = Path(pyspark.__file__).resolve().parent
ROWS = 500
SUBMIT_S = 300  # the most one spark-submit may take before the test fails (it takes far less)


@dataclass
class Cluster:
    url: str  # spark://127.0.0.1:<port>
    master_ui: str
    worker_ui: str
    work: Path
    env: dict
    procs: dict  # name -> (Popen, log path)

    def state(self, ui: str) -> dict:
        return requests.get(f"{ui}/json/", timeout=5).json()

    def logs(self) -> str:
        return "\n".join(f"--- {name} ({log}):\n{tail(log)}" for name, (_, log) in self.procs.items())

    def wait(self, what: str, ready, timeout: float = 90) -> dict:
        """Poll the master's JSON until `ready(state)`; fail with the daemons' logs if a
        daemon exits or the time runs out."""
        def state() -> dict | None:
            try:
                found = self.state(self.master_ui)
            except requests.RequestException:
                return None  # the master's UI is not up yet
            return found if ready(found) else None

        return eventually(state, what, timeout, 0.2, detail=self.logs,
                          alive=lambda: all(proc.poll() is None for proc, _ in self.procs.values()))

    def start(self, name: str, *args: str) -> None:
        log = self.work / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = (proc, log)

    def stop(self) -> None:
        """The daemons and whatever they started (the worker's executors share its session)."""
        for proc, _ in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group, executors included
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone master and one worker (1 core, 1 GB for executors) on 127.0.0.1."""
    work = tmp_path_factory.mktemp("cluster")
    for d in ("worker", "local", "conf"):
        (work / d).mkdir()
    # The machine's spark-defaults.conf stays out; no REST submission server on its fixed port.
    (work / "conf" / "spark-defaults.conf").write_text("spark.master.rest.enabled false\n")
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOCAL_DIRS": str(work / "local"), "SPARK_DAEMON_MEMORY": "256m",
           "SPARK_CONF_DIR": str(work / "conf")}
    c = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{master_ui}", f"http://127.0.0.1:{worker_ui}",
                work, env, {})
    try:
        c.start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                "--webui-port", str(master_ui))
        c.start("worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                "--memory", "1g", "--webui-port", str(worker_ui), "--work-dir", str(work / "worker"), c.url)
        c.wait("the worker to register", lambda s: s.get("aliveworkers", 0) >= 1)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def env(stack, settings, tmp_path_factory):
    """A source of its own (connector, slot, schema) with one table of 500 rows, registered
    (its snapshot in Kafka), then changed: the topic holds the snapshot, then the changes."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("cl"), f"it_{secrets.token_hex(3)}k")
    try:
        s = env.schema
        env.sql(f'CREATE TABLE "{s}".accounts (id bigint PRIMARY KEY, owner text, balance numeric(12,2), '
                f'opened timestamptz, active boolean)')
        env.sql(f'INSERT INTO "{s}".accounts SELECT g, \'owner \' || g, g * 10.25, '
                f'TIMESTAMPTZ \'2024-01-01 00:00:00+00\' + g * INTERVAL \'1 hour\', g % 3 <> 0 '
                f'FROM generate_series(1, {ROWS}) g')
        # A batch takes at most the snapshot: the first is a bulk append, the changes a MERGE.
        env.register_table("accounts", options={"max_offsets_per_trigger": ROWS})
        assert env.cdc("register", "--table", f"{s}.accounts") == 0
        env.wait_captured(env.transaction(
            f'UPDATE "{s}".accounts SET balance = balance + 1, active = NOT active WHERE id <= 40',
            f'DELETE FROM "{s}".accounts WHERE id BETWEEN 100 AND 119',
            f'INSERT INTO "{s}".accounts (id, owner) SELECT g, \'new \' || g FROM generate_series(1001, 1030) g'))
        yield env
    finally:
        _cleanup(env)


def submit(cluster: Cluster, env, app: str) -> None:
    """`cdc run --available-now` of the table through spark-submit to the cluster (client
    mode), as docs/deployment.md shows it, heaps capped; fails with the output and the daemons' logs
    if it does not exit 0."""
    jars = sorted(str(p) for p in (env.settings.path(env.settings.jars_dir) / "spark").glob("*.jar"))
    assert jars, "no Spark jars in the cache: run `make setup`"
    log = cluster.work / f"{app}.log"
    cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url, "--deploy-mode", "client",
           "--name", app, "--driver-memory", "1g", "--executor-memory", "512m", "--total-executor-cores", "1",
           "--driver-java-options", f"-Duser.timezone=UTC -Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}",
           "--jars", ",".join(jars),
           # The executors run JVM code only: a Python worker there would fail the job.
           "--conf", "spark.pyspark.python=/bin/false", "--conf", f"spark.pyspark.driver.python={sys.executable}",
           str(ROOT / "cdc" / "jobs" / "submit.py"),
           "--config", str(env.config), "run", "--table", f"{env.schema}.accounts", "--available-now"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=cluster.env, cwd=cluster.work, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    code = wait_or_kill(proc, SUBMIT_S)  # the JVM and its Python driver go, whatever happens
    assert code == 0, f"spark-submit exited {code}:\n{tail(log, 80)}\n{cluster.logs()}"


def ran_on_the_cluster(cluster: Cluster, app: str) -> None:
    """The master lists the application as finished, and its executor ran on the worker."""
    state = cluster.wait(f"{app} to finish", lambda s: any(a["name"] == app for a in s.get("completedapps", [])))
    (done,) = [a for a in state["completedapps"] if a["name"] == app]
    assert done["state"] == "FINISHED", done
    executors = cluster.state(cluster.worker_ui)
    assert done["id"] in [e["appid"] for e in executors["finishedexecutors"] + executors["executors"]], executors


def test_spark_submit_to_a_standalone_cluster_replicates_a_table(cluster, env):
    app = f"cdc-cluster-{env.schema}"
    submit(cluster, env, app)
    ran_on_the_cluster(cluster, app)
    assert env.assert_equal("accounts") == ROWS - 20 + 30
    target = env.catalog.load_table(f"{env.schema}.accounts")
    commits = [(s.summary.additional_properties.get("cdc.batch-id"), s.summary.operation.value)
               for s in target.snapshots()]
    # Two batches committed from the cluster with their offsets: the snapshot appended, then
    # the updates, deletes and inserts merged into those rows.
    assert [batch for batch, _ in commits] == ["0", "1"], commits
    assert commits[0][1] == "append" and commits[1][1] != "append", commits
    assert target.current_snapshot().summary.additional_properties.get("cdc.offsets"), commits
