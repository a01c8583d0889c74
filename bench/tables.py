"""The many-tables section: one continuous `cdc run` (`spark.shared_query`: one query plans the
hundred topics' batches) over a hundred registered tables of
mixed widths (4, 12 and 36 columns in turn, each shape's events recorded from the real
connector) whose change rates follow a Zipf law (a few busy, most quiet) adding up to a
total rate.

Figures: `tables_100_start_s` (from the job's start until every table has applied its
first change), `tables_100_idle_cpu_share` (the CPU the job's driver, Python and JVM,
uses while every table is quiet, over all the machine's cores),
`tables_100_idle_jit_share` (of it, the JVM's JIT compilers', still compiling the code
the tables' start ran), `tables_100_freshness_p50_s`/`_p95_s` (every change event of every
table, source time to the commit that made it visible), `tables_100_worst_table_p95_s` (the
p95 of the table worst served, so a busy table starving the others shows),
`tables_100_cpu_share` under load, and what holds the job back: `tables_100_batches` (the
tables' commits from the start of the load until every table has applied it),
`tables_100_commit_cpu_s` (the driver's CPU seconds of a direct-path commit among them, over
`tables_100_direct_commits`) and `tables_100_cpu_s_per_batch` (the driver's CPU seconds over
that time, divided by them; `tables_100_jit_s_per_batch` of them the JIT compilers')."""
from __future__ import annotations

import os
import random
import statistics
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.freshness import Driver, commit_times, latencies, wait_applied
from bench.workload import WIDTHS, Events, changes, fill, jvm_pid, record_template, registration, template_name
from cdc.config.clients import kafka_access
from cdc.jobs import metrics
from cdc.jobs.supervisor import run
from cdc.control.kafka import end_offsets

TICK_S = 0.1
ZIPF_S = 1.5  # table i (from 1) gets a share of the rate proportional to 1 / i**ZIPF_S
ROWS = 1_000  # rows of each target
IDLE_S = 30
RATES_SEED = 100  # the order rates are dealt to the tables in (`rates`)


def rates(tables: int, total: float) -> list[float]:
    """Each table's change events a second, dealt to the tables in an order of their own (the
    same each run): a table's name tells nothing of its rate, as in a real deployment."""
    weights = [1 / (i + 1) ** ZIPF_S for i in range(tables)]
    random.Random(RATES_SEED).shuffle(weights)
    return [total * w / sum(weights) for w in weights]


def stat_seconds(stat: str) -> float:
    """The user and system CPU seconds of a /proc `stat` line (a process's or a thread's)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The CPU time of this Python process and of the driver's JVM (`pid`) so far."""
    mine = os.times()
    return mine.user + mine.system + stat_seconds(Path(f"/proc/{pid}/stat").read_text())


def compiler_seconds(pid: int) -> float:
    """The CPU time of the JVM's JIT compiler threads (`C1`/`C2 CompilerThread`) so far."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            raw = (task / "stat").read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        if raw[raw.index("(") + 1:raw.rindex(")")].startswith(("C1 Compiler", "C2 Compiler")):
            total += stat_seconds(raw)
    return total


class Load(Driver):
    """Drives the job: a first change per table (start-up), a quiet spell (idle CPU), then
    `seconds` of changes at `rates`; then waits until every table has applied them."""

    def __init__(self, settings, catalog, regs, topics: list[str], streams, rates_per_s: list[float], seconds: float,
                 jvm: int):
        super().__init__()
        self.settings, self.catalog, self.topics = settings, catalog, topics
        self.targets = dict(zip(topics, regs))
        self.streams, self.rates, self.seconds, self.jvm = streams, rates_per_s, seconds, jvm
        self.producer = Producer(kafka_access(settings).client(**{"linger.ms": 5}))
        self.figures: dict = {}
        self.offsets: dict[str, dict[int, int]] = {}  # each topic's end before the load
        self.started = self.ended = None
        self.load_cpu_s = 0.0  # the driver's CPU seconds from the load's start until every table applied it
        self.load_jit_s = 0.0  # of them, the JIT compilers'

    def drive(self) -> None:
        begun = time.monotonic()
        self._wait_applied()
        self.figures["tables_100_start_s"] = round(time.monotonic() - begun, 1)
        print(f"tables: every table applied its first change {self.figures['tables_100_start_s']}s after the start",
              flush=True)
        time.sleep(5)  # the last batches' commits settle
        jit = compiler_seconds(self.jvm)
        self.figures["tables_100_idle_cpu_share"] = self._cpu_share(lambda: time.sleep(IDLE_S))
        # of it, the JIT still compiling the code the tables' start ran (not a cost of quiet tables)
        self.figures["tables_100_idle_jit_share"] = round((compiler_seconds(self.jvm) - jit) / (
            IDLE_S * os.cpu_count()), 3)
        self.offsets = end_offsets(kafka_access(self.settings), self.topics)
        cpu, jit = cpu_seconds(self.jvm), compiler_seconds(self.jvm)
        commits = self._commit_cpu()
        self.figures["tables_100_cpu_share"] = self._cpu_share(self._write)
        self._wait_applied()
        self.load_cpu_s, self.load_jit_s = cpu_seconds(self.jvm) - cpu, compiler_seconds(self.jvm) - jit
        commit_s, count = (b - a for a, b in zip(commits, self._commit_cpu()))
        self.figures["tables_100_direct_commits"] = count
        self.figures["tables_100_commit_cpu_s"] = round(commit_s / count, 3) if count else None

    def _commit_cpu(self) -> tuple[float, int]:
        """Driver CPU seconds of the tables' direct-path commits so far, and their number."""
        each = [metrics.commit_cpu(reg.name) for reg in self.targets.values()]
        return sum(s for s, _ in each), sum(n for _, n in each)

    def _cpu_share(self, fn) -> float:
        """The share of all cores the driver (Python and JVM) used while `fn` ran."""
        cpu, wall = cpu_seconds(self.jvm), time.monotonic()
        fn()
        return round((cpu_seconds(self.jvm) - cpu) / ((time.monotonic() - wall) * os.cpu_count()), 3)

    def _write(self) -> None:
        owed = [0.0] * len(self.topics)
        self.started, tick = time.time(), 0
        while time.time() - self.started < self.seconds:
            for i, topic in enumerate(self.topics):
                owed[i] += self.rates[i] * TICK_S
                while owed[i] >= 1:
                    key, value = next(self.streams[i])
                    self.producer.produce(topic, key=key, value=value)
                    owed[i] -= 1
            self.producer.poll(0)
            tick += 1
            time.sleep(max(0.0, self.started + tick * TICK_S - time.time()))
        self.ended = time.time()
        if self.producer.flush(60):
            raise RuntimeError("could not deliver every change event")

    def _wait_applied(self) -> None:
        self.producer.flush(60)
        wait_applied(self.settings, self.catalog, self.targets, timeout_s=900)


