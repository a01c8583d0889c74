"""Freshness of each system at a sustained rate: every system follows a topic of its own while
changes are written into it at `rate` events a second for `seconds`, in the shape of a
source table of `REPLICA IDENTITY FULL` (the shape every peer reads right), after a first
`WARM_UP` events it has committed before the timed stream starts. For each change event, the
time from its source commit (`source.ts_ms`, set when it is produced) to the commit that made
it visible in the system's table; the table is checked row for row at the end.

Where each system says what it made visible: cdc, the offsets its Iceberg snapshots record;
delta-rs and Hudi (our jobs), a line `{"visible", "next"}` printed after each commit; Flink,
the offsets its Kafka source commits to its consumer group when a checkpoint completes, which
is when both sinks commit (polled every `POLL_S`; the last one is the job's end)."""
from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.freshness import Driver, commit_times, latencies, wait_applied
from bench.systems import peers, workload
from bench.systems.check import compare
from bench.workload import Events, fill, registration
from cdc.config.clients import kafka_access
from cdc.register.topics import ensure_topics

WARM_UP = 2_000  # events each system has committed before the timed stream starts
TICK_S = 0.1
SETTLE_S = 30.0
# the longest a peer may take to commit the warm-up, then the stream's end (Iceberg's sink: 5 min a commit)
WAIT_S = 900
POLL_S = 0.1
# the source time events are made with, replaced by the time each is produced: making the
# events beforehand keeps the stream from taking the CPU (and, with cdc, the Python
# interpreter) of the system it measures
LATER = b"4102444800000"
FLINK_GROUP = "bench-systems-flink"  # flink/job.py's consumer group

# run name -> (system, its setting): each peer at its documented default and at its fastest
RUNS = {
    "cdc": ("cdc", {}),  # a batch every `trigger_interval_s`, 1 s
    "cdc_trigger_0_5s": ("cdc", {"trigger_interval_s": 0.5}),
    "deltars": ("deltars", ["--poll-s", "0.2"]),  # a merge per poll, as soon as there is something
    "hudi": ("hudi", ["--follow"]),  # a commit as soon as the last one ends, as Hudi's streamer's continuous mode
    "flink_iceberg": ("flink_iceberg", ["--checkpoint-interval", "10 s"]),  # Paimon's and Flink's quick starts
    "flink_iceberg_checkpoint_1s": ("flink_iceberg", ["--checkpoint-interval", "1 s"]),
    "flink_paimon": ("flink_paimon", ["--checkpoint-interval", "10 s"]),
    "flink_paimon_checkpoint_1s": ("flink_paimon", ["--checkpoint-interval", "1 s"]),
    # appends only (a baseline): its default commits every 5 minutes
    "iceberg_connect": ("iceberg_connect", []),
    "iceberg_connect_commit_1s": ("iceberg_connect", ["--commit-interval-ms", "1000"]),
}
# each peer run's cdc counterpart: the default against the defaults, the fastest against the fastest
FASTEST = {"cdc_trigger_0_5s", "deltars", "hudi", "flink_iceberg_checkpoint_1s", "flink_paimon_checkpoint_1s",
           "iceberg_connect_commit_1s"}


@dataclass(frozen=True)
class Live:
    """One system's run at a sustained rate: its freshness quantiles (seconds) and check."""
    name: str
    values: list[float]
    rate: float
    check: dict

    def figures(self) -> dict:
        p = statistics.quantiles(self.values, n=100)
        prefix = f"systems_{self.name}" if self.name.startswith("cdc") else f"peer_{self.name}"
        return {f"{prefix}_freshness_p50_s": round(p[49], 2), f"{prefix}_freshness_p95_s": round(p[94], 2),
                f"{prefix}_freshness_max_s": round(max(self.values), 2),
                f"{prefix}_freshness_rate_events_per_s": round(self.rate),
                f"{prefix}_freshness_correct": self.check["correct"], f"{prefix}_freshness_wrong": self.check["wrong"]}


