"""The direct path's prototype (jvm/direct-bench, ManyTargets, which bench/direct.py measures):
upsert-mode changes of several targets applied by one Spark job and one RowDelta each (or a
lone target's, with no shuffle) equal what planning/merge.py's MERGE makes of the same
changes, read through Spark and through pyiceberg, and the targets stay tables of deletion
vectors (one a data file, the previous one merged into it)."""
from __future__ import annotations

import json

from pyspark.sql import functions as F

from bench.direct import PROTOTYPE
from cdc.planning.merge import merge_sql
from cdc.sinks.formats import TABLE_CLAUSES
from cdc.sinks.session import jvm_class
from tests.spark.conftest import SCRATCH

COLUMNS = ("id bigint, v string, _cdc_op string, _cdc_position string, _cdc_source_ts timestamp, "
           "_cdc_kafka_partition int, _cdc_kafka_offset bigint")
CHANGE = ("_table string, id bigint, v string, _cdc_op string, _cdc_position string, _cdc_source_ts timestamp, "
          "_cdc_kafka_partition int, _cdc_kafka_offset bigint, _op string, _deleted_position string")


def pos(n: int) -> str:
    return str(n).rjust(20, "0")


# Rounds of (key, value, op, position, remembered delete position): the last change per key.
ROUNDS = [
    [(1, "a1", "u", 10, None), (2, None, "d", 11, None), (10, "new", "c", 12, None), (3, "old", "u", 0, None)],
    [(1, "a2", "u", 20, None), (2, "back", "c", 21, None), (10, None, "d", 22, None), (4, "b", "u", 23, None)],
    [(1, "late", "u", 15, None), (11, "gone", "c", 30, 31), (12, "kept", "c", 32, 31), (5, None, "d", 33, None)],
]


def rows_of(table: str, round_: list) -> list:
    return [(table, k, v, op, pos(p), None, 0, p, op, None if d is None else pos(d)) for k, v, op, p, d in round_]


def create(spark, ref: str) -> None:
    spark.sql(f"CREATE TABLE {ref} ({COLUMNS}) {TABLE_CLAUSES['iceberg']}")
    spark.sql(f"ALTER TABLE {ref} SET TBLPROPERTIES ('format-version' = '3')")
    spark.range(1, 9).select(F.col("id"), F.lit("initial").alias("v"), F.lit("r").alias("_cdc_op"),
                             F.lit(pos(1)).alias("_cdc_position"), F.lit(None).cast("timestamp").alias("_cdc_source_ts"),
                             F.lit(None).cast("int").alias("_cdc_kafka_partition"),
                             F.lit(None).cast("bigint").alias("_cdc_kafka_offset")).writeTo(ref).append()


def test_one_job_and_a_row_delta_a_target_equal_the_merge(scratch, table_name):
    spark, catalog = scratch
    direct = [f"{SCRATCH}.default.{table_name}_d{i}" for i in range(3)]  # two in one job, one alone
    merged = f"{SCRATCH}.default.{table_name}_m"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {SCRATCH}.default")
    for ref in (*direct, merged):
        create(spark, ref)
    helper = jvm_class(spark, PROTOTYPE)
    for n, round_ in enumerate(ROUNDS):
        batch = spark.createDataFrame([r for ref in direct for r in rows_of(ref, round_)], CHANGE)
        props = spark._jvm.java.util.HashMap()
        props.put("cdc.offsets", json.dumps({"t": {"0": n}}))
        if n:  # the offsets the round starts from, which each commit checks (jvm/direct OffsetsCheck)
            props.put("cdc.offsets-before", json.dumps({"t": {"0": n - 1}}))
        together = helper.apply(spark._jsparkSession, direct[:2], batch.where(F.col("_table") != direct[2])._jdf,
                                "id", props, 2)
        alone = helper.apply(spark._jsparkSession, direct[2:], batch.where(F.col("_table") == direct[2])._jdf,
                             "id", props, 1)
        assert len(together) == 3 and len(alone) == 2
        assert all(o[1] > 0 for o in [*together[:2], *alone[:1]])  # each target committed
        batch.where(F.col("_table") == direct[0]).select(
            "id", "v", "_op", F.col("_cdc_position").alias("_position"), F.col("_cdc_source_ts").alias("_source_ts"),
            F.col("_cdc_kafka_partition").alias("_partition"), F.col("_cdc_kafka_offset").alias("_offset"),
            "_deleted_position").createOrReplaceTempView("direct_delta_batch")
        spark.sql(merge_sql(merged, "direct_delta_batch", ("id",), ("id", "v")))

    cols = "id, v, _cdc_op, _cdc_position, _cdc_kafka_offset"
    expected = sorted(tuple(r) for r in spark.sql(f"SELECT {cols} FROM {merged}").collect())
    assert {r[0]: r[1] for r in expected} == {1: "a2", 2: "back", 3: "initial", 4: "b", 6: "initial",
                                               7: "initial", 8: "initial", 12: "kept"}
    for ref in direct:
        assert sorted(tuple(r) for r in spark.sql(f"SELECT {cols} FROM {ref}").collect()) == expected
        read = catalog.load_table(ref.split(".", 1)[1]).scan().to_arrow()
        assert sorted(zip(*[read[c].to_pylist() for c in cols.split(", ")])) == expected
        files = spark.sql(f"SELECT content, file_format, count(*) AS n FROM {ref}.files GROUP BY 1, 2").collect()
        assert {(r.content, r.file_format) for r in files} == {(0, "PARQUET"), (1, "PUFFIN")}
        vectors = spark.sql(f"SELECT referenced_data_file, count(*) AS n FROM {ref}.delete_files GROUP BY 1").collect()
        assert vectors and all(r.n == 1 for r in vectors)  # merged round after round, one a file
        summary = spark.sql(f"SELECT summary FROM {ref}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
        assert json.loads(summary["cdc.offsets"]) == {"t": {"0": len(ROUNDS) - 1}}
