"""`reconcile`, `reconcile --deep` and `repair` of a table that never stops changing: a
load of more than 20 transactions a second, applied by its continuous job the whole time.
Each compare is made at a commit the running job cuts at the source's count
(control/barrier.py), so it says OK or DRIFT, never IN-FLIGHT, and names the keys."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from tests.conftest import interrupt, start_driver
from tests.eventually import eventually

LOAD_TPS = 20  # the least the load must keep up


class Load:
    """Transactions against the table from a thread of its own: updates of ids 1-100,
    and inserts and deletes of keys from 1,000 up (never the keys the test damages)."""

    def __init__(self, env, table: str):
        self.env, self.table, self.done, self.count = env, env.q(table), threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _connect(self):
        return self.env._mariadb() if self.env.kind == "mariadb" else psycopg.connect(self.env.dsn, autocommit=True)

    def _run(self) -> None:
        try:
            with self._connect() as conn:
                cur = conn.cursor()
                while not self.done.is_set():
                    n = self.count
                    cur.execute("BEGIN")
                    cur.execute(f"UPDATE {self.table} SET v = %s, n = n + 1 WHERE id = %s", (f"load {n}", n % 100 + 1))
                    if n % 3 == 0:
                        cur.execute(f"INSERT INTO {self.table} VALUES (%s, 'new', 0)", (1000 + n,))
                    if n % 3 == 1 and n > 3:
                        cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (1000 + n - 4,))
                    cur.execute("COMMIT")
                    self.count += 1
                    time.sleep(0.01)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            self.error = e

    def __enter__(self) -> "Load":
        self.started = time.monotonic()
        self.thread.start()
        return self

    def rate(self) -> float:
        return self.count / (time.monotonic() - self.started)

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(30)


def busy_table(env, table: str, options: dict | None = None) -> str:
    """A table of 300 rows, registered and replicated: its name."""
    env.sql(f"CREATE TABLE {env.q(table)} (id int PRIMARY KEY, v text, n int)")
    env.sql(f"INSERT INTO {env.q(table)} VALUES " + ", ".join(f"({i}, 'v{i}', {i})" for i in range(1, 301)))
    name = env.register_table(table, options=options)
    assert env.cdc("register", "--table", name) == 0
    env.replicate(table)
    return name


@pytest.fixture(params=["postgresql", "mariadb", pytest.param("delta", marks=pytest.mark.delta_long)])
def benv(request):
    return request.getfixturevalue({"postgresql": "it_env", "mariadb": "it_mariadb", "delta": "it_delta"}[request.param])


def test_reconcile_deep_and_repair_of_a_table_under_load(benv, spark, capsys, tmp_path):
    env = benv
    name = busy_table(env, "busy")
    target = env.target_ref("busy")
    spark.sql(f"DELETE FROM {target} WHERE id IN (150, 151, 152)")  # behind the engine's back
    with open(tmp_path / "driver.log", "w") as log, Load(env, "busy") as load:
        driver = start_driver(env, "busy", log)

        def alive() -> bool:
            return driver.poll() is None and load.error is None

        try:
            eventually(lambda: load.count > 100, "the load running", 60, 0.2, alive=alive)
            capsys.readouterr()
            assert env.cdc("reconcile", "--table", name, "--format", "json") == 1  # DRIFT, as a person runs it
            (row,) = json.loads(capsys.readouterr().out)["tables"]
            assert row["status"] == "DRIFT" and row["difference"] == -3, row
            assert row["compared_snapshot"] is not None

            assert env.cdc("reconcile", "--deep", "--table", name, "--format", "json") == 1
            (row,) = json.loads(capsys.readouterr().out)["tables"]
            assert row["deep"]["compared"] and row["deep"]["missing"] == 3, row
            assert row["deep"]["extra"] == row["deep"]["different"] == 0, row
            assert sorted(k["key"]["id"] for k in row["deep"]["keys"]) == [150, 151, 152]

            assert env.cdc("repair", "--table", name) == 0
            out = capsys.readouterr().out
            assert "3 key(s) differ" in out and "after the repair: OK" in out, out

            assert env.cdc("reconcile", "--deep", "--table", name) == 0, capsys.readouterr().out
            assert alive(), f"the load or the job ended: {load.error}"
            assert load.rate() >= LOAD_TPS, f"the load ran {load.rate():.1f} transactions/s"
        finally:
            interrupt(driver)
    assert load.error is None, load.error


def test_maintain_and_an_outside_delete_on_a_busy_target(it_env, spark, capsys, tmp_path):
    """`cdc maintain` has its running job hand the table over, so its rewrite does not lose
    the race with the job's commits; `cdc pause`, as a person runs it, makes room for an
    operator's own DELETE, and the job applies the changes made meanwhile after it."""
    env = it_env
    name = busy_table(env, "busier", {"compact_every_files": 4})
    target = env.target_ref("busier")
    with open(tmp_path / "driver.log", "w") as log, Load(env, "busier") as load:
        driver = start_driver(env, "busier", log)

        def alive() -> bool:
            return driver.poll() is None and load.error is None

        try:
            eventually(lambda: load.count > 100, "the load running", 60, 0.2, alive=alive)
            capsys.readouterr()
            assert env.cdc("maintain", "--table", name) == 0
            out = capsys.readouterr().out
            assert "data files" in out and "maintenance failed" not in out, out
            pause = subprocess.Popen([sys.executable, "-m", "cdc.cli.main", "--config", str(env.config), "pause",
                                      "--table", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                lines = []
                eventually(lambda: lines.append(pause.stdout.readline()) or "paused" in lines[-1],
                           "the table paused", 120, 0.1, alive=lambda: pause.poll() is None)
                spark.sql(f"DELETE FROM {target} WHERE id IN (150, 151, 152)")  # commits at the first try
                resumed_at = load.count
            finally:
                pause.send_signal(signal.SIGINT)
                assert pause.wait(60) == 0, pause.stdout.read()
            assert "given back" in pause.stdout.read()

            def applied_after_the_pause() -> bool:
                newest = spark.table(target).where("v LIKE 'load %'") \
                    .selectExpr("max(cast(substring(v, 6) AS int)) AS n").first()["n"]
                return newest is not None and newest > resumed_at

            eventually(applied_after_the_pause, "a change made during the pause applied", 120, 0.5, alive=alive)
            held = {r.id for r in spark.table(target).where("id BETWEEN 149 AND 153").collect()}
            assert held == {149, 153}  # the operator's DELETE stands
        finally:
            interrupt(driver)
    assert load.error is None, load.error
