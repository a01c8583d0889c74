"""Chaos: a seeded randomized workload at the source while the replication driver is
killed again and again (at exact crash points and at random moments); afterwards each
Iceberg table must equal its PostgreSQL table, compared by a hash of every row. The driver
runs the two tables in queries of their own and in one shared query (`spark.shared_query`)
in turn, so a kill also lands between tables of one shared batch.

CDC_CHAOS_SEED fixes the seed; `pytest --soak SECONDS` runs longer than CI's few minutes."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import psycopg
import yaml

from cdc.control.faults import ENV as CRASH_ENV
from tests.compare import differences, row_hashes, source_rows, target_rows

HOT_KEYS = 5
KEY_SPACE = 400


class Workload(threading.Thread):
    """Random transactions: inserts, updates, deletes, 1-5 statements each, heavy churn on
    a few hot keys, deletes followed by re-inserts of the same key."""

    def __init__(self, dsn: str, table: str, seed: int, until: float):
        super().__init__(daemon=True)
        self.dsn, self.table, self.rng, self.until = dsn, table, random.Random(seed), until
        self.transactions = self.statements = 0
        self.error: BaseException | None = None

    def _key(self) -> int:
        return self.rng.randrange(HOT_KEYS) if self.rng.random() < 0.3 else self.rng.randrange(KEY_SPACE)

    def _statement(self, conn) -> None:
        t, k, r = self.table, self._key(), self.rng.random()
        if r < 0.35:
            conn.execute(f"INSERT INTO {t} VALUES (%s, 0, %s, %s, now()) ON CONFLICT (id) DO UPDATE "
                         f"SET counter = {t}.counter + 1, note = EXCLUDED.note, updated_at = now()",
                         (k, f"n{self.rng.randrange(10**6)}", round(self.rng.uniform(-1e6, 1e6), 2)))
        elif r < 0.75:
            conn.execute(f"UPDATE {t} SET counter = counter + 1, amount = amount + %s, updated_at = now() "
                         f"WHERE id = %s", (round(self.rng.uniform(-100, 100), 2), k))
        elif r < 0.9:
            conn.execute(f"DELETE FROM {t} WHERE id = %s", (k,))
        else:  # delete and re-insert the same key
            conn.execute(f"DELETE FROM {t} WHERE id = %s", (k,))
            conn.execute(f"INSERT INTO {t} VALUES (%s, 100, 'reborn', 1.00, now())", (k,))
        self.statements += 1

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn) as conn:
                while time.monotonic() < self.until:
                    with conn.transaction():
                        for _ in range(self.rng.randint(1, 5)):
                            self._statement(conn)
                    self.transactions += 1
                    time.sleep(self.rng.uniform(0.01, 0.06))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def test_random_workload_with_driver_kills_ends_exact(it_env, request, tmp_path):
    env, s = it_env, it_env.schema
    seed = int(os.environ.get("CDC_CHAOS_SEED") or random.randrange(10**9))
    soak = request.config.getoption("--soak")
    rounds = max(4, soak // 30) if soak else 4
    rng = random.Random(seed)
    tables = ("chaos", "chaos_b")
    for t in tables:
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, counter int NOT NULL, note text, '
                f'amount numeric(14,2), updated_at timestamptz)')
        env.sql(f'INSERT INTO "{s}".{t} SELECT g, 0, \'seed\', g, now() FROM generate_series(0, {KEY_SPACE // 2}) g')
        env.register_table(t)
    assert env.cdc("register", "--table", f"{s}.chaos*") == 0
    configs = {}
    for mode, shared in (("own queries", False), ("shared query", True)):
        doc = yaml.safe_load(env.config.read_text())
        doc["spark"]["shared_query"] = shared
        configs[mode] = tmp_path / f"{mode.replace(' ', '_')}.yaml"
        configs[mode].write_text(yaml.safe_dump(doc))

    until = time.monotonic() + (soak or 75)
    workloads = [Workload(env.dsn, f'"{s}".{t}', seed + i, until) for i, t in enumerate(tables)]
    for workload in workloads:
        workload.start()
    kills = []
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        # every kind of kill: the crash points first (while changes flow), in random order
        plan = rng.sample(["before-merge", "after-commit"], 2) + ["random"] * (rounds - 2)
        for i, how in enumerate(plan):
            crash = f"{how}:{rng.randint(1, 3)}" if how != "random" else None
            mode = list(configs)[i % 2]
            extra = {CRASH_ENV: crash} if crash else {}
            proc = subprocess.Popen([sys.executable, "-m", "cdc.cli.main", "--config", str(configs[mode]), "run",
                                     "--table", f"{s}.chaos*"], env={**os.environ, **extra}, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                proc.wait(timeout=rng.uniform(12, 30) if crash is None else 120)
            except subprocess.TimeoutExpired:
                pass
            code = proc.poll()
            kill(proc)
            kills.append({"round": i, "how": crash or "random moment", "mode": mode, "exit": code})
            assert code in (None, -signal.SIGKILL), f"driver failed on its own (exit {code}):\n" + \
                log_path.read_text()[-3000:]
    for workload in workloads:
        workload.join()
        assert workload.error is None, workload.error
    marker = env.marker()  # the last workload transaction may have changed no row
    env.replicate(tables, marker)

    figures = {"seed": seed, "transactions": sum(w.transactions for w in workloads),
               "statements": sum(w.statements for w in workloads), "kills": kills}
    diffs = []
    for t in tables:
        src = source_rows(env.dsn, s, t, ("id",))
        dst = target_rows(env.catalog, f"{s}.{t}", ("id",))  # asserts no key twice
        diffs += [f"{t}: {d}" for d in differences(src, dst)]
        if row_hashes(src) != row_hashes(dst, reference=src):
            diffs.append(f"{t}: row hashes differ")
        figures[f"final_rows_{t}"] = len(src)
    figures["equal"] = not diffs
    (env.settings.state_dir / "chaos-last.json").write_text(json.dumps(figures, indent=2))
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        print(f"\nchaos: {json.dumps(figures)}")
    assert not diffs, f"seed {seed}: targets differ:\n" + "\n".join(diffs)
