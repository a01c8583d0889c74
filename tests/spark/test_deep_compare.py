"""`reconcile --deep`'s comparison on Spark frames: checksums of key ranges, bisected down
to the keys that are missing, extra or different."""
from __future__ import annotations

from pyspark.sql import functions as F

from cdc.report.deep import compare


def frame(spark, rows: int):
    return spark.range(rows).select(F.col("id"), (F.col("id") % 7).cast("int").alias("part"),
                                    F.concat(F.lit("v"), F.col("id").cast("string")).alias("v"),
                                    F.when(F.col("id") % 5 == 0, F.lit(None)).otherwise(F.col("id") / 3).alias("x"))


def test_equal_frames_have_no_differences(spark):
    found = compare(frame(spark, 1000), frame(spark, 1000), ("id", "part", "v", "x"), ("id",), 10)
    assert (found["missing"], found["extra"], found["different"], found["keys"]) == (0, 0, 0, [])
    assert found["rows"] == {"source": 1000, "target": 1000} and len(found["levels"]) == 1


def test_bisection_names_exactly_the_keys_that_differ(spark):
    source = frame(spark, 100_000)
    target = (frame(spark, 100_000).where(~F.col("id").isin(17, 99_999))  # missing in the target
              .withColumn("v", F.when(F.col("id") == 4242, F.lit("changed")).otherwise(F.col("v")))
              .withColumn("x", F.when(F.col("id") == 10, F.lit(1.0)).otherwise(F.col("x")))  # null -> value
              .unionByName(frame(spark, 100_001).where(F.col("id") == 100_000)))  # extra
    found = compare(source, target, ("id", "part", "v", "x"), ("id",), 3)
    assert (found["missing"], found["extra"], found["different"]) == (2, 1, 2)
    assert len(found["levels"]) >= 2 and found["levels"][0]["differing"] <= 5  # it bisected
    assert found["keys"] == [{"kind": "different", "key": {"id": 10}}, {"kind": "different", "key": {"id": 4242}},
                             {"kind": "extra", "key": {"id": 100_000}}]  # limited to 3, by kind then key


def test_composite_key_and_a_value_moved_between_columns(spark):
    a = spark.createDataFrame([(1, 1, 5, None), (1, 2, None, None)], "k1 int, k2 int, a int, b int")
    b = spark.createDataFrame([(1, 1, None, 5), (1, 2, None, None)], "k1 int, k2 int, a int, b int")
    found = compare(a, b, ("k1", "k2", "a", "b"), ("k1", "k2"), 10)
    assert found["keys"] == [{"kind": "different", "key": {"k1": 1, "k2": 1}}]


def test_a_key_twice_in_the_target_is_named(spark):
    source = frame(spark, 500)
    target = frame(spark, 500).where(F.col("id") != 7).unionByName(frame(spark, 500).where(F.col("id") == 9))
    found = compare(source, target, ("id", "part", "v", "x"), ("id",), 10)  # the same row count on both sides
    assert found["keys"] == [{"kind": "duplicate", "key": {"id": 9}}, {"kind": "missing", "key": {"id": 7}}]
