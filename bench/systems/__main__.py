"""Peer systems end to end on the same Debezium topic, checked row for row.

    .venv/bin/python -m bench.systems --quick      (make bench-peers: 200,000 events over 50,000 keys)
    .venv/bin/python -m bench.systems              (1,000,000 events over 250,000 keys)
    .venv/bin/python -m bench.systems --events 20000 --keys 5000 --only deltars
    .venv/bin/python -m bench.systems --freshness  (each system following a topic written at 2,000 events/s)

One backlog topic in the recorded Debezium JSON shape (several changes per key, deletes
then re-inserts, updates whose `v` is the unavailable-value placeholder); the truth
computed from its events in offset order; each peer (delta-rs; Apache Hudi, its table made
by the first batch or, as `hudi_precreated`, by an empty commit before it; Flink SQL's
debezium-json format into Apache Iceberg or Apache Paimon) run in its own virtualenv from
the earliest offset to a committed table, and cdc itself on the same topic;
each result read back and compared with the truth. With `--replica-identity full` the
backlog has the shape of a source table of `REPLICA IDENTITY FULL` (each update's and
delete's `before` the whole old row, no placeholder), which Flink's debezium-json needs. Merges its figures into
bench/results/latest.json."""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.systems import live, peers, workload
from bench.systems.check import compare
from bench.workload import Events, bench_settings, produce, record_template, registration
from cdc.config import load_settings
from cdc.config.clients import kafka_access
from cdc.register.connector import topic_for
from cdc.control.kafka import watermarks
from cdc.register.topics import ensure_topics

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "latest.json"
SIZES = {"quick": {"events": 200_000, "keys": 50_000}, "full": {"events": 1_000_000, "keys": 250_000}}
SYSTEMS = ("cdc",) + peers.PEERS
FULL = "_full_identity"  # the suffix of the runs on the topic of a table of REPLICA IDENTITY FULL
MERGE = "_merge"  # the suffix of the runs of the merge workload (--merge)
SHAPES = (FULL, MERGE)
MERGE_SYSTEMS = ("cdc", "deltars", "hudi", "flink_iceberg", "flink_iceberg_no_materialize",
                 "flink_paimon")  # --merge's: the peers that merge
MERGE_ONLY = ("flink_iceberg_no_materialize",)  # not in the backlog run by default: its case is the merge's
MERGE_BATCH = 20_000  # --merge's records a batch: ten batches of the quick size


def recorded(settings) -> tuple[dict, dict]:
    """The recorded update event the benchmark's backlogs are made of: the last event of
    `bench.recorded`'s topic when `python -m bench` left one, else recorded anew."""
    reg = registration(settings, "recorded")
    topic = topic_for(reg.source.name, reg)
    low, high = watermarks(kafka_access(settings), topic).get(0, (0, 0))
    if high > low:
        consumer = Consumer(kafka_access(settings).client(**{"group.id": "cdc-bench-systems",
                                                             "enable.auto.commit": False}))
        consumer.assign([TopicPartition(topic, 0, high - 1)])
        msg = consumer.poll(30)
        consumer.close()
        if msg is not None and not msg.error() and msg.value():
            key, value = json.loads(msg.key()), json.loads(msg.value())
            if value["payload"]["op"] == "u":
                return key, value
    return record_template(settings)