class Feed:
    """The timed stream of one run: `WARM_UP` changes first, then `rate` a second for `seconds`,
    each event's `source.ts_ms` the time it is produced."""

    def __init__(self, settings, key_doc, value_doc, topic: str, rate: int, seconds: float, keys: int, seed: int):
        self.topic, self.rate, self.seconds = topic, rate, seconds
        stream = workload.changes(keys, WARM_UP + int(rate * seconds), seed, unavailable=0)
        self.changes = list(workload.full_identity(stream))
        events = Events(key_doc, value_doc)
        events.now_ms = lambda: int(LATER)
        self.records = [events.make(c.op, c.id, c.v, before) for c, before in self.changes]
        if not all(value.count(LATER) == 1 for _, value in self.records[:3]):
            raise RuntimeError("the recorded event holds the placeholder source time elsewhere")
        self.producer = Producer(kafka_access(settings).client(**{"linger.ms": 5}))
        self.started = self.ended = None

    @property
    def end(self) -> int:
        return len(self.changes)

    def truth(self) -> dict:
        return workload.truth(c for c, _ in self.changes)

    def warm_up(self) -> None:
        for record in self.records[:WARM_UP]:
            self._produce(*record)
        if self.producer.flush(60):
            raise RuntimeError("could not deliver the warm-up events")

    def stream(self) -> None:
        per_tick = self.rate * TICK_S
        self.started, tick, sent = time.time(), 0, WARM_UP
        while sent < self.end:
            tick += 1
            upto = min(self.end, WARM_UP + int(tick * per_tick))
            for record in self.records[sent:upto]:
                self._produce(*record)
            sent = upto
            self.producer.poll(0)
            time.sleep(max(0.0, self.started + tick * TICK_S - time.time()))
        self.ended = time.time()
        if self.producer.flush(60):
            raise RuntimeError("could not deliver every change event")

    def _produce(self, key: bytes, value: bytes) -> None:
        self.producer.produce(self.topic, key=key, value=value.replace(LATER, b"%d" % (time.time() * 1000)))

    def measured(self, settings, visible: list[tuple[int, dict[int, int]]]) -> tuple[list[float], float]:
        """Each timed event's seconds to visible (the first third of the stream, at most
        `SETTLE_S`, left out: every system here starts cold) and the rate they came at."""
        since = self.started + min(SETTLE_S, self.seconds / 3)
        values = latencies(settings, self.topic, {0: WARM_UP}, visible, since * 1000)
        return values, len(values) / (self.ended - since)


def run_cdc(settings, catalog, name: str, options: dict, feed: Feed) -> Live:
    """cdc following the topic (`run(..., available_now=False)`) into an empty Iceberg target."""
    from cdc.jobs.supervisor import run
    from cdc.sinks.session import get_session

    reg = registration(settings, f"live_{name}", **options)
    fill(get_session(settings, app_name="cdc-bench-systems"), settings, catalog, reg,
         registration(settings, "recorded"), rows=0, topic=feed.topic)

    class Stream(Driver):
        def drive(self) -> None:
            wait_applied(settings, catalog, {feed.topic: reg}, timeout_s=300)
            feed.stream()
            wait_applied(settings, catalog, {feed.topic: reg}, timeout_s=600)

    driver = Stream()
    driver.start()
    run(settings, [reg], available_now=False)
    driver.join()
    if driver.error is not None:
        raise driver.error
    result = catalog.load_table(reg.target).scan(selected_fields=("id", "v", "n")).to_arrow().to_pydict()
    check = compare(feed.truth(), zip(result["id"], result["v"], result["n"]))
    return Live(name, *feed.measured(settings, commit_times(catalog, reg, feed.topic)), check=check)


class Visible(threading.Thread):
    """What a running peer has made visible, as (time ms, {partition: next offset}) points:
    from its `{"visible", "next"}` lines, or its Kafka consumer group's committed offsets."""

    def __init__(self, process: subprocess.Popen, settings, topic: str, group: str | None):
        super().__init__(daemon=True)
        self.process, self.points, self.lines = process, [], []
        self.group = group and Consumer(kafka_access(settings).client(**{"group.id": group}))
        self.partition = TopicPartition(topic, 0)
        if group:
            threading.Thread(target=self._poll, daemon=True).start()

    def run(self) -> None:
        for line in self.process.stdout:
            line = line.strip()
            if line.startswith("{") and '"visible"' in line:
                doc = json.loads(line)
                self.points.append((int(doc["visible"] * 1000), {0: doc["next"]}))
            elif line:
                self.lines.append(line)

    def _poll(self) -> None:
        last = -1
        while self.process.poll() is None:
            committed = self.group.committed([self.partition], timeout=10)[0].offset
            if committed > last:
                self.points.append((int(time.time() * 1000), {0: committed}))
                last = committed
            time.sleep(POLL_S)

    def reached(self, offset: int) -> bool:
        return bool(self.points) and self.points[-1][1][0] >= offset


