"""Prometheus metrics of the running job, per table: change events read and applied,
dead letters, commit retries, batch duration and the time of each batch step, and the
lag of each Kafka partition. `cdc run --metrics-port N` serves them on /metrics."""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from cdc.errors import ConfigError

EVENTS_READ = Counter("cdc_events_read", "Change event records read from Kafka", ["table"])
EVENTS_APPLIED = Counter("cdc_events_applied", "Change event records committed to the target", ["table"])
DEAD_LETTERS = Counter("cdc_dead_letters", "Records set aside in the dead-letter table", ["table"])
COMMIT_RETRIES = Counter("cdc_commit_retries", "Commits run again after a conflict with another commit",
                         ["table"])
BATCH_SECONDS = Histogram("cdc_batch_duration_seconds", "Wall time of an applied micro-batch", ["table"],
                          buckets=(0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300))
STEP_SECONDS = Counter("cdc_batch_step_seconds", "Wall time spent in each step of the applied batches",
                       ["table", "step"])
COMMIT_CPU_SECONDS = Histogram("cdc_direct_commit_cpu_seconds",
                               "Driver CPU of a batch's commit on the direct path (the delete memory's append "
                               "and the target's RowDelta)", ["table"],
                               buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2))
LAG = Gauge("cdc_lag_records", "Records in Kafka not yet applied, per partition", ["table", "partition"])
FAILURES = Counter("cdc_table_failures", "Failures of a table's query (retried or given up)", ["table"])
CUT_AGE = Gauge("cdc_consistent_cut_age_seconds", "Seconds the consistent cut is behind its source at the job's "
                "last advance of it (sources.<name>.cut_every_s): the age of the oldest transaction not yet in the "
                "cut, 0 when it holds every one", ["source"])
CAPTURING = Gauge("cdc_source_capturing", "1 while the source's connector and tasks run, else 0", ["source"])

APPLY_STEPS = ("truncate", "delete memory", "merge", "append")  # what follows decoding: the apply proper


def serve(port: int, address: str = "0.0.0.0") -> None:
    """Serve /metrics on `port` from a daemon thread."""
    try:
        start_http_server(port, addr=address)
    except OSError as e:
        raise ConfigError(f"cannot serve metrics on port {port}: {e.strerror or e}",
                          hint="choose a free port with --metrics-port") from None


def batch_applied(table: str, records: int, bad: int, seconds: float, steps: dict[str, float]) -> None:
    EVENTS_READ.labels(table).inc(records)
    EVENTS_APPLIED.labels(table).inc(records - bad)
    if bad:
        DEAD_LETTERS.labels(table).inc(bad)
    BATCH_SECONDS.labels(table).observe(seconds)
    for step, s in steps.items():
        STEP_SECONDS.labels(table, step).inc(s)


def batch_seconds(table: str) -> float:
    """Seconds this process spent applying `table`'s batches."""
    return BATCH_SECONDS.labels(table)._sum.get()


def step_seconds(table: str, steps=APPLY_STEPS) -> float:
    """Seconds this process spent in `steps` of `table`'s batches."""
    return sum(STEP_SECONDS.labels(table, s)._value.get() for s in steps)


def commit_cpu(table: str) -> tuple[float, int]:
    """Driver CPU seconds of this process's direct-path commits of `table`, and their number."""
    return COMMIT_CPU_SECONDS.labels(table)._sum.get(), int(sum(
        b.get() for b in COMMIT_CPU_SECONDS.labels(table)._buckets))


def record_lag(table: str, ends: dict[int, int], done: dict[int, int]) -> None:
    """The lag gauge per partition: Kafka's end offset minus the end of what is applied."""
    for partition, end in ends.items():
        LAG.labels(table, str(partition)).set(max(0, end - done.get(partition, 0)))
