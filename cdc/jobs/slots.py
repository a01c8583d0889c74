"""The batches a job applies at once: the slots every table's batches share, and each
query's gate around its applier."""
from __future__ import annotations

import itertools
import threading
import time
from contextlib import contextmanager

from cdc.config.models import Settings
from cdc.errors import ApplyError
from cdc.jobs.backlog import claim


class BatchSlots:
    """The batches a job applies at once, at most `n` of all its tables'. A freed slot goes
    to the waiting batch with the strongest claim (backlog.claim: its records, and how long
    it has waited)."""

    def __init__(self, n: int, clock=time.monotonic):
        self.n = self.free = n
        self.clock = clock
        self.cond = threading.Condition()
        self.waiting: dict[int, tuple[int | None, float]] = {}  # ticket -> (records, waiting since)
        self.granted: set[int] = set()
        self.tickets = itertools.count()

    def claim(self, ticket: int, now: float) -> float:
        records, since = self.waiting[ticket]
        return claim(records, now - since)

    @contextmanager
    def held(self, records: int | None):
        """Wait for a slot for a batch of `records` (None: unknown, counted as big), hold it."""
        with self.cond:
            ticket = next(self.tickets)
            self.waiting[ticket] = (records, self.clock())
            self._grant()
            try:
                while ticket not in self.granted:
                    self.cond.wait()
            except BaseException:  # interrupted while it waited: the slot is not held
                if self.waiting.pop(ticket, None) is None:  # granted meanwhile: given back
                    self.free += 1
                    self._grant()
                self.granted.discard(ticket)
                raise
            self.granted.remove(ticket)
        try:
            yield
        finally:
            with self.cond:
                self.free += 1
                self._grant()

    def _grant(self) -> None:
        """The free slots to the strongest claims (the caller holds `cond`)."""
        while self.free and self.waiting:
            now = self.clock()
            ticket = max(self.waiting, key=lambda t: (self.claim(t, now), -t))
            del self.waiting[ticket]
            self.granted.add(ticket)
            self.free -= 1
        self.cond.notify_all()


class BatchGate:
    """A query's foreachBatch function around its applier. `close` lets the batch being
    applied finish and refuses those after it, so a query stops between two batches: Spark's
    own stop interrupts the query's thread, and with it a MERGE or a commit under way.
    A batch is applied once it holds one of the application's `slots` (`batch_slots`)."""

    def __init__(self, apply, slots: BatchSlots | None = None, records=lambda batch_id: None):
        self.apply, self.records = apply, records  # records: a batch's planned records (None: unknown)
        self.slots = slots or BatchSlots(1)
        self.lock = threading.Lock()  # held while a batch waits for a slot and is applied
        self.closed = False

    def __call__(self, df, batch_id: int) -> None:
        with self.lock:
            self._refuse_if_closed(batch_id)
            asked = time.monotonic()
            with self.slots.held(self.records(batch_id)):
                self._refuse_if_closed(batch_id)  # closed while it waited
                self.apply(df, batch_id, time.monotonic() - asked)

    def _refuse_if_closed(self, batch_id: int) -> None:
        if self.closed:  # the query fails without committing it: the next start applies it
            raise ApplyError(f"batch {batch_id} not applied: the job is stopping")

    def close(self) -> None:
        self.closed = True
        with self.lock:  # the batch under way, if any, has committed or failed
            pass



def batch_slots(spark, settings: Settings) -> BatchSlots:
    """The slots all the job's tables' batches share (`spark.batches_at_once`, by default
    twice the application's cores). The other batches wait, their offsets fixed, while the
    next changes gather in Kafka: with a batch of every table under way at once, each
    took the time of all of them to plan on the driver, and the driver's heap filled."""
    return BatchSlots(settings.spark.batches_at_once or 2 * max(1, spark.sparkContext.defaultParallelism))