def backlog(settings, key_doc, value_doc, name: str, stream: list, full: bool) -> tuple[str, int]:
    """Topic `bench.<name>` holding the changes of `stream` (produced unless an earlier run left
    it whole) and its end offset; `full`: in the shape of a table of `REPLICA IDENTITY FULL`
    (workload.full_identity)."""
    topic, events = f"bench.{name}" + ("_full" if full else ""), len(stream)
    ensure_topics(kafka_access(settings), [topic], settings.kafka)
    low, high = watermarks(kafka_access(settings), topic)[0]
    if (low, high) == (0, events):
        print(f"backlog: {topic} already holds {events:,} events", flush=True)
        return topic, high
    if high:
        raise RuntimeError(f"{topic} holds offsets {low} to {high}, not the {events:,} events of this workload: "
                           f"delete the topic, or choose another --seed")
    ev = Events(key_doc, value_doc)
    started = time.monotonic()
    produce(settings, topic, (ev.make(c.op, c.id, c.v, before) for c, before in workload.full_identity(stream))
            if full else (ev.make(c.op, c.id, c.v) for c in stream))
    print(f"backlog: {events:,} events into {topic} in {time.monotonic() - started:.1f}s", flush=True)
    return topic, watermarks(kafka_access(settings), topic)[0][1]


def run_cdc(settings, topic: str, end: int, expected: dict, start: int = 0, batch: int | None = None) -> peers.Run:
    """cdc itself on the same topic: `run(..., available_now=True)` from offset `start` into
    an Iceberg target holding the `start` rows before it (written in bulk, as a bootstrap
    writes them), in batches of `batch` records (None: its automatic sizing). Its start-up
    is the Spark session's start and the target's creation."""
    from bench.workload import fill
    from cdc.jobs.supervisor import run
    from cdc.sinks.catalog import load_catalog
    from cdc.sinks.session import get_session

    began = time.time()
    catalog = load_catalog(settings)
    reg = registration(settings, "systems_cdc", **({"max_offsets_per_trigger": batch} if batch else {}))
    fill(get_session(settings, app_name="cdc-bench-systems"), settings, catalog, reg,
         registration(settings, "recorded"), rows=start, topic=topic, offset=start)
    ready = time.time()
    run(settings, [reg], available_now=True)
    committed = time.time()
    result = catalog.load_table(reg.target).scan(selected_fields=("id", "v", "n")).to_arrow().to_pydict()
    check = compare(expected, zip(result["id"], result["v"], result["n"]))
    return peers.Run("cdc", end - start, committed - began, ready - began, check, {})


def shape_of(name: str) -> str:
    """The suffix naming a run's workload and topic shape ("" for the backlog's default)."""
    return next((s for s in SHAPES if name.endswith(s)), "")


def figures(runs: list[peers.Run], previous: dict, sizes: dict, stats: dict, merge: bool = False) -> dict:
    sizes_key = "systems_merge_sizes" if merge else "systems_sizes"
    out = {sizes_key: {**sizes, **stats}}
    for r in runs:
        out.update(r.figures())
    cdc = next((r for r in runs if r.name.startswith("cdc")), None)
    same = previous.get(sizes_key, {}).get("events") == sizes["events"]
    for r in runs:
        # without cdc in the run: cdc's recorded on the same workload and topic shape, else its apply section's
        shape = shape_of(r.name)
        ours = cdc.events_per_s if cdc else (same and previous.get(f"systems_cdc{shape}_events_per_s")
                                             or previous.get("apply_events_per_s"))
        if r is not cdc and ours:
            out[f"cdc_vs_{r.name}_events_per_s"] = round(ours / r.events_per_s, 3)
    if cdc and same:
        # the peers not run now, recorded on the same workload and topic shape, against this cdc
        shape = shape_of(cdc.name)
        for name, rate in recorded_peers(previous).items():
            if name not in {r.name for r in runs} and shape_of(name) == shape:
                out[f"cdc_vs_{name}_events_per_s"] = round(cdc.events_per_s / rate, 3)
    return out


def recorded_peers(results: dict) -> dict[str, float]:
    """The peers' events per second after start-up in `results`, by run name."""
    rates = {}
    for key, value in results.items():
        name = key.removeprefix("peer_").removesuffix("_events_per_s")
        if key.startswith("peer_") and key.endswith("_events_per_s") and not name.endswith("_job") and value:
            rates[name] = value
    return rates


