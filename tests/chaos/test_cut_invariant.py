"""The consistent cut under load: transfers between accounts of two tables of one source,
with accounts opened and closed, while `cdc run` applies them (the tables in queries of
their own, which commit apart, then in one shared query), advances their cut itself
(`cut_every_s`) and is killed at random moments, and a reader polls the cut. At every cut
it reads, both invariants hold: the balance of all accounts, and each transaction in both
tables or in neither (each adds to the `moved` count of both tables alike). The latest snapshots, read alike, break them at least once,
so the check can fail. The cut advances under load, and at the end it holds the source's
last transaction and the targets equal the source.

CDC_CUT_SEED fixes the seed."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
import traceback

import psycopg
import pytest
import yaml

from cdc.config import load_tables
from cdc.report.cut import advance, read_state
from tests.chaos.test_chaos import kill
from tests.conftest import _cleanup, interrupt, postgres_env
from tests.eventually import eventually

ACCOUNTS = 20
TOTAL = ACCOUNTS * 2 * 100
LOADED_S = 15  # the last driver's time under load


@pytest.fixture(scope="module")
def bank(stack, settings, it_env, tmp_path_factory):
    """A source of its own, so that its cut covers this test's tables alone."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("cutk"), it_env.source + "c")
    s = env.schema
    for t in ("checking", "savings"):
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, balance bigint NOT NULL, moved bigint NOT NULL)')
        env.sql(f'INSERT INTO "{s}".{t} SELECT g, 100, 0 FROM generate_series(1, {ACCOUNTS}) g')
        env.register_table(t)
    assert env.cdc("register") == 0
    env.replicate(("checking", "savings"))
    yield env
    _cleanup(env)


class Transfers(threading.Thread):
    """Random transactions, each changing both tables: a transfer one way or the other, a
    checking account opened from a savings account, or one closed into it."""

    def __init__(self, dsn: str, schema: str, seed: int):
        super().__init__(daemon=True)
        self.dsn, self.s, self.rng, self.stop = dsn, schema, random.Random(seed), threading.Event()
        self.transactions, self.error = 0, None

    def _one(self, conn) -> None:
        s, rng = self.s, self.rng
        checking = [r[0] for r in conn.execute(f'SELECT id FROM "{s}".checking')]
        saving = rng.randint(1, ACCOUNTS)
        r = rng.random()
        if r < 0.1 or not checking:  # an account opened, funded from savings
            new = max(checking, default=0) + 1
            conn.execute(f'UPDATE "{s}".savings SET balance = balance - 7, moved = moved + 1 WHERE id = %s', (saving,))
            conn.execute(f'INSERT INTO "{s}".checking VALUES (%s, 7, 1)', (new,))
        elif r < 0.2 and len(checking) > 5:  # an account closed into savings, its count with it
            gone = rng.choice(checking)
            balance, moved = conn.execute(f'DELETE FROM "{s}".checking WHERE id = %s RETURNING balance, moved',
                                          (gone,)).fetchone()
            conn.execute(f'UPDATE "{s}".savings SET balance = balance + %s, moved = moved - %s WHERE id = %s',
                         (balance, moved, saving))
        else:
            amount = rng.randint(1, 9) * (1 if r < 0.6 else -1)
            conn.execute(f'UPDATE "{s}".checking SET balance = balance - %s, moved = moved + 1 WHERE id = %s',
                         (amount, rng.choice(checking)))
            conn.execute(f'UPDATE "{s}".savings SET balance = balance + %s, moved = moved + 1 WHERE id = %s',
                         (amount, saving))

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    with conn.transaction():
                        self._one(conn)
                    self.transactions += 1
                    time.sleep(self.rng.uniform(0.02, 0.08))
        except BaseException:  # noqa: BLE001 - reported by the test
            self.error = traceback.format_exc()


def balances(env, snapshots: dict[str, int | None]) -> tuple[int, int, int]:
    """(total balance, checking's moved, savings' moved), each table at its snapshot."""
    out = []
    for t in ("checking", "savings"):
        snapshot = snapshots[f"{env.schema}.{t}"]
        rows = (env.catalog.load_table(f"{env.schema}.{t}").scan(snapshot_id=snapshot).to_arrow().to_pylist()
                if snapshot is not None else [])
        out.append((sum(r["balance"] for r in rows), sum(r["moved"] for r in rows)))
    return out[0][0] + out[1][0], out[0][1], out[1][1]


