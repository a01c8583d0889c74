"""The direct path's prototype, measured against today's MERGE on the same changes in one
process. Not a section of `make bench`: the prototype (jvm/direct-bench, `cdc.direct.ManyTargets`,
in a jar of its own that only this benchmark puts on the driver's class path) applies
upsert-mode changes only, without the delete memory, writing each target as the direct
path's task does (jvm/direct, `DirectDelta.write`).

    .venv/bin/python -m bench.direct [--tables 100] [--merge-tables 10] [--rounds 20]

Each round, every target takes a batch of 5 changes (3 updates, an insert, a delete) of its
1,000 rows. The direct path applies all targets' batches in one Spark job and commits one
RowDelta each (jvm/direct); the MERGE path runs planning/merge.py's statement per target, as
a running job's commit does. Figures: the driver JVM's CPU seconds a target's batch (the JIT
compilers' apart), the direct path's CPU of a commit alone (the driver thread's), the Spark
jobs a round. Then the targets of both paths are compared row for row, through Spark and
through pyiceberg, and `--big-rows` times 1,000 changes into a target of that many rows
(the `small_batch_s` case) on both paths."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from pyspark.sql import functions as F

from bench.tables import compiler_seconds, cpu_seconds
from bench.workload import initial_rows, jvm_pid
from cdc.config import load_settings
from cdc.config.models import Settings
from cdc.errors import ConfigError
from cdc.planning.merge import merge_sql
from cdc.sinks.catalog import load_catalog
from cdc.sinks.formats import TABLE_CLAUSES
from cdc.sinks.session import get_session, jvm_class

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench_direct"
ROWS = 1_000
COLUMNS = "id bigint, v string, n decimal(12,2), at timestamp, " \
          "_cdc_op string, _cdc_position string, _cdc_source_ts timestamp, _cdc_kafka_partition int, _cdc_kafka_offset bigint"
NAMES = ("id", "v", "n", "at")
PROTOTYPE = "cdc.direct.ManyTargets"


def with_prototype(settings: Settings) -> Settings:
    """`settings` with the prototype's jar (bench/cdc-direct-bench.jar of the jars directory,
    built from jvm/direct-bench by `make setup`) on the local driver's class path, after
    cdc's own: it is on no session of a running job."""
    jar = settings.path(settings.jars_dir) / "bench" / "cdc-direct-bench.jar"
    if not jar.is_file():
        raise ConfigError(f"no direct path prototype at {jar}", hint="run `make setup` to build jvm/direct-bench")
    conf = dict(settings.spark.extra_conf)
    conf["spark.driver.extraClassPath"] = os.pathsep.join(
        filter(None, [conf.get("spark.driver.extraClassPath"), str(jar)]))
    return settings.model_copy(update={"spark": settings.spark.model_copy(update={"extra_conf": conf})})


def create(spark, ref: str, rows: int) -> None:
    spark.sql(f"DROP TABLE IF EXISTS {ref} PURGE")
    spark.sql(f"CREATE TABLE {ref} ({COLUMNS}) {TABLE_CLAUSES['iceberg']}")
    spark.sql(f"ALTER TABLE {ref} SET TBLPROPERTIES ('format-version' = '3')")
    initial_rows(spark, rows).writeTo(ref).append()


def changes(spark, refs: list[str], round_: int, per_table: int, rows: int):
    """`per_table` changes of each target in `refs` (updates, then an insert of a new key, then
    a delete), positions above every earlier round's; one row per key, as after the dedupe."""
    n = len(refs)
    names = F.element_at(F.array(*[F.lit(r) for r in refs]), (F.col("id") / per_table).cast("int") + 1)
    j = F.col("id") % per_table
    key = F.when(j == per_table - 2, F.lit(rows * 1000 + round_)) \
        .otherwise((F.lit(round_ * 37) + j * 211 + F.col("id") / per_table * 7).cast("bigint") % rows)
    op = F.when(j == per_table - 1, "d").when(j == per_table - 2, "c").otherwise("u")
    position = F.lpad((F.lit(round_ * 100_000) + F.col("id")).cast("string"), 57, "0")
    return spark.range(n * per_table).select(
        names.alias("_table"), key.alias("id"), F.concat(F.lit("round "), F.lit(round_)).alias("v"),
        (F.lit(round_) + F.lit(0.5)).cast("decimal(12,2)").alias("n"), F.current_timestamp().alias("at"),
        op.alias("_cdc_op"), position.alias("_cdc_position"), F.current_timestamp().alias("_cdc_source_ts"),
        F.lit(0).alias("_cdc_kafka_partition"), (F.lit(round_ * 100_000) + F.col("id")).alias("_cdc_kafka_offset"),
        op.alias("_op"), F.lit(None).cast("string").alias("_deleted_position"))


