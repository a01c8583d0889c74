"""`cdc bootstrap` on the real stack: a parallel JDBC read in one exported snapshot while
the source keeps changing, an interrupted bootstrap that resumes in a new snapshot, and
Debezium's incremental snapshot. The target must equal the source row for row."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time

import psycopg

from cdc.control.faults import ENV as CRASH_ENV
from cdc.planning.bootstrap import PROPERTY, Bootstrap
from tests.compare import assert_equal
from tests.eventually import eventually


def churn_until(env, table: str, stop: threading.Event, seed: int, first_new: int, keys: int) -> None:
    """Transactions that update, insert and delete, some held open while others commit, so
    a snapshot taken meanwhile has transactions in flight."""
    rng = random.Random(seed)
    new = first_new
    with psycopg.connect(env.dsn) as conn:
        while not stop.is_set():
            ids = [rng.randrange(1, keys) for _ in range(5)]
            conn.execute(f'UPDATE "{env.schema}".{table} SET v = v || \'*\', n = n + 1 WHERE id = ANY(%s)', (ids,))
            time.sleep(rng.random() * 0.2)  # held open
            conn.execute(f'INSERT INTO "{env.schema}".{table} (id, v, n) VALUES (%s, \'late\', 1), (%s, \'late\', 2)',
                         (new, new + 1))
            conn.execute(f'DELETE FROM "{env.schema}".{table} WHERE id = %s', (rng.randrange(1, keys),))
            conn.commit()
            new += 2


def churning(env, table: str, keys: int, writers: int = 2):
    stop = threading.Event()
    threads = [threading.Thread(target=churn_until, args=(env, table, stop, i, 10**9 + i * 10**6, keys), daemon=True)
               for i in range(writers)]
    for t in threads:
        t.start()
    return stop, threads


def stop_churn(stop, threads) -> None:
    stop.set()
    for t in threads:
        t.join(60)


def make_table(env, table: str, rows: int, snapshot: str = "initial") -> str:
    """A registered table of `rows` rows: inserted after `register` (so Kafka holds them as
    changes), or before it with `snapshot: jdbc` (Kafka holds none of them)."""
    env.sql(f'CREATE TABLE "{env.schema}".{table} (id bigint PRIMARY KEY, v text, n numeric(14,2), '
            f'at timestamptz DEFAULT now(), d date DEFAULT current_date)')
    insert = (f'INSERT INTO "{env.schema}".{table} (id, v, n) SELECT g, md5(g::text), g / 7.0 '
              f'FROM generate_series(1, {rows}) g')
    if snapshot == "jdbc":
        env.sql(insert)
    name = env.register_table(table, **({"snapshot": snapshot} if snapshot != "initial" else {}))
    assert env.cdc("register", "--table", name) == 0
    if snapshot != "jdbc":
        env.sql(insert)
    return name


def bootstrap_state(env, table: str) -> Bootstrap:
    return Bootstrap.from_json(env.catalog.load_table(f"{env.schema}.{table}").properties[PROPERTY])


def test_jdbc_bootstrap_while_the_source_keeps_changing_then_streaming(it_env, capsys):
    name = make_table(it_env, "big", 300_000, snapshot="jdbc")  # a large table: no Debezium snapshot
    assert it_env.cdc("run", "--available-now", "--table", name) == 3  # its job waits for the bootstrap
    stop, threads = churning(it_env, "big", 300_000)
    try:
        capsys.readouterr()
        assert it_env.cdc("bootstrap", "--yes", "--table", name, "--chunk-rows", "100000") == 0
    finally:
        stop_churn(stop, threads)
    out = capsys.readouterr().out
    boot = bootstrap_state(it_env, "big")
    n = len(boot.chunks)
    assert f"chunk {n}/{n}" in out and "rows/s" in out and f"bootstrap {boot.id} (jdbc) done" in out
    assert boot.state == "done" and n >= 3 and len(set(boot.snapshots.values())) == 1
    it_env.replicate("big", it_env.marker())  # streaming applies only what the snapshot did not hold
    assert_equal(it_env.dsn, it_env.schema, "big", it_env.catalog, f"{it_env.schema}.big", ("id",))
    it_env.replicate("big", it_env.transaction(f'UPDATE "{it_env.schema}".big SET v = \'after\' WHERE id < 100',
                                               f'DELETE FROM "{it_env.schema}".big WHERE id BETWEEN 100 AND 150'))
    assert_equal(it_env.dsn, it_env.schema, "big", it_env.catalog, f"{it_env.schema}.big", ("id",))


def test_interrupted_jdbc_bootstrap_resumes_in_a_new_snapshot(it_env, capsys):
    s = it_env.schema
    name = make_table(it_env, "resumed", 3000)
    crashed = subprocess.run([sys.executable, "-m", "cdc.cli.main", "--config", str(it_env.config), "bootstrap",
                              "--yes", "--table", name, "--chunk-rows", "1000"],
                             env={**os.environ, CRASH_ENV: "bootstrap-chunk:2"}, capture_output=True, text=True,
                             timeout=600)
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert "chunk 2/3" in crashed.stdout
    # Changes in every chunk's range while the bootstrap is down.
    it_env.transaction(f'UPDATE "{s}".resumed SET v = \'between\' WHERE id % 100 = 0',
                       f'DELETE FROM "{s}".resumed WHERE id % 250 = 1',
                       f'INSERT INTO "{s}".resumed (id, v, n) SELECT g, \'between\', 0 FROM generate_series(5000, 5010) g')
    capsys.readouterr()
    assert it_env.cdc("run", "--available-now", "--table", name) == 3
    assert f"cdc bootstrap --table {name}" in capsys.readouterr().err
    assert it_env.cdc("bootstrap", "--yes", "--table", name, "--chunk-rows", "1000") == 0
    assert "resuming" in capsys.readouterr().out
    boot = bootstrap_state(it_env, "resumed")
    assert len(boot.snapshots) == 3 and len(set(boot.snapshots.values())) == 2  # two snapshots, by key range
    rows = it_env.catalog.load_table(f"{s}.resumed").scan(selected_fields=("id",)).to_arrow()
    assert rows.num_rows == len(set(rows.column("id").to_pylist()))
    it_env.replicate("resumed", it_env.marker())
    assert_equal(it_env.dsn, s, "resumed", it_env.catalog, f"{s}.resumed", ("id",))


def test_debezium_bootstrap_refills_through_the_incremental_snapshot(it_env, spark, capsys):
    s = it_env.schema
    name = make_table(it_env, "viadbz", 2000)
    it_env.replicate("viadbz", it_env.marker())
    spark.sql(f"DELETE FROM {it_env.target_ref('viadbz')} WHERE id <= 100")  # damage behind the engine's back
    stop, threads = churning(it_env, "viadbz", 2000, writers=1)
    try:
        capsys.readouterr()
        assert it_env.cdc("bootstrap", "--yes", "--table", name, "--method", "debezium") == 0
    finally:
        stop_churn(stop, threads)
    out = capsys.readouterr().out
    assert "incremental snapshot" in out and " rows, " in out and "rows/s" in out  # progress
    assert bootstrap_state(it_env, "viadbz").method == "debezium"
    it_env.replicate("viadbz", it_env.marker())
    assert_equal(it_env.dsn, s, "viadbz", it_env.catalog, f"{s}.viadbz", ("id",))
    assert json.loads(it_env.catalog.load_table(f"{s}.viadbz").properties[PROPERTY])["state"] == "done"


def test_table_registered_and_bootstrapped_while_another_streams(it_env, tmp_path):
    """A running job of one table goes on, untouched, while another table is registered
    (Debezium's incremental snapshot) and bootstrapped (JDBC); both end exact."""
    from tests.compare import differences, source_rows, target_rows
    from tests.conftest import interrupt, start_driver

    s = it_env.schema
    it_env.sql(f'CREATE TABLE "{s}".steady (id int PRIMARY KEY, v int)')
    it_env.sql(f'INSERT INTO "{s}".steady SELECT g, 0 FROM generate_series(1, 200) g')
    steady = it_env.register_table("steady")
    assert it_env.cdc("register", "--table", steady) == 0
    log = tmp_path / "steady.log"
    with open(log, "w") as out:
        proc = start_driver(it_env, "steady", out)
    try:
        it_env.transaction(f'UPDATE "{s}".steady SET v = v + 1 WHERE id <= 100')
        name = make_table(it_env, "joiner", 5000)  # registered while the connector and the job run
        it_env.transaction(f'UPDATE "{s}".steady SET v = v + 1 WHERE id > 100', f'DELETE FROM "{s}".steady WHERE id = 7')
        assert it_env.cdc("bootstrap", "--yes", "--table", name, "--chunk-rows", "2000") == 0
        it_env.transaction(f'INSERT INTO "{s}".steady VALUES (500, 5)', f'UPDATE "{s}".joiner SET v = \'late\' WHERE id < 10')
        it_env.replicate("joiner", it_env.marker())
        assert_equal(it_env.dsn, s, "joiner", it_env.catalog, f"{s}.joiner", ("id",))
        eventually(lambda: not differences(source_rows(it_env.dsn, s, "steady", ("id",)),
                                           target_rows(it_env.catalog, f"{s}.steady", ("id",))),
                   "exact running table after the changes", 180, 1, alive=lambda: proc.poll() is None,
                   detail=lambda: log.read_text()[-3000:])
        assert proc.poll() is None, log.read_text()[-3000:]  # it never stopped
    finally:
        interrupt(proc)
    assert proc.returncode == 0 and "retrying" not in log.read_text(), log.read_text()[-3000:]


def test_bootstrap_as_typed_asks_only_before_emptying_rows(it_env, capsys, monkeypatch):
    """`cdc bootstrap` without --yes: a just registered target (no snapshot yet) is filled
    with no question; one that holds rows is emptied only after a yes on the terminal, and
    without a terminal the command names --yes."""
    from cdc.cli import prompt

    s = it_env.schema
    name = make_table(it_env, "typed", 500, snapshot="jdbc")
    assert it_env.catalog.load_table(f"{s}.typed").current_snapshot() is None
    assert it_env.cdc("bootstrap", "--table", name, "--method", "jdbc") == 0
    assert_equal(it_env.dsn, s, "typed", it_env.catalog, f"{s}.typed", ("id",))
    capsys.readouterr()
    assert it_env.cdc("bootstrap", "--table", name) == 2  # rows to empty, and no terminal to ask on
    assert "pass --yes" in capsys.readouterr().err
    asked = []
    monkeypatch.setattr(prompt, "interactive", lambda: True)
    for answer, code in (("n", 2), ("y", 0)):
        monkeypatch.setattr(prompt, "_input", lambda text, answer=answer: asked.append(text) or answer)
        it_env.sql(f'UPDATE "{s}".typed SET v = \'{answer}\' WHERE id <= 10')
        assert it_env.cdc("bootstrap", "--table", name) == code
        assert "(500 rows)" in asked[-1] and asked[-1].endswith("Empty it? [y/N] ")
    it_env.replicate("typed", it_env.marker())
    assert_equal(it_env.dsn, s, "typed", it_env.catalog, f"{s}.typed", ("id",))