def whole(found: tuple[int, int, int]) -> bool:
    return found[0] == TOTAL and found[1] == found[2]


class Reader(threading.Thread):
    """Reads the cut that the running job advances (`cut_every_s`) every second; reads the
    latest snapshots alike."""

    def __init__(self, env, tables):
        super().__init__(daemon=True)
        self.env, self.tables, self.stop = env, tables, threading.Event()
        self.cuts: list[tuple] = []  # (transaction, snapshots, what they hold)
        self.latest_broken = 0
        self.error = None

    def run(self) -> None:
        env, names = self.env, [t.name for t in self.tables]
        try:
            while not self.stop.wait(1.0):
                standing = read_state(env.settings, env.source)
                if standing and standing.get("transaction"):
                    self.cuts.append((standing["transaction"], standing["tables"], balances(env, standing["tables"])))
                latest = {n: env.catalog.load_table(n).current_snapshot().snapshot_id for n in names}
                self.latest_broken += not whole(balances(env, latest))
        except BaseException:  # noqa: BLE001 - reported by the test
            self.error = traceback.format_exc()


def test_every_cut_read_under_load_and_kills_holds_each_transaction_whole(bank, tmp_path):
    env, s = bank, bank.schema
    seed = int(os.environ.get("CDC_CUT_SEED") or random.randrange(10**9))
    rng = random.Random(seed)
    configs = []
    for shared in (False, True):  # queries of their own: the tables commit apart; one shared
        doc = yaml.safe_load(env.config.read_text())
        doc["spark"]["shared_query"] = shared
        doc["sources"][env.source]["cut_every_s"] = 0.5  # the job advances the cut
        configs.append(tmp_path / f"shared_{shared}.yaml")
        configs[-1].write_text(yaml.safe_dump(doc))
    tables = load_tables(env.settings, [f"{s}.*"])
    workload = Transfers(env.dsn, s, seed)
    reader = Reader(env, tables)
    workload.start()
    reader.start()
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        def driver(config) -> subprocess.Popen:
            """A driver, once it has applied a batch."""
            applied = log_path.read_text().count(" applied in ")
            proc = subprocess.Popen([sys.executable, "-m", "cdc.cli.main", "--config", str(config), "run", "--table",
                                     f"{s}.*"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            eventually(lambda: log_path.read_text().count(" applied in ") > applied, "a batch applied", 180,
                       alive=lambda: proc.poll() is None, detail=lambda: log_path.read_text()[-3000:])
            return proc

        for config in configs:  # killed at a random moment while it applies, in each way of running
            proc = driver(config)
            time.sleep(rng.uniform(1, 8))
            kill(proc)
            proc.wait(timeout=60)
        proc = driver(configs[1])
        time.sleep(LOADED_S)
        under_load = len({c[0] for c in reader.cuts})
        workload.stop.set()
        workload.join()
        env.wait_captured(env.marker())
        time.sleep(5)  # the cut read while the job catches up
        interrupt(proc)
    reader.stop.set()
    reader.join(timeout=120)
    assert workload.error is None, workload.error
    assert reader.error is None, reader.error
    env.replicate(("checking", "savings"), env.marker())
    final = advance(env.settings, env.source, tables, env.catalog).standing
    reader.cuts.append((final["transaction"], final["tables"], balances(env, final["tables"])))
    with psycopg.connect(env.dsn) as conn:  # the last cut holds the source's last transaction
        moved = [conn.execute(f'SELECT sum(moved) FROM "{s}".{t}').fetchone()[0] for t in ("checking", "savings")]
    assert reader.cuts[-1][2] == (TOTAL, *moved), (reader.cuts[-1], moved)
    broken = [c for c in reader.cuts if not whole(c[2])]
    figures = f"seed {seed}, {workload.transactions} transactions, {len(reader.cuts)} cuts read, " \
              f"{len({c[0] for c in reader.cuts})} distinct ({under_load} under load), latest snapshots broken " \
              f"{reader.latest_broken} time(s)"
    print(f"\ncut invariant: {figures}")
    assert not broken, f"{figures}; cuts that split a transaction: {broken[:3]}"
    assert under_load >= 3, figures  # the cut advanced under load
    assert reader.latest_broken > 0, figures  # the check can fail
    for t in ("checking", "savings"):
        env.assert_equal(t)