def run_peer(settings, name: str, system: str, extra: list[str], feed: Feed, work: Path) -> Live:
    """The peer following the topic up to the feed's end, as a subprocess of its virtualenv."""
    python = peers.setup(peers.JOBS.get(system, (system,))[0])
    work.mkdir(parents=True, exist_ok=True)
    cmd = peers.command(system, python, settings, feed.topic, feed.end, work, 100_000, "COPY_ON_WRITE")
    if system == "deltars":
        cmd += ["--end", str(feed.end)]
    log = work / f"live_{name}.log"
    with log.open("w") as err:
        process = peers.launch(cmd + extra, python, err)
        visible = Visible(process, settings, feed.topic, FLINK_GROUP if system.startswith("flink") else None)
        visible.start()
        deadline = time.monotonic() + WAIT_S
        while not visible.reached(WARM_UP) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if process.poll() is None and visible.reached(WARM_UP):
            feed.stream()
        try:
            process.wait(timeout=WAIT_S if feed.started else 1)
        except subprocess.TimeoutExpired:
            peers.stop(process)
            what = "its topic's end" if feed.started else "the warm-up"
            raise peers.PeerError(f"the {name} peer did not commit {what} within {WAIT_S}s: see {log}")
        visible.join(30)
    if process.returncode or feed.started is None:
        last = next((line for line in reversed(log.read_text().splitlines()) if line.strip()), "")
        raise peers.PeerError(f"the {name} peer exited with {process.returncode} before the end: see {log}; "
                              f"its last line: {last[:500]}")
    report = json.loads(visible.lines[-1])
    points = visible.points + [(int(report["committed"] * 1000), {0: feed.end})]  # the final commit
    result = pq.read_table(str(work / f"{system}_result"), columns=["id", "v", "n"]).to_pydict()
    check = compare(feed.truth(), zip(result["id"], result["v"], result["n"]))
    return Live(name, *feed.measured(settings, sorted(points, key=lambda p: p[0])), check=check)


def run_apart(name: str, argv: list[str], work: Path) -> Live:
    """Run `name` in a process of its own (`argv`, this module's command line for it), so that
    each cdc run starts a cold JVM, as each peer does."""
    out = work / f"live_{name}.json"
    out.unlink(missing_ok=True)
    done = subprocess.run(argv + ["--only", name, "--live-out", str(out)])
    if done.returncode or not out.exists():
        raise RuntimeError(f"the {name} run exited with {done.returncode}: see its output above")
    return Live(**json.loads(out.read_text()))


def measure(settings, catalog, key_doc, value_doc, names: list[str], rate: int, seconds: float, keys: int,
            seed: int, work: Path, apart: list[str] | None = None) -> tuple[list[Live], dict]:
    """Each run of `names` on a topic of its own (cdc's in a process of its own given `apart`,
    the command line that runs one); the runs that failed, by name, with why."""
    runs, failed = [], {}
    for name in names:
        system, setting = RUNS[name]
        if apart and system == "cdc":
            try:
                runs.append(run_apart(name, apart, work))
            except Exception as e:  # noqa: BLE001 - reported with the others
                failed[name] = f"{type(e).__name__}: {e}"
            continue
        topic = f"bench.systems_live_{name}_{int(time.time())}"
        ensure_topics(kafka_access(settings), [topic], settings.kafka)
        feed = Feed(settings, key_doc, value_doc, topic, rate, seconds, keys, seed)
        feed.warm_up()
        print(f"== {name}: {WARM_UP:,} events, then {rate:,}/s for {seconds:.0f}s into {topic}", flush=True)
        try:
            live = (run_cdc(settings, catalog, name, setting, feed) if system == "cdc"
                    else run_peer(settings, name, system, setting, feed, work))
        except Exception as e:  # one system's failure is reported, the others still run
            failed[name] = f"{type(e).__name__}: {e}"
            print(f"{name} failed: {failed[name]}", flush=True)
            continue
        runs.append(live)
        p = statistics.quantiles(live.values, n=100)
        print(f"{name}: {len(live.values):,} events at {live.rate:,.0f}/s, freshness "
              f"p50 {p[49]:.2f}s, p95 {p[94]:.2f}s, max {max(live.values):.2f}s; "
              f"{'correct' if live.check['correct'] else 'WRONG: ' + live.check['wrong']}", flush=True)
    return runs, failed


def figures(runs: list[Live], recorded: dict | None = None) -> dict:
    """Each run's figures, and cdc's p95 over each peer's (the default against the defaults,
    cdc's fastest against the peers' fastest; at most 1.0 is cdc as fresh or fresher), the
    runs not made now taken from the `recorded` results (so a run of cdc alone is compared)."""
    out = {}
    for r in runs:
        out.update(r.figures())
    known = {**(recorded or {}), **out}
    p95 = {name: known[f"{prefix}_{name}_freshness_p95_s"] for name in RUNS
           for prefix in ("systems" if name.startswith("cdc") else "peer",)
           if known.get(f"{prefix}_{name}_freshness_p95_s")}
    for name, value in p95.items():
        ours = p95.get("cdc_trigger_0_5s" if name in FASTEST else "cdc")
        if not name.startswith("cdc") and ours:
            out[f"cdc_vs_{name}_freshness_p95"] = round(ours / value, 3)
    return out
