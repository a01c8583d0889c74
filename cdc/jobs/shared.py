"""One streaming query over the topics of many tables (`spark.shared_query`): it plans each
micro-batch's offsets for all of them, and only the tables whose topics have records in it
are applied, each reading its own part, by its own TableApplier in its own SparkSession,
each commit carrying that table's offsets. A quiet table then costs nothing between its
changes, where a query of its own polls Kafka and plans at every trigger."""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from cdc.config.models import TableRegistration
from cdc.control.checkpoint import batch_end_offsets
from cdc.errors import ApplyError

EARLIEST = -2  # Spark's per-partition code in `startingOffsets`


def groups(tables: list[TableRegistration]) -> dict[str, list[str]]:
    """The shared queries of a job's tables, by name: the tables of each trigger interval,
    if two or more. A table that sets its own batch sizes (`max_offsets_per_trigger`,
    `min_offsets_per_trigger`) keeps a query of its own, whose batches follow them."""
    by_interval: dict[float, list[str]] = {}
    for reg in tables:
        if reg.options.max_offsets_per_trigger is None and reg.options.min_offsets_per_trigger is None:
            by_interval.setdefault(reg.options.trigger_interval_s, []).append(reg.name)
    return {group_name(interval): sorted(names) for interval, names in sorted(by_interval.items())
            if len(names) > 1}


def group_name(interval_s: float) -> str:
    """A shared query's name (Spark's query name, and the name its log lines carry)."""
    return f"shared-{interval_s:g}s"


def starting_offsets(starts: list[tuple[str, dict[int, int], tuple[int, ...]]]) -> str:
    """The Kafka source's `startingOffsets` of a shared query, for each table's (topic, the
    offsets it starts from, its partitions): those offsets, and a partition it has none for
    (or a topic it has none for) from its earliest offset."""
    return json.dumps({topic: {str(p): offsets.get(p, EARLIEST) for p in sorted(set(partitions) | set(offsets))}
                       for topic, offsets, partitions in starts}, sort_keys=True)


def due(topics: dict[str, str], start: dict[str, dict[int, int]] | None,
        end: dict[str, dict[int, int]] | None) -> list[str]:
    """The tables (by name, of `topics`: name -> topic) whose topic a batch planned from
    `start` to `end` reads: its range is not empty (a partition `start` lacks counts as
    read). Unknown offsets: all."""
    if start is None or end is None:
        return list(topics)
    return [name for name, topic in topics.items()
            if any(o > start.get(topic, {}).get(p, -1) for p, o in end.get(topic, {}).items())]


class SharedBatch:
    """A shared query's foreachBatch function. The query only plans the batches (their
    offsets, in its checkpoint's offset log): each table whose topic has records in a batch
    reads its own part of it (`read`: a Kafka batch read of its topic's planned range, in
    the table's own SparkSession) and is applied holding one of the job's slots, the tables
    with the most records first. A table that fails does not stop the others: its error is
    kept in `failed` and the batch raises once the others are applied (the supervisor moves
    it to a query of its own). `close` works as runner.BatchGate's: the batch under way
    ends, the tables not yet applied are refused."""

    def __init__(self, appliers: dict, read, checkpoint: Path, slots, start: str):
        self.appliers, self.read, self.checkpoint, self.slots = appliers, read, checkpoint, slots
        self.topics = {name: applier.topic for name, applier in appliers.items()}
        # where the first batch starts (`starting_offsets`; an earliest offset is not known)
        self.start = {topic: {int(p): o for p, o in parts.items() if o >= 0}
                      for topic, parts in json.loads(start).items()}
        self.lock = threading.Lock()
        self.closed = False
        self.failed: dict[str, BaseException] = {}

    def __call__(self, df, batch_id: int) -> None:
        with self.lock:
            self._refuse_if_closed(batch_id)
            start = batch_end_offsets(self.checkpoint, batch_id - 1) if batch_id else self.start
            end = batch_end_offsets(self.checkpoint, batch_id)
            if start is None or end is None:
                raise ApplyError(f"batch {batch_id}: its offsets cannot be read from the checkpoint {self.checkpoint}")
            names = due(self.topics, start, end)
            records = {name: self.appliers[name].planned_records(batch_id) for name in names}
            names.sort(key=lambda n: -1 if records[n] is None else records[n], reverse=True)
            with ThreadPoolExecutor(max(1, min(len(names), self.slots.n)), thread_name_prefix="cdc-shared") as pool:
                futures = {pool.submit(self._apply, name, start.get(self.topics[name], {}),
                                       end.get(self.topics[name], {}), batch_id, records[name]): name
                           for name in names}
                for future in as_completed(futures):
                    if (error := future.exception()) is not None:
                        self.failed[futures[future]] = error
            if self.failed:
                failed = sorted(self.failed)
                raise ApplyError(f"batch {batch_id}: {len(failed)} table(s) failed ({', '.join(failed)}); the "
                                 f"others were applied")

    def _apply(self, name: str, start: dict[int, int], end: dict[int, int], batch_id: int,
               records: int | None) -> None:
        asked = time.monotonic()
        with self.slots.held(records):
            self._refuse_if_closed(batch_id)  # closed while it waited
            self.appliers[name](self.read(name, start, end), batch_id, time.monotonic() - asked)

    def _refuse_if_closed(self, batch_id: int) -> None:
        if self.closed:  # not applied: the next start reads it again from the table's offsets
            raise ApplyError(f"batch {batch_id} not applied: the job is stopping")

    def close(self) -> None:
        self.closed = True
        with self.lock:
            pass
