"""How a table's job takes a backlog: batches sized from the memory and the topic's record
size (never all of a week's changes at once), and progress lines with the rate and the time
left while it catches up."""
from __future__ import annotations

import math
import time

from cdc.log import log
from cdc.sinks.session import jvm_class

BATCH_MEMORY_SHARE = 0.5  # of the heap, for the raw records of the batches under way at once
AUTO_MIN_RECORDS = 10_000  # an automatic cap never goes below this ...
AUTO_MAX_RECORDS = 1_000_000  # ... nor above this (a batch commits at least this often)
AUTO_UNKNOWN_RECORDS = 100_000  # the cap when the topic has no record to size yet
AGE_S = 10.0  # a waiting batch's claim to a slot grows by one (its records doubled) each AGE_S
UNKNOWN_RECORDS = 1 << 20  # what a batch of unknown size claims as
BEHIND_RECORDS = 10_000  # a continuous job this far behind logs its progress ...
PROGRESS_EVERY_S = 15  # ... this often (and a job catching up, --available-now or replay, too)


def auto_batch_cap(heap_bytes: int, record_bytes: float | None, batches: int) -> int:
    """The most records a batch takes when `max_offsets_per_trigger` is unset: the
    records of `batches` under way at once fit in BATCH_MEMORY_SHARE of the heap."""
    if not record_bytes:
        return AUTO_UNKNOWN_RECORDS
    cap = int(heap_bytes * BATCH_MEMORY_SHARE / max(batches, 1) / record_bytes)
    return max(AUTO_MIN_RECORDS, min(AUTO_MAX_RECORDS, cap))


def claim(records: int | None, waited_s: float) -> float:
    """A waiting batch's claim to be applied: log2(1 + its records) (unknown: UNKNOWN_RECORDS),
    plus one for each AGE_S it has waited. The busy tables' batches, holding most of the
    changes, go first, and a quiet table's batch of a few records waits behind them for a
    bounded time (about AGE_S × 16 behind batches of 100,000 records), never indefinitely."""
    return math.log2(1 + (UNKNOWN_RECORDS if records is None else records)) + waited_s / AGE_S


def heap_bytes(spark) -> int:
    """The memory a batch's tasks run in: the driver's heap in local mode (it runs them),
    else an executor's (`spark.executor.memory`)."""
    conf = spark.sparkContext.getConf()
    if conf.get("spark.master", "local").startswith("local"):
        return int(jvm_class(spark, "java.lang.Runtime").getRuntime().maxMemory())
    utils = jvm_class(spark, "org.apache.spark.network.util.JavaUtils")
    return int(utils.byteStringAsBytes(conf.get("spark.executor.memory", "1g")))


def batch_sizing(options, available_now: bool, auto_cap: int | None = None) -> dict[str, str]:
    """The Kafka source's admission options of a table (`TableOptions`): a cap per batch
    (`auto_cap` when the table sets none), and for a continuous job, a minimum to wait for
    (up to the delay)."""
    out = {}
    cap = options.max_offsets_per_trigger or auto_cap
    if cap:
        out["maxOffsetsPerTrigger"] = str(cap)
    if options.min_offsets_per_trigger and not available_now:  # AvailableNow takes what is there
        out["minOffsetsPerTrigger"] = str(options.min_offsets_per_trigger)
        out["maxTriggerDelay"] = f"{options.max_trigger_delay_s}s"
    return out


class CatchUp:
    """A table's way through its backlog, from its lag read now and then: the records
    applied per second, and the time left at the rate the backlog shrinks (records still
    arriving count against it)."""

    def __init__(self, name: str, clock=time.monotonic):
        self.name, self.clock = name, clock
        self.first: tuple[float, int, int] | None = None  # (when, records left, records applied)
        self.shown_at: float | None = None  # when a continuous job's last line was logged

    def seen(self, left: int, applied: int) -> None:
        """A continuous job's lag, read now: a line every PROGRESS_EVERY_S while it is at
        least BEHIND_RECORDS behind, and one when it is caught up again."""
        if left >= BEHIND_RECORDS:
            if self.shown_at is None or self.clock() - self.shown_at >= PROGRESS_EVERY_S:
                self.line(left, applied)
                self.shown_at = self.clock()
        elif self.shown_at is not None:
            self.first = self.shown_at = None
            log("caught up", table=self.name, event="caught-up")

    def line(self, left: int, applied: int) -> str:
        """A progress line for `left` records left and `applied` applied so far (offsets)."""
        now = self.clock()
        if self.first is None or applied < self.first[2]:  # a new run, or a replay from earlier
            self.first = (now, left, applied)
        since, left_then, applied_then = self.first
        elapsed = now - since
        rate = (applied - applied_then) / elapsed if elapsed > 0 else 0.0
        shrink = (left_then - left) / elapsed if elapsed > 0 else 0.0
        text = f"catching up: {left:,} record(s) left"
        if rate > 0:
            text += f", {rate:,.0f} records/s"
        if shrink > 0:
            text += f", about {_duration(left / shrink)} left"
        elif elapsed > 0 and left:
            text += ", not gaining on the source"
        log(text, table=self.name, event="progress", records_left=left, records_per_s=round(rate),
            seconds_left=round(left / shrink) if shrink > 0 else None)
        return text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
