"""cdc's benchmark: figures that hold across machines, mostly as ratios, in one run.

    .venv/bin/python -m bench --quick      (make bench-quick: about ten minutes here)
    .venv/bin/python -m bench              (make bench)
    .venv/bin/python -m bench --quick --only apply,peers   (some sections; the others' figures stay)

On the local stack (started if needed), for a table of (id bigint, v text, n numeric(12,2),
at timestamptz). A change event recorded from the real Debezium connector is the template
of the backlogs produced straight into Kafka, so the source database is not the
bottleneck; freshness and bootstrap go through the real connector. Sections:

- apply: `apply_events_per_s` (`cdc run --available-now` over a backlog into an existing
  table), `append_limit_events_per_s` (the same job appending instead of merging),
  `apply_vs_limit`; `ladder`, the same job stopped at each step (raw consume into `noop`,
  decode into `noop`, into Parquet, the append, the full MERGE) and each step's share;
  `apply_warm_events_per_s`, a second backlog into a table whose record
  schemas were judged (as every batch of a running job after its first); the same change batch into a `small` and a `big` table,
  `merge_scaling_10m_vs_1m` (0.1M and 1M rows with --quick, 1M and 10M without);
  `small_batch_s`, a batch of 1,000 changes into the big table (its fixed cost), and
  `small_batch_run_s`, the whole `cdc run --available-now` around it.
- avro: `apply_avro_events_per_s`, the apply section's backlog in Confluent's Avro wire
  format (recorded from the connector writing Avro through the stack's schema registry),
  and `apply_avro_vs_json`; then the steady section over the same Avro events
  (`steady_avro_cpu_s_per_batch` and the rest, `steady_avro_vs_json_cpu` over the steady
  section's CPU a batch).
- peers: Delta Lake MERGE and pyiceberg upsert on the same batch and table,
  `cdc_vs_delta_merge` and `cdc_vs_pyiceberg_upsert` (time ratios, ours over theirs).
- read: read time after a long run of small batches, without and with `cdc maintain`.
- bootstrap: `bootstrap_jdbc_rows_per_s`, `bootstrap_debezium_rows_per_s`, their ratio.
- backlog: `backlog_events_per_s` (a long outage's backlog, 5M changes or 500k with --quick,
  caught up with the default batch sizing), `backlog_vs_append_limit`, `backlog_batches`,
  `backlog_peak_rss_mb` (the driver JVM's peak resident memory meanwhile);
  `backlog_5m_events_per_s` at full size (or with `--backlog-events 5000000`).
- steady: a continuous `cdc run` over a 1,000-row table taking 5 changes each trigger
  interval, past its warm-up: `steady_cpu_s_per_batch` (the driver's CPU a batch),
  `steady_jit_s_per_batch`, `steady_batches`, `steady_compactions`,
  `steady_freshness_p50_s`, `steady_freshness_p95_s`.
- freshness: `freshness_p50_s`, `freshness_p95_s` (source commit to visible in Iceberg) at
  `freshness_rate_events_per_s` through the real connector.
- cut: the consistent cut's age while two tables of one source take transactions that change
  both: `cut_age_p50_s`, `cut_age_p95_s`, `cut_age_vs_freshness` (over `freshness_p95_s`).
- tables: one continuous `cdc run` over 100 tables with Zipf-like change rates adding up to
  2,000 events/s: `tables_100_start_s`, `tables_100_idle_cpu_share` (all quiet),
  `tables_100_freshness_p95_s`, `tables_100_worst_table_p95_s`, `tables_100_cpu_share`.

Writes bench/results/latest.json and latest.png (--quick: the figures the goals are measured
by), or bench/results/full.json and full.png (the full size), so neither run replaces the other.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from bench import apply, avro, backlog, bootstrap, chart, cut, freshness, maintenance, peers, steady, systems, tables
from bench.workload import Events, changes, fill, produce, record_template, registration, bench_settings
from cdc.config import load_settings
from cdc.jobs.supervisor import run
from cdc.sinks.catalog import load_catalog
from cdc.sinks.session import get_session
from cdc.stack.manager import Stack

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SECTIONS = ("apply", "peers", "read", "bootstrap", "backlog", "steady", "avro", "freshness", "cut", "tables")
SIZES = {
    "quick": {"small": 100_000, "big": 1_000_000, "changes": 100_000, "read_rows": 100_000, "read_batches": 40,
              "read_batch_events": 2_500, "bootstrap_rows": 200_000, "backlog": 500_000, "freshness_rate": 2_000, "freshness_s": 60,
              "steady_warm_up_s": 60, "steady_s": 120, "tables": 100, "tables_rate": 2_000, "tables_s": 60},
    "full": {"small": 1_000_000, "big": 10_000_000, "changes": 500_000, "read_rows": 1_000_000, "read_batches": 100,
             "read_batch_events": 5_000, "bootstrap_rows": 1_000_000, "backlog": 5_000_000, "freshness_rate": 2_000, "freshness_s": 180,
             "steady_warm_up_s": 60, "steady_s": 300, "tables": 100, "tables_rate": 2_000, "tables_s": 180},
}
# the sizes each section runs at (a section run alone leaves the others' recorded sizes)
SECTION_SIZES = {"apply": ("small", "big", "changes"), "avro": ("small", "changes", "steady_warm_up_s", "steady_s"), "peers": ("small", "changes"),
                 "read": ("read_rows", "read_batches", "read_batch_events"), "bootstrap": ("bootstrap_rows",),
                 "backlog": ("backlog", "small"), "steady": ("steady_warm_up_s", "steady_s"),
                 "freshness": ("freshness_rate", "freshness_s"), "cut": ("freshness_rate", "freshness_s"),
                 "tables": ("tables", "tables_rate", "tables_s")}


def machine() -> dict:
    mem = next((int(line.split()[1]) // 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), None) if Path("/proc/meminfo").exists() else None
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"cpus": os.cpu_count(), "cpu": model, "memory_mb": mem, "platform": platform.platform(),
            "python": platform.python_version(), "java": _first_line(["java", "-version"])}


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the same measurements at a size for about ten minutes")
    parser.add_argument("--only", help=f"comma-separated sections of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--backlog-events", type=int, help="changes in the backlog section's backlog (5,000,000 "
                                                          "records backlog_5m_events_per_s with --quick too)")
    parser.add_argument("--config", default=str(ROOT / "cdc.yaml"), help="the cdc.yaml of the stack to use")
    args = parser.parse_args()
    only = SECTIONS if not args.only else tuple(s.strip() for s in args.only.split(","))
    if unknown := [s for s in only if s not in SECTIONS]:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    mode = "quick" if args.quick else "full"
    sizes = {**SIZES[mode], **({"backlog": args.backlog_events} if args.backlog_events else {})}
    base = load_settings(args.config)
    settings = bench_settings(base, base.state_dir / "bench")
    settings = settings.model_copy(update={"spark": settings.spark.model_copy(
        update={"extra_conf": {**settings.spark.extra_conf, **peers.DELTA_CONF}})})
    Stack(settings).up()
    spark = get_session(settings, app_name="cdc-bench")
    catalog = load_catalog(settings)
    key_doc, value_doc = record_template(settings)
    template = registration(settings, "recorded")
    stem = "latest" if mode == "quick" else "full"
    out, chart_file = RESULTS / f"{stem}.json", RESULTS / f"{stem}.png"
    previous = json.loads(out.read_text()) if out.exists() else {}
    if previous.get("mode") not in (None, mode):
        previous = {}
    if not args.only:  # a whole run writes its figures anew, the peer systems' (`make bench-peers`) kept
        previous = {**{k: v for k, v in previous.items() if systems.owns(k)},
                    "sections": {k: v for k, v in (previous.get("sections") or {}).items() if k in systems.SECTIONS}}
    commit = _first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    if subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "cdc", "bench/__main__.py", "bench/apply.py"],
                      capture_output=True, text=True).stdout.strip():
        commit += "+changes"  # measured on uncommitted code
    results = {**previous, "mode": mode, "sizes": dict(previous.get("sizes") or {}), "machine": machine()}
    ran = results.setdefault("sections", {})

    # Warm-up (the JIT, the first Spark jobs, the catalog): an untimed small backlog.
    warm = registration(settings, "warmup")
    warm_topic = fill(spark, settings, catalog, warm, template, 10_000)
    produce(settings, warm_topic, changes(Events(key_doc, value_doc), 10_000, 25_000))
    run(settings, [warm], available_now=True)

    small = None
    for section in SECTIONS:
        if section not in only and not (section == "apply" and "peers" in only):
            continue
        print(f"== {section}", flush=True)
        if section == "apply":
            figures, small = apply.measure(spark, settings, catalog, template, key_doc, value_doc, sizes)
        elif section == "avro":
            figures = avro.measure(spark, settings, catalog, template, sizes, results.get("apply_events_per_s"),
                                   results.get("steady_cpu_s_per_batch"))
        elif section == "peers":
            figures = peers.measure(spark, settings, catalog, template, small, settings.state_dir / "bench" / "peers",
                                    sizes)
        elif section == "read":
            figures = maintenance.measure(spark, settings, catalog, template, key_doc, value_doc, sizes["read_rows"],
                                          sizes["read_batches"], sizes["read_batch_events"])
        elif section == "bootstrap":
            figures = bootstrap.measure(spark, settings, sizes["bootstrap_rows"])
        elif section == "backlog":
            figures = backlog.measure(spark, settings, catalog, template, key_doc, value_doc, sizes,
                                      results.get("append_limit_events_per_s"))
        elif section == "steady":
            figures = steady.measure(spark, settings, catalog, template, Events(key_doc, value_doc), sizes)
        elif section == "freshness":
            figures = freshness.measure(settings, catalog, sizes["freshness_rate"], sizes["freshness_s"])
        elif section == "cut":
            figures = cut.measure(settings, catalog, sizes["freshness_rate"], sizes["freshness_s"],
                                  results.get("freshness_p95_s"))
        else:
            figures = tables.measure(spark, settings, catalog, sizes)
        results.update(figures)
        results["sizes"].update({k: sizes[k] for k in SECTION_SIZES[section]})
        ran[section] = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "commit": commit,
                        "cpu": results["machine"]["cpu"]}
        RESULTS.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
    results["goals"] = {key: chart.met(results, key) for key, *_ in chart.GOALS}
    out.write_text(json.dumps(results, indent=2) + "\n")
    chart.draw(results, chart_file)
    print(json.dumps({k: v for k, v in results.items() if k not in ("machine", "sizes", "sections")}, indent=2))
    print(f"results: {out}, chart: {chart_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
