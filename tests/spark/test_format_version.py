"""Iceberg targets at format version 3: raised by the job, deletion vectors that stay one
per data file, read back by pyiceberg, properties still written through `cdc register`."""
from __future__ import annotations

from cdc.sinks import iceberg_spark
from cdc.sinks.formats import open_table
from cdc.sinks.iceberg import mark_snapshotted
from cdc.sinks.targets import PROP_SNAPSHOT
from tests.spark.test_merge_semantics import Harness


def churn(h: Harness, rounds: int, keys: int = 40) -> None:
    """A batch of inserts, then `rounds` batches updating and deleting some of them."""
    for i in range(keys):
        h.topic.change("c", {"id": i, "v": "new", "n": i}, 100, 100 + i)
    h.apply()
    for r in range(1, rounds + 1):
        for i in range(r, keys, 3):
            h.topic.change("u", {"id": i, "v": f"round {r}", "n": i}, 1000 * r, 1000 * r + i)
        h.topic.change("d", {"id": keys - r, "v": "new", "n": keys - r}, 1000 * r, 1000 * r + 999)
        h.apply()


def expected(keys: int, rounds: int) -> dict[int, str]:
    out = {i: "new" for i in range(keys)}
    for r in range(1, rounds + 1):
        out.update({i: f"round {r}" for i in range(r, keys, 3)})
        out.pop(keys - r, None)
    return out


def delete_files(spark, ref: str) -> list[str]:
    return [r["file_format"] for r in spark.sql(f"SELECT file_format FROM {ref}.delete_files").collect()]


def test_a_target_is_raised_to_version_3_and_keeps_one_deletion_vector_per_data_file(scratch, table_name):
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name)  # created at 2 (pyiceberg), raised by the job's start
    table = open_table(spark, h.applier.target_ref).table
    assert iceberg_spark.format_version(table) == 3
    churn(h, rounds=4)
    assert h.values() == expected(40, 4)  # read by pyiceberg, deletion vectors applied
    formats = delete_files(spark, h.applier.target_ref)
    assert formats and set(formats) == {"PUFFIN"}
    live = spark.sql(f"SELECT file_path FROM {h.applier.target_ref}.data_files").count()
    assert len(formats) <= live  # one vector per data file, however many batches deleted from it
    h.applier.prepare(spark)  # a restart leaves it as it is
    assert iceberg_spark.format_version(open_table(spark, h.applier.target_ref).table) == 3


def test_version_2_keeps_position_delete_files(scratch, table_name):
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name, format_version=2)
    assert iceberg_spark.format_version(open_table(spark, h.applier.target_ref).table) == 2
    churn(h, rounds=2)
    assert h.values() == expected(40, 2)
    assert set(delete_files(spark, h.applier.target_ref)) == {"PARQUET"}


def test_properties_of_a_version_3_target_are_set_through_spark(scratch, settings, table_name):
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name)
    at_scratch = settings.model_copy(update={"catalog": settings.catalog.model_copy(update={"name": "scratch"})})
    mark_snapshotted(catalog, h.reg, "debezium", at_scratch)
    assert catalog.load_table(h.ident).properties[PROP_SNAPSHOT] == "debezium"


def test_a_small_batch_written_without_a_shuffle_keeps_one_deletion_vector_per_data_file(scratch, table_name):
    """A small batch's MERGE keeps each task's rows where they are (`undistributed`). With
    the join shuffled, several tasks write a vector for one data file: the commit merges
    them, so each data file still has one, and the rows are right."""
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name)  # buckets_from_bytes=0: every MERGE is a small batch's
    keys = 400
    for i in range(keys):
        h.topic.change("c", {"id": i, "v": "new", "n": i}, 100, 100 + i)
    h.apply()
    for i in range(0, keys, 2):
        h.topic.change("u", {"id": i, "v": "updated", "n": i}, 1000, 1000 + i)
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")  # the join shuffles the target's rows
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")  # ... into several tasks
    spark.conf.set(iceberg_spark.DISTRIBUTION_MODE, "hash")  # a session's own setting, kept after the MERGE
    try:
        h.apply()
        assert spark.conf.get(iceberg_spark.DISTRIBUTION_MODE) == "hash"
    finally:
        for key in ("spark.sql.autoBroadcastJoinThreshold", "spark.sql.adaptive.coalescePartitions.enabled",
                    iceberg_spark.DISTRIBUTION_MODE):
            spark.conf.unset(key)
    assert h.values() == {i: "updated" if i % 2 == 0 else "new" for i in range(keys)}
    referenced = [r[0] for r in spark.sql(f"SELECT referenced_data_file FROM {h.applier.target_ref}.delete_files")
                  .collect()]
    assert referenced and len(referenced) == len(set(referenced))


def arrow_bytes(spark) -> int:
    """What Iceberg's vectorized Parquet readers hold of the JVM's direct memory (their Arrow
    allocator): a read that ended gave back all it took."""
    return int(spark._jvm.org.apache.iceberg.arrow.ArrowAllocation.rootAllocator().getAllocatedMemory())


def test_merges_into_a_version_3_target_give_back_the_memory_they_read_with(scratch, table_name):
    # A MERGE into a version 3 target reads its rows' lineage (_row_id, the sequence number)
    # too; a reader that kept the vectors of each batch of rows it read but the last made a
    # long-running job run out of direct memory. Batches of 4 rows: many a file.
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name)
    spark.sql(f"ALTER TABLE {h.applier.target_ref} SET TBLPROPERTIES ('read.parquet.vectorization.batch-size'='4')")
    churn(h, rounds=1)
    before = arrow_bytes(spark)
    for r in range(2, 8):
        for i in range(r, 40, 3):
            h.topic.change("u", {"id": i, "v": f"round {r}", "n": i}, 1000 * r, 1000 * r + i)
        h.apply()
    assert arrow_bytes(spark) <= before
    assert h.values() == {**expected(40, 1), **{i: f"round {r}" for r in range(2, 8) for i in range(r, 40, 3)}}
