"""Freshness through the real connector: a sustained rate of changes at PostgreSQL, the
job running continuously, and for every change event the time from its source commit
(`source.ts_ms`) to the commit of the Iceberg snapshot that made it visible (the first
snapshot whose recorded offsets pass the event's offset)."""
from __future__ import annotations

import json
import os
import signal
import statistics
import threading
import time
from collections import deque

from confluent_kafka import Consumer, TopicPartition

from cdc.config.clients import kafka_access
from bench.workload import create_source_table, drop_target, registration
from cdc.control import commits
from cdc.jobs.supervisor import run
from cdc.register.connector import ConnectClient, connector_name, topic_for
from cdc.register.registrar import register
from cdc.control.kafka import end_offsets, watermarks
from cdc.sinks.found import last_committed
from cdc.sources import postgres

TICK_S = 0.1
PREFILL = 20_000


class Driver(threading.Thread):
    """Drives a running job from beside it (`drive`), then stops it with SIGTERM, however
    the driving ended; its error is raised by the benchmark once the job has stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.drive()
        except BaseException as e:  # noqa: BLE001 - reported by the benchmark after the job stops
            self.error = e
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    def drive(self) -> None:
        raise NotImplementedError


def wait_applied(settings, catalog, targets: dict, timeout_s: float) -> None:
    """Until the target of each topic in `targets` (topic -> registration) has committed
    offsets up to the topic's end as it is now."""
    ends = end_offsets(kafka_access(settings), list(targets))
    left = dict(targets)
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        for topic, reg in list(left.items()):
            done = commits.parse_offsets(last_committed(catalog.load_table(reg.target))).get(topic, {})
            if all(done.get(p, 0) >= o for p, o in ends.get(topic, {}).items()):
                del left[topic]
        if left:
            time.sleep(0.5)
    if left:
        raise TimeoutError(f"the job did not apply {', '.join(sorted(left))} up to their end within {timeout_s}s")


class Writer(Driver):
    """Once the running job has applied a first change (so its start-up is not in the
    figures), transactions at the source every TICK_S: updates (70%), inserts (20%) and
    deletes of rows it inserted (10%), `rate` row changes a second, for `seconds`; then
    waits until the job has committed everything."""

    def __init__(self, settings, catalog, reg, topic: str, rate: int, seconds: float):
        super().__init__()
        self.settings, self.catalog, self.reg, self.topic = settings, catalog, reg, topic
        self.per_tick, self.seconds = max(10, int(rate * TICK_S)), seconds
        self.started = self.ended = None

    def drive(self) -> None:
        self._first_change()
        self._write()
        wait_applied(self.settings, self.catalog, {self.topic: self.reg}, timeout_s=600)

    def _first_change(self) -> None:
        """One update, applied by the job before the sustained writes start."""
        with postgres.connect(self.settings, self.reg.source.name) as conn:
            with conn.transaction():
                conn.execute(f"UPDATE {postgres.qualified(self.reg)} SET at = now() WHERE id = 0")
            self._captured(conn)
        wait_applied(self.settings, self.catalog, {self.topic: self.reg}, timeout_s=600)

    def _captured(self, conn) -> None:
        """Until the connector has captured every change committed on `conn` so far."""
        marker = postgres.write_marker(conn, self.settings.sources[self.reg.source.name].signal_table)
        ConnectClient.of(self.settings).wait_captured(connector_name(self.reg.source.name), marker)

    def _write(self) -> None:
        table = postgres.qualified(self.reg)
        updates, inserts = self.per_tick * 7 // 10, self.per_tick * 2 // 10
        deletes = self.per_tick - updates - inserts
        inserted: deque[int] = deque()
        next_id, tick = PREFILL, 0
        with postgres.connect(self.settings, self.reg.source.name) as conn:
            self.started = time.time()
            while time.time() - self.started < self.seconds:
                with conn.transaction():
                    with conn.cursor() as cur:
                        cur.executemany(f"UPDATE {table} SET v = md5(random()::text), at = now() WHERE id = %s",
                                        [((tick * updates + i) * 7919 % PREFILL,) for i in range(updates)])
                        cur.executemany(f"INSERT INTO {table} VALUES (%s, 'new', 1.25, now())",
                                        [(next_id + i,) for i in range(inserts)])
                        inserted.extend(range(next_id, next_id + inserts))
                        next_id += inserts
                        if len(inserted) > 10 * deletes:
                            cur.executemany(f"DELETE FROM {table} WHERE id = %s",
                                            [(inserted.popleft(),) for _ in range(deletes)])
                tick += 1
                time.sleep(max(0.0, self.started + tick * TICK_S - time.time()))
            self.ended = time.time()
            self._captured(conn)