def merge_results(update: dict, succeeded: list[str], section: str = "systems") -> None:
    """`update` written into latest.json as `section`; an earlier failure of a system that `succeeded` now is
    dropped."""
    current = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in succeeded:
        current.pop(f"peer_{name}_failed", None)
    current.update(update)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    current.setdefault("sections", {})[section] = {
        "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "commit": commit}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(current, indent=2) + "\n")
    tmp.replace(RESULTS)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.systems", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200,000 events over 50,000 keys")
    parser.add_argument("--events", type=int, help="events in the backlog (overrides the size)")
    parser.add_argument("--keys", type=int, help="keys the backlog changes (overrides the size)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--only", help=f"comma-separated systems of {', '.join(SYSTEMS)} (default: all)")
    parser.add_argument("--replica-identity", default="default", choices=["default", "full"],
                        help="the backlog in the shape of a source table of this replica identity: full fills "
                             "each update's and delete's `before` (Flink's debezium-json needs it); its figures "
                             "are named with _full_identity")
    parser.add_argument("--batch", type=int, help="records per peer batch (commit); default 100,000, "
                                                   f"with --merge {MERGE_BATCH:,} for cdc too")
    parser.add_argument("--merge", action="store_true",
                        help="the merge workload: every key inserted first (each system loads them its own way, "
                             "untimed), then the changes, timed, in batches of --batch, on a topic of the "
                             f"REPLICA IDENTITY FULL shape; by default the systems {', '.join(MERGE_SYSTEMS)}")
    parser.add_argument("--hudi-table-type", default="COPY_ON_WRITE", choices=["COPY_ON_WRITE", "MERGE_ON_READ"])
    parser.add_argument("--no-results", action="store_true", help="print the figures without merging them into "
                                                                   "bench/results/latest.json")
    parser.add_argument("--freshness", action="store_true",
                        help=f"freshness at a sustained rate instead, runs of {', '.join(live.RUNS)}")
    parser.add_argument("--rate", type=int, default=2_000, help="--freshness: change events a second")
    parser.add_argument("--seconds", type=float, default=90, help="--freshness: seconds of changes")
    parser.add_argument("--live-out", help=argparse.SUPPRESS)  # --freshness of one run, its result into this file
    parser.add_argument("--config", default=str(ROOT / "cdc.yaml"))
    args = parser.parse_args()
    if args.freshness:
        return freshness(args, parser)
    default = MERGE_SYSTEMS if args.merge else tuple(s for s in SYSTEMS if s not in MERGE_ONLY)
    only = default if not args.only else tuple(s.strip() for s in args.only.split(","))
    if unknown := [s for s in only if s not in SYSTEMS]:
        parser.error(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    sizes = dict(SIZES["quick" if args.quick else "full"])
    sizes.update({k: v for k, v in (("events", args.events), ("keys", args.keys)) if v})
    base = load_settings(args.config)
    work = base.state_dir / "bench" / "systems"
    settings = bench_settings(base, work)

    key_doc, value_doc = recorded(settings)
    merge, full = args.merge, args.replica_identity == "full" or args.merge
    batch = args.batch or (MERGE_BATCH if merge else 100_000)
    loaded = list(workload.load(sizes["keys"])) if merge else []
    changes = list(workload.changes(sizes["keys"], sizes["events"], args.seed, loaded=merge))
    expected, stats = workload.truth(loaded + changes), workload.stats(changes)
    print(f"workload: {len(loaded):,} rows loaded first, then {stats}; {len(expected):,} rows expected", flush=True)
    topic_name = f"systems_{'merge' if merge else 'backlog'}_{sizes['events']}_{sizes['keys']}_{args.seed}"
    topic, end = backlog(settings, key_doc, value_doc, topic_name, loaded + changes, full)
    start = len(loaded)

    runs, failed = [], {}
    for name in only:
        print(f"== {name}", flush=True)
        label = name + (MERGE if merge else FULL if full else "")
        try:
            if name == "cdc":
                r = run_cdc(settings, topic, end, expected, start, batch if merge else None)
            else:
                if start:  # the load, by the peer's own pipeline: checked, not timed
                    load = peers.run(name, settings, topic, start, workload.truth(loaded), work, batch,
                                     args.hudi_table_type)
                    if not load.check["correct"]:
                        raise peers.PeerError(f"the {name} peer loaded the keys wrong: {load.check['wrong']}")
                r = peers.run(name, settings, topic, end, expected, work, batch, args.hudi_table_type, start=start)
        except Exception as e:  # one system's failure is reported, the others still run
            failed[label] = f"{type(e).__name__}: {e}"
            print(f"{name} failed: {failed[label]}", flush=True)
            continue
        runs.append(dataclasses.replace(r, name=label))
        print(f"{name}: {r.events:,} events, job {r.job_s:.1f}s (start-up {r.startup_s:.1f}s), "
              f"{r.events_per_s:,.0f} events/s after start-up; "
              f"{'correct' if r.check['correct'] else 'WRONG: ' + r.check['wrong']} {r.detail or ''}", flush=True)

    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    update = figures(runs, previous, {**sizes, "batch": batch} if merge else sizes, stats, merge)
    update.update({f"peer_{name}_failed": reason for name, reason in failed.items()})
    # kept apart too: a `python -m bench` run started earlier rewrites latest.json without them
    shape = "-merge" if merge else "-full" if full else ""
    (work / f"figures-{sizes['events']}{shape}.json").write_text(json.dumps(update, indent=2) + "\n")
    if not args.no_results:
        merge_results(update, [r.name for r in runs], "systems_merge" if merge else "systems")
    print(json.dumps(update, indent=2))
    return exit_code(failed)


def exit_code(failed: dict) -> int:
    """1 when cdc failed; a peer that failed (Flink refusing a topic's shape, say) is one of the
    results, recorded as `peer_<name>_failed`, and the runs after it still go."""
    return 1 if any(name.startswith("cdc") for name in failed) else 0


def freshness(args, parser) -> int:
    """`--freshness`: each run of live.RUNS (or of `--only`) following a topic of its own."""
    names = list(live.RUNS) if not args.only else [s.strip() for s in args.only.split(",")]
    if unknown := [s for s in names if s not in live.RUNS]:
        parser.error(f"unknown run(s) {', '.join(unknown)}; choose from {', '.join(live.RUNS)}")
    from cdc.sinks.catalog import load_catalog

    base = load_settings(args.config)
    work = base.state_dir / "bench" / "systems"
    settings = bench_settings(base, work)
    key_doc, value_doc = recorded(settings)
    keys = args.keys or 20_000
    # each cdc run in a process of its own (run by this command with --live-out)
    apart = None if args.live_out else [
        sys.executable, "-m", "bench.systems", "--freshness", "--rate", str(args.rate), "--seconds", str(args.seconds),
        "--keys", str(keys), "--seed", str(args.seed), "--config", args.config, "--no-results"]
    runs, failed = live.measure(settings, load_catalog(settings), key_doc, value_doc, names, args.rate,
                                args.seconds, keys, args.seed, work, apart)
    if args.live_out:
        if runs:
            Path(args.live_out).write_text(json.dumps(dataclasses.asdict(runs[0])))
        return 1 if failed else 0
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    sizes = {"rate": args.rate, "seconds": args.seconds, "keys": keys, "warm_up": live.WARM_UP}
    update = live.figures(runs, previous if previous.get("systems_freshness_sizes") == sizes else None)
    update["systems_freshness_sizes"] = sizes
    update.update({f"peer_{name}_freshness_failed": reason for name, reason in failed.items()})
    (work / "figures-freshness.json").write_text(json.dumps(update, indent=2) + "\n")
    if not args.no_results:
        merge_results(update, [f"{r.name}_freshness" for r in runs], "systems_freshness")
    print(json.dumps(update, indent=2))
    return exit_code(failed)


if __name__ == "__main__":
    sys.exit(main())