def measure(spark, settings, catalog, sizes: dict) -> dict:
    n, total, seconds = sizes["tables"], sizes["tables_rate"], sizes["tables_s"]
    shapes = [(registration(settings, template_name(w)), *record_template(settings, w)) for w in WIDTHS]
    regs = [registration(settings, f"many_{i:03d}") for i in range(n)]
    # Table i has shape i % 3: busy and quiet tables of every width.
    topics = [fill(spark, settings, catalog, reg, shapes[i % len(shapes)][0], ROWS) for i, reg in enumerate(regs)]
    streams = [iter(changes(Events(*shapes[i % len(shapes)][1:]), ROWS, 1 << 40, seed=i)) for i in range(n)]
    load = Load(settings, catalog, regs, topics, streams, rates(n, total), seconds, jvm_pid(spark))
    for topic, stream in zip(topics, streams):  # the first change of each table
        key, value = next(stream)
        load.producer.produce(topic, key=key, value=value)
    load.start()
    # One query plans the hundred topics' batches (`spark.shared_query`), as a job of many tables is run.
    run(settings.model_copy(update={"spark": settings.spark.model_copy(update={"shared_query": True})}), regs,
        available_now=False)
    load.join()
    if load.error is not None:
        raise load.error
    since_ms = (load.started + min(10.0, seconds / 5)) * 1000
    per_table, batches, busiest = [], 0, []
    for reg, topic, rate in zip(regs, topics, load.rates):
        times = commit_times(catalog, reg, topic)
        commits = sum(1 for ms, _ in times if ms >= load.started * 1000)
        batches += commits
        values = latencies(settings, topic, load.offsets.get(topic, {}), times, since_ms)
        if values:
            per_table.append(sorted(values))
            busiest.append((rate, reg.name, commits, sorted(values)))
    for rate, name, commits, values in sorted(busiest, reverse=True)[:8]:  # where the p95's events are
        print(f"tables: {name} at {rate:,.0f} events/s, {commits} commits: freshness p50 "
              f"{statistics.median(values):.2f}s, p95 {_p95(values):.2f}s", flush=True)
    worst_served = sorted(busiest, key=lambda t: _p95(t[3]), reverse=True)
    for rate, name, commits, values in worst_served[:4]:  # the tables the worst p95 is of
        print(f"tables: worst served {name} at {rate:,.1f} events/s, {len(values)} events, {commits} commits: "
              f"freshness p50 {statistics.median(values):.2f}s, p95 {_p95(values):.2f}s, max {values[-1]:.2f}s",
              flush=True)
    print(f"tables: {sum(1 for t in busiest if _p95(t[3]) > 10)} of {len(busiest)} tables with a p95 over 10 s",
          flush=True)
    every = sorted(v for values in per_table for v in values)
    p = statistics.quantiles(every, n=100)
    worst = max(_p95(values) for values in per_table)
    measured = load.ended - since_ms / 1000
    cpu = load.figures
    cpu_per_batch, jit_per_batch = load.load_cpu_s / max(batches, 1), load.load_jit_s / max(batches, 1)
    print(f"tables: {n} tables, {len(every):,} events at {len(every) / measured:,.0f}/s: p50 {p[49]:.2f}s, "
          f"p95 {p[94]:.2f}s, worst table's p95 {worst:.2f}s; CPU idle {cpu['tables_100_idle_cpu_share']:.1%} "
          f"(the JIT compilers {cpu['tables_100_idle_jit_share']:.1%}), "
          f"under load {cpu['tables_100_cpu_share']:.1%}; {batches:,} batches, "
          f"{cpu_per_batch:.2f} CPU seconds each (the JIT {jit_per_batch:.2f})", flush=True)
    return {**load.figures, "tables_widths": list(WIDTHS), "tables_100_freshness_p50_s": round(p[49], 2),
            "tables_100_freshness_p95_s": round(p[94], 2),
            "tables_100_worst_table_p95_s": round(worst, 2),
            "tables_100_rate_events_per_s": round(len(every) / measured), "tables_count": n,
            "tables_100_shared_query": True,
            "tables_100_batches": batches, "tables_100_cpu_s_per_batch": round(cpu_per_batch, 2),
            "tables_100_jit_s_per_batch": round(jit_per_batch, 2)}


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[94] if len(values) > 1 else values[0]
