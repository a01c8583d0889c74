"""The cut section: how old the consistent cut (report/cut.py) is while two tables of one
source take transactions that change both, through the real connector. One continuous
`cdc run` applies them; beside it the cut advances every CUT_EVERY_S, as `cdc cut --every`
does. For each source transaction, its age is the time from its commit to the first cut
that holds it having been published (the tags moved): `cut_age_p50_s`, `cut_age_p95_s`,
and `cut_age_vs_freshness`, the p95 over the single table's `freshness_p95_s` of the same
run (goal: at most 2)."""
from __future__ import annotations

import statistics
import threading
import time

from bench.freshness import PREFILL, TICK_S, Driver, wait_applied
from bench.workload import create_source_table, drop_target, registration
from cdc.jobs.supervisor import run
from cdc.register.connector import ConnectClient, connector_name, topic_for
from cdc.register.registrar import register
from cdc.report.cut import advance
from cdc.sources import postgres

CUT_EVERY_S = 0.5
TRANSACTIONS_PER_TICK = 10
XID_SPACE = 1 << 32  # Debezium's PostgreSQL txId is the 32-bit xid


class Transfers(Driver):
    """Once the job has applied a first change, TRANSACTIONS_PER_TICK transactions every
    TICK_S, each updating rows of both tables (`rate` row changes a second in all), for
    `seconds`; the cut advances meanwhile, and until it holds the last transaction."""

    def __init__(self, settings, catalog, regs, rate: int, seconds: float):
        super().__init__()
        self.settings, self.catalog, self.regs, self.seconds = settings, catalog, regs, seconds
        self.rows = max(1, int(rate * TICK_S) // (2 * TRANSACTIONS_PER_TICK))  # per table and transaction
        self.committed: list[tuple[int, float]] = []  # (txid, commit time)
        self.published: list[tuple[float, int]] = []  # (time a cut was published, its txid)
        self.started = self.ended = None
        self.done = threading.Event()

    def drive(self) -> None:
        source = self.regs[0].source.name
        topics = {topic_for(source, r): r for r in self.regs}
        with postgres.connect(self.settings, source) as conn:
            self._transaction(conn, 0)
            self._captured(conn)
            wait_applied(self.settings, self.catalog, topics, timeout_s=600)
            cutter = threading.Thread(target=self._cut, daemon=True, name="bench-cut")
            cutter.start()
            self.started, tick = time.time(), 0
            while time.time() - self.started < self.seconds:
                for i in range(TRANSACTIONS_PER_TICK):
                    self._transaction(conn, tick * TRANSACTIONS_PER_TICK + i)
                tick += 1
                time.sleep(max(0.0, self.started + tick * TICK_S - time.time()))
            self.ended = time.time()
            self._captured(conn)
        wait_applied(self.settings, self.catalog, topics, timeout_s=600)
        last = self.committed[-1][0]
        deadline = time.monotonic() + 120
        while not any(txid >= last for _, txid in self.published) and time.monotonic() < deadline:
            time.sleep(CUT_EVERY_S)
        self.done.set()
        cutter.join(timeout=60)

    def _transaction(self, conn, n: int) -> None:
        """One transaction: rows of the first table and of the second, updated."""
        first = (n * self.rows * 7919) % PREFILL
        ids = [((first + i) % PREFILL,) for i in range(self.rows)]
        with conn.transaction():
            with conn.cursor() as cur:
                for reg in self.regs:
                    cur.executemany(f"UPDATE {postgres.qualified(reg)} SET v = md5(random()::text), at = now() "
                                    f"WHERE id = %s", ids)
                txid = cur.execute("SELECT txid_current()").fetchone()[0] % XID_SPACE
        self.committed.append((txid, time.time()))

    def _captured(self, conn) -> None:
        source = self.regs[0].source.name
        marker = postgres.write_marker(conn, self.settings.sources[source].signal_table)
        ConnectClient.of(self.settings).wait_captured(connector_name(source), marker)

    def _cut(self) -> None:
        source = self.regs[0].source.name
        while not self.done.is_set():
            began = time.monotonic()
            standing = advance(self.settings, source, self.regs, self.catalog).standing or {}
            if standing.get("transaction"):
                self.published.append((time.time(), int(standing["transaction"])))
            time.sleep(max(0.0, began + CUT_EVERY_S - time.monotonic()))


def ages(committed: list[tuple[int, float]], published: list[tuple[float, int]], since: float) -> list[float]:
    """Per transaction committed at or after `since`: seconds from its commit to the first
    cut published that holds it."""
    out = []
    for txid, at in committed:
        if at < since:
            continue
        held = next((t for t, cut in published if cut >= txid and t >= at), None)
        if held is not None:
            out.append(held - at)
    return out


def measure(settings, catalog, rate: int, seconds: float, freshness_p95_s: float | None) -> dict:
    regs = [registration(settings, name, captured=True) for name in ("cut_a", "cut_b")]
    for reg in regs:
        drop_target(settings, catalog, reg)
        create_source_table(settings, reg, rows=PREFILL)
    register(settings, regs)
    run(settings, regs, available_now=True)  # the snapshot of the prefilled rows
    driver = Transfers(settings, catalog, regs, rate, seconds)
    driver.start()
    run(settings, regs, available_now=False)
    driver.join()
    if driver.error is not None:
        raise driver.error
    values = sorted(ages(driver.committed, driver.published, driver.started + min(10.0, seconds / 5)))
    if len(values) < 20:
        raise RuntimeError(f"the cut held {len(values)} of {len(driver.committed)} transactions")
    p = statistics.quantiles(values, n=100)
    print(f"cut: {len(values):,} transactions of two tables, {len(driver.published)} cuts: age p50 {p[49]:.2f}s, "
          f"p95 {p[94]:.2f}s, max {values[-1]:.2f}s", flush=True)
    figures = {"cut_age_p50_s": round(p[49], 2), "cut_age_p95_s": round(p[94], 2), "cut_age_max_s": round(values[-1], 2),
               "cut_transactions": len(values)}
    if freshness_p95_s:
        figures["cut_age_vs_freshness"] = round(p[94] / freshness_p95_s, 2)
    return figures
