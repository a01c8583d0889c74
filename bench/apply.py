"""Apply throughput against its limit, and MERGE cost against table size."""
from __future__ import annotations

import statistics

from bench import ladder
from bench.ladder import ONE_BATCH
from bench.workload import Events, changes, fill, produce, registration, timed
from cdc.jobs import metrics
from cdc.jobs.supervisor import run


SMALL_BATCH = 1_000  # changes in the batch whose fixed cost is measured


def _small_batch(settings, reg, topic: str, key_doc, value_doc, rows: int, after: int, times: int = 3) -> dict:
    """`small_batch_s`: a batch of SMALL_BATCH changes into `reg`'s table (the big one),
    from the applier's start to its commit, and `small_batch_run_s`, the whole
    `cdc run --available-now` around it (session, query start and stop included): the
    median of `times` such batches one after the other (the first after a big batch runs
    slower than those a running job sees)."""
    batches, runs = [], []
    for i in range(times):
        later = Events(key_doc, value_doc)
        later.lsn += 8 * (after + 1 + i * (SMALL_BATCH + 1))  # positions after those already applied
        produce(settings, topic, changes(later, rows, SMALL_BATCH, seed=100 + i))
        before = metrics.batch_seconds(reg.name)
        runs.append(timed(lambda: run(settings, [reg], available_now=True)))
        batches.append(metrics.batch_seconds(reg.name) - before)
    print(f"batches of {SMALL_BATCH:,} changes: {', '.join(f'{b:.2f}' for b in batches)}s applied, "
          f"{', '.join(f'{r:.1f}' for r in runs)}s the whole runs", flush=True)
    return {"small_batch_s": round(statistics.median(batches), 2),
            "small_batch_run_s": round(statistics.median(runs), 2),
            "small_batch_each_s": [round(b, 2) for b in batches]}


def measure(spark, settings, catalog, template, key_doc, value_doc, sizes: dict) -> tuple[dict, dict]:
    """`apply_events_per_s` and `append_limit_events_per_s` (each the better of two runs),
    `apply_vs_limit`, and the same change batch merged into a table of `small` and of `big` rows. Also returns what the
    peers need: the small table's registration and topic, the whole batch's time and that of its apply steps."""
    n = sizes["changes"]
    small = registration(settings, "small", **ONE_BATCH)
    topic = fill(spark, settings, catalog, small, template, sizes["small"])
    produce(settings, topic, changes(Events(key_doc, value_doc), sizes["small"], n))
    apply_s = timed(lambda: run(settings, [small], available_now=True))
    print(f"apply: {n:,} events in {apply_s:.1f}s, {n / apply_s:,.0f} events/s", flush=True)

    limit_s = min(ladder.rung_s(spark, settings, catalog, template, topic, "decode_append", rows=sizes["small"])
                  for _ in range(2))
    # The same job stopped below the append: reading alone, decoding into nothing, into Parquet.
    rungs = {rung: min(ladder.rung_s(spark, settings, catalog, template, topic, rung) for _ in range(2))
             for rung in ("raw_consume", "decode_noop", "decode_parquet")}
    print(f"append limit: {n:,} events in {limit_s:.1f}s, {n / limit_s:,.0f} events/s (the better of two runs)",
          flush=True)

    big = registration(settings, "big", **ONE_BATCH)
    big_topic = fill(spark, settings, catalog, big, template, sizes["big"])
    produce(settings, big_topic, changes(Events(key_doc, value_doc), sizes["small"], n))
    big_s = timed(lambda: run(settings, [big], available_now=True))
    small_batch = _small_batch(settings, big, big_topic, key_doc, value_doc, sizes["big"], after=n)
    # The small table again, now that the JVM is as warm as for the big one.
    again = registration(settings, "small_again", **ONE_BATCH)
    again_topic = fill(spark, settings, catalog, again, template, sizes["small"])
    produce(settings, again_topic, changes(Events(key_doc, value_doc), sizes["small"], n))
    small_s = timed(lambda: run(settings, [again], available_now=True))
    print(f"the same batch: {small_s:.1f}s into {sizes['small']:,} rows, {big_s:.1f}s into {sizes['big']:,}",
          flush=True)
    # The better of the two runs on the small table; its apply steps (dedupe, delete memory,
    # MERGE and the commit, after reading and decoding) are what the peers are measured against.
    merge_s = metrics.step_seconds(small.name) if apply_s <= small_s else metrics.step_seconds(again.name)
    apply_s = min(apply_s, small_s)
    # A second backlog into that table: what every batch of a running job after its first
    # costs (its record schemas judged, the batch is read from Kafka once).
    warm = Events(key_doc, value_doc)
    warm.lsn += 8 * (n + 1)  # positions after those of the first backlog
    produce(settings, again_topic, changes(warm, sizes["small"], n, seed=8))
    warm_s = timed(lambda: run(settings, [again], available_now=True))
    print(f"apply, schemas judged before: {n:,} events in {warm_s:.1f}s, {n / warm_s:,.0f} events/s", flush=True)
    figures = {
        "apply_events_per_s": round(n / apply_s), "append_limit_events_per_s": round(n / limit_s),
        "apply_vs_limit": round(limit_s / apply_s, 3), "apply_warm_events_per_s": round(n / warm_s),
        "merge_small_s": round(small_s, 2), "cdc_apply_steps_s": round(merge_s, 2), "merge_big_s": round(big_s, 2),
        "merge_scaling_10m_vs_1m": round(big_s / small_s, 3), **small_batch,
        **ladder.figures(n, {**rungs, "decode_append": limit_s, "merge": apply_s}),
    }
    return figures, {"reg": small, "topic": topic, "apply_s": apply_s, "merge_s": merge_s}
