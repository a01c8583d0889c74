"""One streaming query over the topics of many tables (`spark.shared_query`): it plans each
micro-batch's offsets for all of them, and only the tables whose topics have records in it
are applied, each reading its own part, by its own TableApplier in its own SparkSession,
each commit carrying that table's offsets. A quiet table then costs nothing between its
changes, where a query of its own polls Kafka and plans at every trigger."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from cdc.config.models import TableRegistration
from cdc.control import barrier
from cdc.control.checkpoint import batch_end_offsets
from cdc.errors import ApplyError
from cdc.jobs.backlog import claim
from cdc.log import log

EARLIEST = -2  # Spark's per-partition code in `startingOffsets`
TOGETHER_TABLES = 8  # the most tables whose small batches one Spark job writes (jobs/together.py)
TOGETHER_SMALL = 1000  # ... each of at most this many records
TOGETHER_RECORDS = 4096  # ... and of them all


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
    (or a topic it has none for) from its earliest offset; of two tables of one topic, the
    lower (each skips what its target holds)."""
    doc: dict[str, dict[str, int]] = {}
    for topic, offsets, partitions in starts:
        parts = doc.setdefault(topic, {})
        for p in sorted(set(partitions) | set(offsets)):
            o = offsets.get(p, EARLIEST)  # EARLIEST (-2) is below every offset
            parts[str(p)] = min(o, parts.get(str(p), o))
    return json.dumps(doc, sort_keys=True)


def due(topics: dict[str, str], starts: dict[str, dict[int, int]], end: dict[str, dict[int, int]]) -> list[str]:
    """The tables (by name, of `topics`: name -> topic) that have records to read from where
    each starts (`starts`, by table; a partition it lacks counts as unread) up to `end`
    (by topic)."""
    return [name for name, topic in topics.items()
            if any(o > starts.get(name, {}).get(p, -1) for p, o in end.get(topic, {}).items())]


def together(candidates: list[tuple[str, int | None, bool]], records: int = TOGETHER_RECORDS,
             tables: int = TOGETHER_TABLES, small: int = TOGETHER_SMALL) -> list[str]:
    """The tables applied in one job with the first of `candidates` (name, its records, whether
    its batch may join others': one the direct path may take), strongest claim first: the
    first alone unless its batch is small (at most `small` records) and may join, else with
    the next small ones that may, as long as the records of all stay within `records` and the
    tables within `tables`. A big batch costs its records, not a job, and goes alone: in a
    job with others, its commit would wait for their writes."""
    def joinable(count: int | None, joins: bool) -> bool:
        return joins and count is not None and count <= small

    first, count, joins = candidates[0]
    chosen, total = [first], count or 0
    if not joinable(count, joins):
        return chosen
    for name, count, joins in candidates[1:]:
        if len(chosen) == tables:
            break
        if joinable(count, joins) and total + count <= records:
            chosen.append(name)
            total += count
    return chosen


def records_between(start: dict[int, int], end: dict[int, int]) -> int | None:
    """The records from `start` up to `end` (None: a partition `start` lacks, so unknown)."""
    if any(p not in start for p in end):
        return None
    return sum(max(0, o - start[p]) for p, o in end.items())