def commit_times(catalog, reg, topic: str) -> list[tuple[int, dict[int, int]]]:
    """(commit time in ms, next offset per partition) of each snapshot that records offsets, oldest first."""
    table = catalog.load_table(reg.target)
    out = []
    for snap in sorted(table.snapshots(), key=lambda s: s.sequence_number):
        offsets = commits.parse_offsets(snap.summary.additional_properties).get(topic)
        if offsets:
            out.append((snap.timestamp_ms, offsets))
    return out


def json_source_ms(value: bytes, offset: int) -> int:
    """A JSON change event's source commit time (its `source.ts_ms`)."""
    return json.loads(value)["payload"]["source"]["ts_ms"]


def latencies(settings, topic: str, start: dict[int, int], snapshots, since_ms: float,
              timeout_s: float = 300, source_ms_of=json_source_ms) -> list[float]:
    """Seconds from source commit to visible, for each change event from `start` whose
    source commit is at or after `since_ms` (`source_ms_of(value, offset)`: another format's)."""
    end = {p: hi for p, (_, hi) in watermarks(kafka_access(settings), topic).items()}
    consumer = Consumer(kafka_access(settings).client(**{"group.id": "cdc-bench-freshness",
                         "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, start.get(p, 0)) for p in end])
    out, left = [], sum(end[p] - start.get(p, 0) for p in end)
    deadline = time.monotonic() + timeout_s
    while left > 0:
        if time.monotonic() > deadline:  # a compacted topic has gaps: what is left never comes
            print(f"freshness: {left:,} offsets of {topic} not read within {timeout_s:.0f}s; measured without them",
                  flush=True)
            break
        for msg in consumer.consume(min(10_000, left), timeout=5):
            left -= 1
            if msg.error() or msg.value() is None:
                continue
            source_ms = source_ms_of(msg.value(), msg.offset())
            if source_ms < since_ms:
                continue
            visible = next(ts for ts, offsets in snapshots if offsets.get(msg.partition(), 0) > msg.offset())
            out.append((visible - source_ms) / 1000)
    consumer.close()
    return out


def measure(settings, catalog, rate: int, seconds: float) -> dict:
    reg = registration(settings, "fresh", captured=True)
    drop_target(settings, catalog, reg)  # a new target, as every figure's
    create_source_table(settings, reg, rows=PREFILL)
    register(settings, [reg])
    run(settings, [reg], available_now=True)  # the snapshot of the prefilled rows
    topic = topic_for(reg.source.name, reg)
    start = {p: hi for p, (_, hi) in watermarks(kafka_access(settings), topic).items()}
    writer = Writer(settings, catalog, reg, topic, rate, seconds)
    writer.start()
    run(settings, [reg], available_now=False)
    writer.join()
    if writer.error is not None:
        raise writer.error
    warm_up = writer.started + min(10.0, seconds / 5)
    values = sorted(latencies(settings, topic, start, commit_times(catalog, reg, topic), warm_up * 1000))
    measured = writer.ended - warm_up
    p = statistics.quantiles(values, n=100)
    print(f"freshness: {len(values):,} events at {len(values) / measured:,.0f}/s: p50 {p[49]:.2f}s, "
          f"p95 {p[94]:.2f}s, max {values[-1]:.2f}s", flush=True)
    return {"freshness_p50_s": round(p[49], 2), "freshness_p95_s": round(p[94], 2),
            "freshness_max_s": round(values[-1], 2), "freshness_rate_events_per_s": round(len(values) / measured)}
