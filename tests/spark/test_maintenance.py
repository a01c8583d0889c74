"""`cdc maintain` on a table the apply step wrote: compaction, expiry and orphan cleanup
keep every row and the offsets the job resumes from."""
from __future__ import annotations

import datetime as dt

from cdc.control.commits import parse_offsets
from cdc.jobs.maintenance import Retention, maintain_table
from cdc.sinks import iceberg_spark
from cdc.sinks.formats import open_table
from tests.spark.test_merge_semantics import Harness


def small_merges(h, rounds: int) -> None:
    """30 rows, then `rounds` small MERGE commits of updates and a delete each."""
    for i in range(30):
        h.topic.change("c", {"id": i, "v": "0", "n": i}, 100, 100 + i)
    h.apply()
    for round_no in range(1, rounds + 1):
        for i in range(round_no, 30, 4):
            h.topic.change("u", {"id": i, "v": str(round_no), "n": i}, 100 + round_no * 100, 1000 + round_no * 100 + i)
        h.topic.change("d", {"id": 30 - round_no, "v": "x", "n": 0}, 100 + round_no * 100, 1090 + round_no * 100)
        h.apply()


def test_maintenance_compacts_expires_and_keeps_rows_and_offsets(scratch, table_name):
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name)
    small_merges(h, rounds=5)  # position deletes and small files pile up
    rows = h.rows()
    offsets = parse_offsets(iceberg_spark.last_committed_summary(iceberg_spark.load_table(spark, h.applier.target_ref)))
    before = open_table(spark, h.applier.target_ref).file_counts()
    assert before["delete_files"] > 0 and before["data_files"] > 2
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)  # every snapshot is past a 1-hour retention
    result = maintain_table(open_table(spark, h.applier.target_ref), Retention(snapshot_hours=1), now=later)
    after = result["after"]
    assert after["delete_files"] == 0 and after["data_files"] < before["data_files"]
    assert after["snapshots"] < before["snapshots"]
    assert h.rows() == rows  # the second reader sees the same rows
    table = iceberg_spark.load_table(spark, h.applier.target_ref)
    assert parse_offsets(iceberg_spark.last_committed_summary(table)) == offsets  # the job finds where to resume
    h.topic.change("u", {"id": 1, "v": "after maintenance", "n": 1}, 900, 9000)
    h.apply()
    assert h.values()[1] == "after maintenance" and len(h.rows()) == len(rows)


def test_maintenance_while_batches_apply_loses_nothing(scratch, table_name):
    """`cdc maintain` runs over and over while the job commits: both commit through
    Iceberg's concurrency checks, and every change lands exactly once."""
    import threading

    spark, catalog = scratch
    h = Harness(spark, catalog, table_name)
    for i in range(40):
        h.topic.change("c", {"id": i, "v": "0", "n": 0}, 100, 100 + i)
    h.apply()
    stop, errors, runs = threading.Event(), [], []

    def maintain():
        while not stop.is_set():
            try:
                runs.append(maintain_table(open_table(spark, h.applier.target_ref), Retention(snapshot_hours=0)))
            except Exception as e:  # noqa: BLE001 - a step that loses a race is left for the next run
                if "ValidationException" not in str(e) and "CommitFailed" not in str(e):
                    errors.append(str(e)[:500])
    t = threading.Thread(target=maintain, daemon=True)
    t.start()
    try:
        for round_no in range(1, 7):
            for i in range(round_no % 3, 40, 3):
                h.topic.change("u", {"id": i, "v": str(round_no), "n": round_no}, 100 + round_no * 100,
                               1000 + round_no * 100 + i)
            h.apply()
    finally:
        stop.set()
        t.join(300)
    assert not errors, errors
    assert runs  # maintenance really ran alongside
    expected = {i: "0" for i in range(40)}
    for round_no in range(1, 7):
        expected.update({i: str(round_no) for i in range(round_no % 3, 40, 3)})
    assert h.values() == expected
    offsets = parse_offsets(iceberg_spark.last_committed_summary(iceberg_spark.load_table(spark, h.applier.target_ref)))
    assert offsets == {h.topic.name: {0: h.topic.next_offset}}


def test_no_snapshot_expires_while_a_bootstrap_is_unfinished(scratch, table_name):
    from cdc.planning.bootstrap import PROPERTY, RUNNING, Bootstrap

    spark, catalog = scratch
    h = Harness(spark, catalog, table_name)
    for round_no in range(3):
        h.topic.change("c", {"id": round_no, "v": "x", "n": 0}, 100, 100 + round_no)
        h.apply()
    open_table(spark, h.applier.target_ref).set_properties({PROPERTY: Bootstrap("b1", "jdbc", RUNNING, {0: 0}).to_json()})
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)
    result = maintain_table(open_table(spark, h.applier.target_ref), Retention(snapshot_hours=0), now=later)
    assert result["after"]["snapshots"] >= result["before"]["snapshots"]  # compacted, nothing expired


def test_delta_maintenance_compacts_purges_vacuums_and_keeps_rows_and_offsets(scratch, table_name, tmp_path):
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name, sink="delta", delta_root=tmp_path)
    small_merges(h, rounds=3)  # deletion vectors and small files pile up
    rows = h.rows()
    offsets = parse_offsets(open_table(spark, h.applier.target_ref).last_committed_summary())
    before = open_table(spark, h.applier.target_ref).file_counts()
    assert before["delete_files"] > 0 and before["data_files"] > 2
    result = maintain_table(open_table(spark, h.applier.target_ref), Retention(snapshot_hours=0))
    after = result["after"]
    assert after["delete_files"] == 0 and after["data_files"] < before["data_files"]
    assert result["orphans_removed"] >= before["data_files"] - after["data_files"]  # the compacted files went
    assert h.rows() == rows  # the second reader sees the same rows
    assert parse_offsets(open_table(spark, h.applier.target_ref).last_committed_summary()) == offsets
    h.topic.change("u", {"id": 1, "v": "after maintenance", "n": 1}, 900, 9000)
    h.apply()
    assert h.values()[1] == "after maintenance" and len(h.rows()) == len(rows)