class SharedBatch:
    """A shared query's foreachBatch function, and the workers that apply its tables. The
    query only plans: each batch's call records where the batch ends in every topic (the
    checkpoint's offset log) and returns. `slots.n` workers apply, one table each at a time,
    the table with the strongest claim (backlog.claim: its records not applied yet, and how
    long since the first of them was planned), holding one of the job's slots: it reads
    everything planned for it so far, at most `cap` records (a Kafka batch read of its
    topic's range, `read`, in the table's own SparkSession), in one commit carrying the end
    of that range as its offsets. So a busy table is applied as often as the slots allow, a
    quiet one when it has changes, and none waits for the others of a batch. A table that
    fails is kept in `failed` (the supervisor moves it to a query of its own) and the others
    go on; a table `join`s again from its committed offsets (any topic in `start` is read).
    `close` lets the tables being applied finish and stops the workers. Given `apply_together`
    (jobs/together.py), a worker applies the small batches of several tables (`together`) in
    one Spark job: it returns, by table, True when applied, False when the table needs a batch
    of its own (then applied alone, by a query), or the table's error. `kafka_records` gives a
    table's range for the direct path's task to read itself (reading.kafka_records; None: it
    reads `read`'s)."""

    def __init__(self, appliers: dict, read, checkpoint: Path, slots, start: str, cap: int, clock=time.monotonic,
                 apply_together=None, kafka_records=lambda name, start, end: None):
        self.appliers, self.read, self.checkpoint, self.slots, self.cap = appliers, read, checkpoint, slots, cap
        self.clock, self.apply_together, self.kafka_records = clock, apply_together, kafka_records
        self.together_tables = TOGETHER_TABLES
        self.topics = {name: applier.topic for name, applier in appliers.items()}
        self.sessions: dict = {}  # each table's SparkSession, for `read` (queries.Queries.start_shared)
        first = {topic: {int(p): o for p, o in parts.items() if o >= 0} for topic, parts in json.loads(start).items()}
        self.subscribed = set(first)
        self.next = {name: dict(first.get(topic, {})) for name, topic in self.topics.items()}  # its next read's start
        self.plans: list[tuple[int, dict[str, dict[int, int]], float]] = []  # (batch id, its end, when), oldest first
        self.busy: set[str] = set()
        self.failed: dict[str, BaseException] = {}
        self.cond = threading.Condition()
        self.closed = False
        for i in range(max(1, slots.n)):
            threading.Thread(target=self._work, daemon=True, name=f"cdc-shared-{i}").start()

    def __call__(self, df, batch_id: int) -> None:
        end = batch_end_offsets(self.checkpoint, batch_id)
        if end is None:
            raise ApplyError(f"batch {batch_id}: its offsets cannot be read from the checkpoint {self.checkpoint}")
        with self.cond:
            if self.closed:
                raise ApplyError(f"batch {batch_id} not planned: the job is stopping")
            self.plans.append((batch_id, end, self.clock()))
            self.cond.notify_all()

    def drained(self, timeout_s: float) -> bool:
        """Whether every table has applied all that is planned for it (a failed one aside),
        waiting up to `timeout_s` for it."""
        with self.cond:
            return self.cond.wait_for(lambda: not self.busy and self._pick() is None, timeout_s)

    def applied(self, name: str) -> dict[int, int]:
        """The offsets table `name` has applied up to (where its next read starts)."""
        with self.cond:
            return dict(self.next.get(name, {}))

    def join(self, name: str, applier, session, committed: dict[int, int]) -> None:
        """Table `name` (of a subscribed topic) applied again, from the offsets its target holds."""
        with self.cond:
            self.appliers[name], self.sessions[name] = applier, session
            self.topics[name], self.next[name] = applier.topic, dict(committed)
            self.cond.notify_all()

    def take_failed(self) -> dict[str, BaseException]:
        """The tables that failed since the last call, with their errors."""
        with self.cond:
            failed, self.failed = self.failed, {}
            return failed

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            self.cond.wait_for(lambda: not self.busy)

    def _pick(self) -> tuple[str, int, dict[int, int], int | None] | None:
        """The table to apply next (the caller holds `cond`): its name, the batch its range
        ends with, that end, and its records; None when no table has anything to apply."""
        due = self._due()
        return due[0][:4] if due else None

    def _picks(self) -> list[tuple[str, int, dict[int, int], int | None]]:
        """The tables to apply next, in one job (`together`) when `apply_together` is given:
        each as `_pick` gives it (the caller holds `cond`). The first is the strongest claim;
        the others that join its job are taken longest waiting first: in a job of small
        batches each table costs about the same, whatever its records, so the quiet tables'
        changes, whose claims stay low, ride along instead of waiting behind the busy ones."""
        due = self._due()
        if not due or self.apply_together is None:
            return [d[:4] for d in due[:1]]
        due = [d[:4] for d in due[:1] + sorted(due[1:], key=lambda d: -d[4])]  # of equal waits, by claim
        by_name = {d[0]: d for d in due}
        joins = {name: getattr(self.appliers[name], "joins_others", lambda: False)() for name in by_name}
        return [by_name[name] for name in together([(d[0], d[3], joins[d[0]]) for d in due],
                                                   tables=self.together_tables)]

    def _due(self) -> list[tuple[str, int, dict[int, int], int | None, float]]:
        """The tables with records to apply, not being applied, strongest claim first
        (backlog.claim): each with the batch its range ends with, that end, its records, as
        far as `cap` records allow, and the seconds since its first record's batch was planned
        (the caller holds `cond`)."""
        due, now = [], self.clock()
        for name in sorted(self.appliers.keys() - self.busy):  # a table that failed has left `appliers`
            topic, start = self.topics[name], self.next[name]
            first = self._first_due(name, topic, start)
            if first == len(self.plans):
                continue
            (batch_id, end, at), records = self.plans[first], records_between(start, self.plans[first][1][topic])
            chosen = (batch_id, end[topic])
            for later, end, _ in self.plans[first + 1:]:  # as far as `cap` records allow
                more = records_between(start, end[topic])
                if more is None or more > self.cap:
                    break
                chosen, records = (later, end[topic]), more
            due.append((claim(records, now - at), name, chosen[0], chosen[1], records, now - at))
        due.sort(key=lambda d: -d[0])  # stable: of equal claims, by name
        return [d[1:] for d in due]

    def _first_due(self, name: str, topic: str, start: dict[int, int]) -> int:
        """The first plan with records of table `name` past `start` (len(plans): none). A
        plan's end is never before the one's before it, so the plans a table has records in
        are the last ones: found by bisection, not by asking every plan of every table."""
        low, high = 0, len(self.plans)
        while low < high:
            middle = (low + high) // 2
            if due({name: topic}, {name: start}, self.plans[middle][1]):
                high = middle
            else:
                low = middle + 1
        return low

    def _work(self) -> None:
        while True:
            with self.cond:
                while not self.closed and not (picked := self._picks()):
                    self.cond.wait()
                if self.closed:
                    return
                ranges = {}
                for name, batch_id, end, records in picked:
                    self.busy.add(name)
                    start = dict(self.next[name])
                    end = {p: max(o, start.get(p, o)) for p, o in end.items()}  # a table that joined ahead
                    ranges[name] = (batch_id, start, end, records)
            done: dict[str, bool | BaseException] = {}
            try:
                asked = self.clock()
                counts = [r[3] for r in ranges.values()]
                with self.slots.held(None if None in counts else sum(counts)):
                    if not self.closed:  # closed while it waited: the next start reads it from the table
                        done = self._apply(ranges, self.clock() - asked)
            except BaseException as e:  # noqa: BLE001 - the tables' failure, not the others'
                done = {name: e for name in ranges}
            finally:
                with self.cond:
                    for name, outcome in done.items():
                        if outcome is True:
                            self.next[name] = {**self.next[name], **ranges[name][2]}
                        elif isinstance(outcome, BaseException):
                            self.failed[name] = outcome
                            self.appliers.pop(name, None)  # the supervisor gives it a query of its own
                    if any(outcome is True for outcome in done.values()):
                        self._forget_plans()
                    self.busy.difference_update(ranges)
                    self.cond.notify_all()

    def _apply(self, ranges: dict[str, tuple], waited_s: float) -> dict[str, bool | BaseException]:
        """Apply each table's range (batch id, start, end, records): several in one job, a table
        that needs a batch of its own (or is alone) by its applier; by table, True when applied
        or its error."""
        done: dict[str, bool | BaseException] = {}
        # A table a reconciler holds (control/barrier.py) is applied alone, where its batch can be cut.
        together = {n: r for n, r in ranges.items() if barrier.read(self.appliers[n].state_dir, n) is None}
        if len(together) > 1:
            try:
                done = self.apply_together(together, waited_s)
            except Exception as e:  # noqa: BLE001 - each table is then applied alone, its own error its own
                log(f"{len(ranges)} tables' batches could not share a job, each is applied alone: "
                    f"{str(e).splitlines()[0][:300]}", event="together-failed", level="warning", tables=sorted(ranges))
        for name, (batch_id, start, end, records) in ranges.items():
            if name in done and done[name] is not False:
                continue
            try:
                if done.get(name) is False:  # the direct path just refused it
                    self.appliers[name](self.read(name, start, end), batch_id, waited_s, records, direct=False,
                                        end=end, start=start)
                else:
                    self.appliers[name](self.read(name, start, end), batch_id, waited_s, records,
                                        kafka=self.kafka_records(name, start, end), end=end, start=start)
                done[name] = True
            except BaseException as e:  # noqa: BLE001 - the table's failure, not the others'
                done[name] = e
        return done

    def _forget_plans(self) -> None:
        """Drop the plans every table has read past, the newest kept (the caller holds `cond`)."""
        while len(self.plans) > 1 and not due({n: self.topics[n] for n in self.appliers}, self.next,
                                              self.plans[0][1]):
            self.plans.pop(0)
