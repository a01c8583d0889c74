"""Read time of a table after a long run of small batches (many position-delete files),
without and then with `cdc maintain`."""
from __future__ import annotations

from pyspark.sql import functions as F

from bench.workload import Events, changes, fill, produce, registration, timed
from cdc.jobs.maintenance import maintain
from cdc.jobs.supervisor import run
from cdc.planning.merge import table_ref
from cdc.sinks.formats import open_table


def read_times(spark, settings, catalog, reg) -> dict:
    """Seconds for a full read by Spark (a checksum of every row) and by pyiceberg (to Arrow)."""
    ref = table_ref(settings.catalog.name, reg.target)
    spark_s = timed(lambda: spark.table(ref).agg(F.count("*"), F.sum(F.hash("*"))).collect())
    pyiceberg_s = timed(lambda: catalog.load_table(reg.target).scan().to_arrow())
    return {"spark_s": round(spark_s, 2), "pyiceberg_s": round(pyiceberg_s, 2),
            **open_table(spark, ref).file_counts()}


def measure(spark, settings, catalog, template, key_doc, value_doc, rows: int, batches: int, per_batch: int) -> dict:
    reg = registration(settings, "churn", max_offsets_per_trigger=per_batch)
    topic = fill(spark, settings, catalog, reg, template, rows)
    produce(settings, topic, changes(Events(key_doc, value_doc), rows, batches * per_batch, seed=11))
    fresh = read_times(spark, settings, catalog, reg)
    churn_s = timed(lambda: run(settings, [reg], available_now=True))
    without = read_times(spark, settings, catalog, reg)
    maintain_s = timed(lambda: maintain(settings, [reg]))
    with_ = read_times(spark, settings, catalog, reg)
    print(f"read after {batches} batches: {without}; after cdc maintain ({maintain_s:.1f}s): {with_}; "
          f"before the changes: {fresh}", flush=True)
    return {"read_batches": batches, "read_batch_events": per_batch, "read_churn_s": round(churn_s, 1),
            "read_before_changes": fresh, "read_without_maintenance": without, "read_after_maintenance": with_,
            "maintain_s": round(maintain_s, 1),
            "read_spark_without_vs_with_maintenance": round(without["spark_s"] / with_["spark_s"], 2)}