def as_merge_view(df):
    """The direct path's input as the MERGE's batch view (planning/merge.py's names)."""
    return df.select(*NAMES, "_op", F.col("_cdc_position").alias("_position"),
                     F.col("_cdc_source_ts").alias("_source_ts"), F.col("_cdc_kafka_partition").alias("_partition"),
                     F.col("_cdc_kafka_offset").alias("_offset"), "_deleted_position")


class Meter:
    """The driver JVM's CPU (the JIT's apart) and Spark jobs over a stretch."""

    def __init__(self, spark, group: str):
        self.spark, self.pid, self.group = spark, jvm_pid(spark), f"bench-{group}"

    def __enter__(self):
        self.spark.sparkContext.setJobGroup(self.group, self.group)
        self.cpu, self.jit = cpu_seconds(self.pid), compiler_seconds(self.pid)
        self.started = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.wall = time.monotonic() - self.started
        self.jit = compiler_seconds(self.pid) - self.jit
        self.cpu = cpu_seconds(self.pid) - self.cpu - self.jit
        self.jobs = len(self.spark.sparkContext.statusTracker().getJobIdsForGroup(self.group))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=100)
    ap.add_argument("--merge-tables", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warm-up", type=int, default=5)
    ap.add_argument("--big-rows", type=int, default=1_000_000)
    ap.add_argument("--committers", type=int, default=8, help="targets committed at once")
    ap.add_argument("--worker-threads", type=int, default=0,
                    help="the driver JVM's Iceberg worker pool (iceberg.worker.num-threads; 0: Iceberg's default, a core each)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "direct.json")
    args = ap.parse_args()
    settings = with_prototype(load_settings(ROOT / "cdc.yaml"))
    if args.worker_threads:  # read once, when Iceberg's ThreadPools class loads
        os.environ["JDK_JAVA_OPTIONS"] = f"-Diceberg.worker.num-threads={args.worker_threads}"
    spark = get_session(settings, "cdc-bench-direct")
    catalog = settings.catalog.name
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{NAMESPACE}")
    direct = [f"{catalog}.{NAMESPACE}.d{i}" for i in range(args.tables)]
    merged = [f"{catalog}.{NAMESPACE}.m{i}" for i in range(args.merge_tables)]
    for ref in direct + merged:
        create(spark, ref, ROWS)
    helper = jvm_class(spark, PROTOTYPE)
    rounds = []
    for r in range(1, args.warm_up + args.rounds + 1):
        batch = changes(spark, direct, r, 5, ROWS).persist()
        batch.count()
        props = spark._jvm.java.util.HashMap()
        props.put("cdc.offsets", json.dumps({"bench": {"0": r}}))
        if r > 1:  # the offsets the round starts from, which the commit checks (jvm/direct OffsetsCheck)
            props.put("cdc.offsets-before", json.dumps({"bench": {"0": r - 1}}))
        with Meter(spark, f"direct-{r}") as d:
            out = [list(row) for row in helper.apply(spark._jsparkSession, direct, batch._jdf, "id", props,
                                                     args.committers)]
        phases, out = out[-1], out[:-1]
        found = sum(row[3] for row in out)
        with Meter(spark, f"merge-{r}") as m:
            for i, ref in enumerate(merged):
                view = f"bench_direct_batch_{i}"
                as_merge_view(batch.where(F.col("_table") == direct[i])).createOrReplaceTempView(view)
                spark.sql(merge_sql(ref, view, ("id",), NAMES))
        batch.unpersist()
        if r > args.warm_up:
            rounds.append({"direct_cpu_s": d.cpu, "direct_jit_s": d.jit, "direct_wall_s": d.wall, "direct_jobs": d.jobs,
                           "commit_cpu_s": statistics.median(row[0] / 1e9 for row in out),
                           "commit_wall_s": statistics.median(row[1] / 1e9 for row in out),
                           "task_wall_s": statistics.median(row[2] / 1e9 for row in out),
                           "load_s": phases[0] / 1e9, "job_s": phases[1] / 1e9, "commits_s": phases[2] / 1e9,
                           "found": found,
                           "merge_cpu_s": m.cpu, "merge_jit_s": m.jit, "merge_wall_s": m.wall, "merge_jobs": m.jobs})
        print(f"round {r}: direct {d.wall:.2f}s {d.cpu:.2f} cpu ({d.jobs} jobs, found {found}; load "
              f"{phases[0] / 1e9:.2f}s, job {phases[1] / 1e9:.2f}s, commits {phases[2] / 1e9:.2f}s); "
              f"merge x{len(merged)} {m.wall:.2f}s {m.cpu:.2f} cpu ({m.jobs} jobs)", flush=True)
    med = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
    figures = {
        "tables": args.tables, "merge_tables": args.merge_tables, "rounds": args.rounds,
        "direct_cpu_s_per_table": med["direct_cpu_s"] / args.tables,
        "direct_cpu_s_per_round": med["direct_cpu_s"], "direct_wall_s_per_round": med["direct_wall_s"],
        "direct_jobs_per_round": med["direct_jobs"], "commit_cpu_s": med["commit_cpu_s"],
        "commit_wall_s": med["commit_wall_s"], "task_wall_s": med["task_wall_s"], "committers": args.committers,
        "worker_threads": args.worker_threads,
        "load_s_per_round": med["load_s"], "job_s_per_round": med["job_s"], "commits_s_per_round": med["commits_s"],
        "merge_cpu_s_per_table": med["merge_cpu_s"] / args.merge_tables,
        "merge_wall_s_per_table": med["merge_wall_s"] / args.merge_tables,
        "merge_jobs_per_table": med["merge_jobs"] / args.merge_tables,
        "direct_jit_s_per_round": med["direct_jit_s"], "merge_jit_s_per_table": med["merge_jit_s"] / args.merge_tables,
    }
    figures["equal_tables"] = compare(spark, settings, direct[:len(merged)], merged)
    if args.big_rows:
        figures.update(big(spark, catalog, helper, args.big_rows))
    for ref in direct + merged:
        spark.sql(f"DROP TABLE IF EXISTS {ref} PURGE")
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0 if figures["equal_tables"] == len(merged) else 1


def compare(spark, settings, direct: list[str], merged: list[str]) -> int:
    """How many pairs of targets hold the same rows, read through Spark and through pyiceberg."""
    cols = "id, v, n, _cdc_op, _cdc_position"  # `at` of the initial rows is each fill's time
    catalog = load_catalog(settings)
    equal = 0
    for d, m in zip(direct, merged):
        a, b = spark.sql(f"SELECT {cols} FROM {d}"), spark.sql(f"SELECT {cols} FROM {m}")
        same_spark = a.exceptAll(b).isEmpty() and b.exceptAll(a).isEmpty()
        read = catalog.load_table(d.split(".", 1)[1]).scan(selected_fields=("id", "v", "_cdc_position")).to_arrow()
        spark_rows = {(r.id, r.v, r._cdc_position) for r in a.collect()}
        same_pyiceberg = set(zip(*[read[c].to_pylist() for c in ("id", "v", "_cdc_position")])) == spark_rows
        equal += same_spark and same_pyiceberg and read.num_rows == len(spark_rows)
        if not (same_spark and same_pyiceberg):
            print(f"DIFFERENT: {d} and {m} (spark {same_spark}, pyiceberg {same_pyiceberg})")
            a.exceptAll(b).show(5, False)
            b.exceptAll(a).show(5, False)
    return equal


def big(spark, catalog: str, helper, rows: int) -> dict:
    """1,000 changes into a target of `rows` rows (its data in a few files), on each path."""
    refs = {p: f"{catalog}.{NAMESPACE}.big_{p}" for p in ("direct", "merge")}
    out = {}
    for path, ref in refs.items():
        create(spark, ref, rows)
        times = []
        for r in range(1, 4):
            batch = changes(spark, [ref], r, 1000, rows).persist()
            batch.count()
            started = time.monotonic()
            if path == "direct":
                helper.apply(spark._jsparkSession, [ref], batch._jdf, "id", spark._jvm.java.util.HashMap(), 1)
            else:
                as_merge_view(batch).createOrReplaceTempView("bench_direct_big")
                spark.sql(merge_sql(ref, "bench_direct_big", ("id",), NAMES))
            times.append(time.monotonic() - started)
            batch.unpersist()
        out[f"big_{path}_s"] = statistics.median(times)
    a, b = (spark.sql(f"SELECT id, v, _cdc_position FROM {r}") for r in refs.values())
    out["big_equal"] = a.exceptAll(b).isEmpty() and b.exceptAll(a).isEmpty()
    for ref in refs.values():
        spark.sql(f"DROP TABLE IF EXISTS {ref} PURGE")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
