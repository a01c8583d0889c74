"""The peers on the same change batch and the same table: Delta Lake MERGE through
delta-spark (deletion vectors on) and pyiceberg's `Table.upsert`.

Both get the batch already decoded (read from the same topic and staged as Parquet,
untimed), so their time is their apply alone. cdc's is compared on the same footing: the
time of its batch's apply steps (dedupe, delete memory, MERGE, commit with offsets), from
the job's metrics. The ratios of cdc's whole batch (with reading Kafka and decoding, which
the peers are spared) are recorded beside them."""
from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import In

from bench.workload import fill, initial_rows, registration, timed
from cdc.config.clients import java_kafka_properties
from cdc.decoding.spark_decode import decode
from cdc.sinks.targets import table_columns

DELTA_CONF = {  # Delta's extension and catalog are in every cdc session (sinks/session.py)
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
VALUES = ("v", "n", "at", "_cdc_op", "_cdc_position", "_cdc_source_ts", "_cdc_kafka_partition", "_cdc_kafka_offset")


def stage(spark, settings, catalog, reg, topic: str, work: Path) -> tuple[str, str]:
    """The batch's decoded changes, and the last change per key, as Parquet."""
    columns, key, _ = table_columns(catalog.load_table(reg.target).properties)
    raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap)
           .options(**{f"kafka.{k}": v for k, v in java_kafka_properties(settings).items()})
           .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    events, last = str(work / "events.parquet"), str(work / "last.parquet")
    (decode(raw, columns, key).where("_error IS NULL AND _op IN ('c', 'u', 'r', 'd')")
     .selectExpr("id", "v", "n", "at", "_op AS _cdc_op", "_position AS _cdc_position", "_source_ts AS _cdc_source_ts",
                 "_partition AS _cdc_kafka_partition", "_offset AS _cdc_kafka_offset")
     .write.mode("overwrite").parquet(events))
    spark.read.parquet(events).createOrReplaceTempView("bench_events")
    spark.sql(_last_per_key("bench_events")).write.mode("overwrite").parquet(last)
    return events, last


def _last_per_key(view: str) -> str:
    fields = ", ".join(f"'{c}', {c}" for c in VALUES)
    return (f"SELECT id, w.* FROM (SELECT id, max_by(named_struct({fields}), _cdc_position) AS w "
            f"FROM {view} GROUP BY id)")


def delta_merge(spark, events: str, rows: int, work: Path) -> float:
    """Seconds for Delta Lake to dedupe the staged events and MERGE them into a Delta table
    of the same `rows` rows, deletion vectors on (after an untimed warm-up MERGE, as cdc's
    own apply runs after a warm-up)."""
    spark.read.parquet(events).createOrReplaceTempView("bench_delta_events")
    spark.read.parquet(events).limit(1_000).createOrReplaceTempView("bench_delta_warmup")
    _delta_merge(spark, work / "delta_warmup", 10_000, "bench_delta_warmup")
    path = work / "delta_table"
    seconds = _delta_merge(spark, path, rows, "bench_delta_events")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    print(f"delta MERGE: {seconds:.1f}s, {history['operationMetrics']}", flush=True)
    return seconds


def _delta_merge(spark, path: Path, rows: int, view: str) -> float:
    shutil.rmtree(path, ignore_errors=True)
    initial_rows(spark, rows).write.format("delta").save(str(path))
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    assign = ", ".join(f"{c} = s.{c}" for c in VALUES)
    statement = (f"MERGE INTO delta.`{path}` t USING ({_last_per_key(view)}) s ON t.id = s.id "
                 f"WHEN MATCHED AND s._cdc_op = 'd' THEN DELETE "
                 f"WHEN MATCHED THEN UPDATE SET {assign} "
                 f"WHEN NOT MATCHED AND s._cdc_op <> 'd' THEN INSERT (id, {', '.join(VALUES)}) "
                 f"VALUES (s.id, {', '.join('s.' + c for c in VALUES)})")
    return timed(lambda: spark.sql(statement))


def pyiceberg_upsert(spark, settings, catalog, template, last: str, rows: int) -> float:
    """Seconds for pyiceberg to apply the last change per key to an Iceberg table of the
    same `rows` rows and layout: `Table.upsert` of the upserts, `Table.delete` of the deletes."""
    reg = registration(settings, "peer_pyiceberg")
    fill(spark, settings, catalog, reg, template, rows)
    table = catalog.load_table(reg.target)
    changes = pq.read_table(last).cast(table.schema().as_arrow())
    upserts = changes.filter(pc.field("_cdc_op") != "d")
    deleted = changes.filter(pc.field("_cdc_op") == "d").column("id").to_pylist()

    def apply():
        result = table.upsert(upserts, join_cols=["id"])
        table.delete(In("id", deleted))
        print(f"pyiceberg upsert: {result.rows_updated:,} updated, {result.rows_inserted:,} inserted, "
              f"{len(deleted):,} deleted", flush=True)
    seconds = timed(apply)
    print(f"pyiceberg upsert and delete: {seconds:.1f}s", flush=True)
    return seconds


def measure(spark, settings, catalog, template, small: dict, work: Path, sizes: dict) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    events, last = stage(spark, settings, catalog, small["reg"], small["topic"], work)
    delta_s = delta_merge(spark, events, sizes["small"], work)
    upsert_s = pyiceberg_upsert(spark, settings, catalog, template, last, sizes["small"])
    ours, whole = small["merge_s"], small["apply_s"]
    return {"delta_merge_s": round(delta_s, 2), "pyiceberg_upsert_s": round(upsert_s, 2),
            "cdc_vs_delta_merge": round(ours / delta_s, 3), "cdc_vs_pyiceberg_upsert": round(ours / upsert_s, 3),
            "cdc_batch_vs_delta_merge": round(whole / delta_s, 3),
            "cdc_batch_vs_pyiceberg_upsert": round(whole / upsert_s, 3)}
