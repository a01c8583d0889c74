"""The steady section: one continuous `cdc run` over a table of 1,000 rows taking a few
changes each trigger interval, as most tables of a deployment do, once the job is past its
start. Figures: `steady_batches` (the commits with offsets over the measured time, after a
warm-up), `steady_cpu_s_per_batch` (the driver's CPU seconds, Python and JVM, over that
time, divided by them; `steady_jit_s_per_batch` of them the JIT compilers'),
`steady_compactions` (the running rewrites of small files among them,
`options.compact_every_files`), `commit_cpu_s` (the driver's CPU seconds of a commit on the
direct path, its Python and JVM threads', over `steady_direct_commits` of them: what a batch
costs the driver beside its task) and `steady_freshness_p50_s`/`_p95_s` (each change's source
time to the commit that made it visible)."""
from __future__ import annotations

import statistics
import time

from confluent_kafka import Producer

from bench.freshness import Driver, commit_times, json_source_ms, latencies, wait_applied
from bench.tables import compiler_seconds, cpu_seconds
from bench.workload import Events, changes, fill, jvm_pid, registration
from cdc.config.clients import kafka_access
from cdc.jobs import metrics
from cdc.jobs.supervisor import run
from cdc.control.kafka import end_offsets

ROWS = 1_000
EVENTS_PER_BATCH = 5  # produced each trigger interval: one batch of them (a delete in every other, on average)


class Trickle(Driver):
    """EVENTS_PER_BATCH change events each trigger interval for `warm_up_s` and then
    `seconds` (measured: the driver's CPU); then waits until the job applied them."""

    def __init__(self, settings, catalog, reg, topic: str, stream, warm_up_s: float, seconds: float, jvm: int):
        super().__init__()
        self.settings, self.catalog, self.reg, self.topic, self.stream = settings, catalog, reg, topic, stream
        self.warm_up_s, self.seconds, self.jvm = warm_up_s, seconds, jvm
        self.interval = reg.options.trigger_interval_s
        self.producer = Producer(kafka_access(settings).client(**{"linger.ms": 5}))
        self.offsets: dict[int, int] = {}  # the topic's end when the measured time began
        self.measured = (0.0, 0.0)  # epoch seconds the measured time began and ended
        self.cpu_s = self.jit_s = 0.0
        self.commits = (0.0, 0)  # driver CPU seconds of the direct commits over the measured time, and their number

    def drive(self) -> None:
        self._write(self.warm_up_s)
        self.producer.flush(60)
        self.offsets = end_offsets(kafka_access(self.settings), [self.topic]).get(self.topic, {})
        cpu, jit, began = cpu_seconds(self.jvm), compiler_seconds(self.jvm), time.time()
        commits = metrics.commit_cpu(self.reg.name)
        self._write(self.seconds)
        self.cpu_s, self.jit_s = cpu_seconds(self.jvm) - cpu, compiler_seconds(self.jvm) - jit
        self.commits = tuple(b - a for a, b in zip(commits, metrics.commit_cpu(self.reg.name)))
        self.measured = (began, time.time())
        self.producer.flush(60)
        wait_applied(self.settings, self.catalog, {self.topic: self.reg}, timeout_s=300)

    def _write(self, seconds: float) -> None:
        started, tick = time.time(), 0
        while time.time() - started < seconds:
            for _ in range(EVENTS_PER_BATCH):
                key, value = next(self.stream)
                self.producer.produce(self.topic, key=key, value=value)
            self.producer.poll(0)
            tick += 1
            time.sleep(max(0.0, started + tick * self.interval - time.time()))


def measure(spark, settings, catalog, template, events: Events, sizes: dict, name: str = "steady",
            source_ms_of=json_source_ms, **registered) -> dict:
    """The section's figures, named `<name>_...` (`commit_cpu_s` for "steady"), over change
    events made by `events` (the avro section gives its own, in Avro's wire format, and
    `source_ms_of`, how to read their source time) into a registration with `registered`."""
    reg = registration(settings, name, **registered)
    topic = fill(spark, settings, catalog, reg, template, ROWS)
    stream = iter(changes(events, ROWS, 1 << 40, seed=11))
    load = Trickle(settings, catalog, reg, topic, stream, sizes["steady_warm_up_s"], sizes["steady_s"],
                   jvm_pid(spark))
    load.start()
    run(settings, [reg], available_now=False)
    load.join()
    if load.error is not None:
        raise load.error
    began, ended = (t * 1000 for t in load.measured)
    times = commit_times(catalog, reg, topic)
    batches = sum(1 for ms, _ in times if began <= ms < ended)
    compactions = sum(1 for s in catalog.load_table(reg.target).snapshots()
                      if s.summary.operation.value == "replace" and began <= s.timestamp_ms < ended)
    values = latencies(settings, topic, load.offsets, times, began, source_ms_of=source_ms_of)
    p = statistics.quantiles(values, n=100)
    cpu, jit = load.cpu_s / max(batches, 1), load.jit_s / max(batches, 1)
    commit_s, commits = load.commits
    commit_cpu = round(commit_s / commits, 3) if commits else None
    print(f"{name}: {batches} batches of about {EVENTS_PER_BATCH} changes in {(ended - began) / 1000:.0f}s, "
          f"{cpu:.2f} CPU seconds each (the JIT {jit:.2f}), {compactions} rewrites of small files; "
          f"{commits} direct commits of {commit_cpu} CPU seconds each; "
          f"freshness p50 {p[49]:.2f}s, p95 {p[94]:.2f}s", flush=True)
    return {f"{name}_batches": batches, f"{name}_cpu_s_per_batch": round(cpu, 2),
            f"{name}_jit_s_per_batch": round(jit, 2), f"{name}_compactions": compactions,
            f"{name}_direct_commits": commits, "commit_cpu_s" if name == "steady" else f"{name}_commit_cpu_s": commit_cpu,
            f"{name}_freshness_p50_s": round(p[49], 2), f"{name}_freshness_p95_s": round(p[94], 2)}
