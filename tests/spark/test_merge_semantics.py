"""MERGE semantics on a temp warehouse: batches of Debezium records through the real
apply step into an Iceberg table (read back with pyiceberg) or a Delta table (read back
with delta-rs): the suite runs against both sinks."""
from __future__ import annotations

import dataclasses
import json

import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType

from cdc.config.models import TableRegistration
from cdc.control.commits import OFFSETS, parse_offsets
from cdc.decoding.spark_decode import value_schemas
from cdc.errors import ApplyError
from cdc.jobs import apply as apply_module, metrics
from cdc.jobs.apply import TableApplier
from cdc.planning.dead_letters import SUFFIX as DEAD_LETTERS, dead_letters_ref
from cdc.planning.merge import DELETES_SUFFIX, deletes_ref, table_ref
from cdc.planning.position import source_part
from cdc.sinks import delta
from cdc.sinks.iceberg import ensure_table
from cdc.sinks.targets import target_properties
from cdc.sources.types import Column
from tests.compare import delta_records, delta_summaries
from tests.events import Topic

KAFKA_SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                           StructField("topic", StringType()), StructField("partition", IntegerType()),
                           StructField("offset", LongType()),
                           StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                                        StructField("value", BinaryType())])))])
COLUMNS = (Column("id", "int", nullable=False), Column("v", "string"), Column("n", "decimal", True, 10, 2))


class Harness:
    """A target of the scratch catalog (`sink="iceberg"`), or a Delta table under `delta_root`."""

    def __init__(self, spark, catalog, name, horizon_hours=168, on_error="dlq", mask_key=None, sink="iceberg",
                 delta_root=None, format_version=3, columns=COLUMNS, **registration):
        self.spark, self.catalog, self.sink = spark, catalog, sink
        reg = TableRegistration(name=f"ns.{name}", source={"name": "src", "schema": "public", "table": name},
                                sink=sink, **registration)
        self.topic = Topic(name=f"src.public.{name}")
        if sink == "delta":
            self.path = delta_root / name
            refs = [delta.ref(delta_root / (name + suffix)) for suffix in ("", DELETES_SUFFIX, DEAD_LETTERS)]
            target_columns, props = target_properties(reg, columns, ("id",), self.topic.name)
            spark.sql(delta.create_sql(refs[0], target_columns, reg.mode, reg.mask, props))
        else:
            ensure_table(catalog, reg, columns, ("id",), self.topic.name)
            refs = [table_ref("scratch", reg.target), deletes_ref("scratch", reg.target),
                    dead_letters_ref("scratch", reg.target)]
        columns = tuple(c for c in columns if c.name not in reg.exclude)
        self.applier = TableApplier(reg.name, refs[0], self.topic.name, columns, ("id",),
                                    job="test", deletes_ref=refs[1],
                                    delete_horizon_hours=horizon_hours, on_error=on_error,
                                    dead_letters_ref=refs[2], mode=reg.mode,
                                    excluded=reg.exclude, masked=reg.mask, mask_key=mask_key,
                                    format_version=format_version,
                                    buckets_from_bytes=0).prepare(spark)  # every MERGE names its key buckets
        self.reg, self.ident = reg, reg.target
        self.batch_id = 0

    def apply(self, records=None):
        records = self.topic.take() if records is None else records
        rows = [r if len(r) == 6 else (*r, []) for r in records]  # records without headers have none
        self.applier(self.spark.createDataFrame(rows, KAFKA_SCHEMA), self.batch_id)
        self.batch_id += 1
        return records

    def _read(self, suffix: str = "") -> list[dict]:
        """Every row of the target (or the table beside it with `suffix`), by the second reader."""
        if self.sink == "delta":
            return delta_records(f"{self.path}{suffix}")
        return self.catalog.load_table(self.ident + suffix).scan().to_arrow().to_pylist()

    def rows(self):
        return {r["id"]: r for r in self._read()}

    def values(self):
        return {k: r["v"] for k, r in self.rows().items()}

    def dead_letters(self) -> list[dict]:
        return self._read(DEAD_LETTERS)

    def summaries(self) -> list[dict]:
        """The cdc keys of each commit, oldest first (Iceberg: snapshot summaries; Delta: userMetadata)."""
        if self.sink == "delta":
            return delta_summaries(self.path)
        return [s.summary.additional_properties for s in self.catalog.load_table(self.ident).snapshots()]

    def last_operation(self) -> str:
        """The newest commit's operation: append, or what a MERGE is in the format."""
        if self.sink == "delta":
            from deltalake import DeltaTable

            operation = DeltaTable(str(self.path)).history(1)[0]["operation"]
            return {"WRITE": "append"}.get(operation, operation.lower())
        return self.catalog.load_table(self.ident).snapshots()[-1].summary.operation.value

    def compact_sql(self) -> str:
        """A compaction of every file, by another writer."""
        if self.sink == "delta":
            return f"OPTIMIZE {self.applier.target_ref}"
        return (f"CALL scratch.system.rewrite_data_files(table => '{self.ident}', "
                f"options => map('rewrite-all', 'true', 'min-input-files', '1'))")


@pytest.fixture(params=["iceberg", "delta"])
def h(request, scratch, table_name, tmp_path):
    spark, catalog = scratch
    return Harness(spark, catalog, table_name, sink=request.param, delta_root=tmp_path)


@pytest.mark.delta_long
def test_last_event_per_key_wins_and_metadata_is_stored(h):
    h.topic.change("c", {"id": 1, "v": "a", "n": 1.5}, 100, 110)
    h.topic.change("u", {"id": 1, "v": "b", "n": 2.5}, 100, 120)
    h.topic.change("u", {"id": 1, "v": "c", "n": 3.25}, 200, 210)
    h.topic.change("c", {"id": 2, "v": "x", "n": None}, 200, 220)
    h.apply()
    rows = h.rows()
    assert {k: (r["v"], r["n"]) for k, r in rows.items()} == {1: ("c", pytest.approx(3.25)), 2: ("x", None)}
    assert rows[1]["_cdc_op"] == "u" and rows[1]["_cdc_kafka_offset"] == 2
    assert rows[1]["_cdc_position"].startswith(f"{200:016x}{210:016x}1")


@pytest.mark.delta_long
def test_older_event_never_overwrites_newer_row(h):
    h.topic.change("u", {"id": 1, "v": "new", "n": 1}, 500, 510)
    h.apply()
    h.topic.change("u", {"id": 1, "v": "old", "n": 1}, 300, 310)  # redelivered late, higher offset
    h.apply()
    assert h.values() == {1: "new"}


@pytest.mark.delta_long
def test_delete_then_reinsert_in_one_batch(h):
    h.topic.change("c", {"id": 1, "v": "first", "n": 1}, 100, 110)
    h.apply()
    h.topic.change("d", {"id": 1, "v": "first", "n": 1}, 200, 210)
    h.topic.tombstone({"id": 1})
    h.topic.change("c", {"id": 1, "v": "again", "n": 2}, 300, 310)
    h.apply()
    assert h.values() == {1: "again"}
    assert h.rows()[1]["_cdc_op"] == "c"


@pytest.mark.delta_long
def test_delete_in_one_batch_and_tombstone_in_the_next(h):
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.topic.change("c", {"id": 2, "v": "b", "n": 1}, 100, 120)
    h.apply()
    h.topic.change("d", {"id": 1, "v": "a", "n": 1}, 200, 210)
    h.apply()
    assert h.values() == {2: "b"}
    h.topic.tombstone({"id": 1})
    h.apply()
    assert h.values() == {2: "b"}


def test_lone_tombstone_never_deletes_a_row_written_after_it(h):
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.topic.change("d", {"id": 1, "v": "a", "n": 1}, 200, 210)
    tomb = h.topic.tombstone({"id": 1})
    h.topic.change("c", {"id": 1, "v": "back", "n": 1}, 300, 310)
    recs = h.topic.take()
    h.apply(recs[:2])
    h.apply([recs[3]])
    h.apply([tomb])  # replayed out of order: it precedes the re-insert in its partition
    assert h.values() == {1: "back"}


def test_lone_tombstone_deletes_an_older_row(h):
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.apply()
    h.topic.tombstone({"id": 1})
    h.apply()
    assert h.values() == {}


@pytest.mark.delta_long
def test_reapplying_a_batch_changes_nothing(h):
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.topic.change("c", {"id": 2, "v": "b", "n": 1}, 100, 120)
    h.topic.change("d", {"id": 2, "v": "b", "n": 1}, 200, 210)
    batch = h.apply()
    before = (h.rows(), len(h.summaries()))
    h.apply(batch)  # the table's history holds these offsets: skipped, no new commit
    assert (h.rows(), len(h.summaries())) == before
    # The same changes redelivered at new offsets (a connector restart): the data stays as
    # it is and the deleted key stays deleted; only the Kafka tie-break of the position moves.
    redelivered = [(k, v, t, p, o + 100) for k, v, t, p, o in batch]
    h.apply(redelivered)
    after = h.rows()
    assert {k: (r["v"], r["n"], r["_cdc_op"]) for k, r in after.items()} == {1: ("a", 1, "c")}
    assert source_part(after[1]["_cdc_position"]) == source_part(before[0][1]["_cdc_position"])


def test_a_batch_is_filtered_by_what_the_table_holds_only_when_it_may_hold_part_of_it(h, tmp_path):
    """The checkpoint's offset log tells where a batch starts: a batch after the table's
    last commit is taken whole (no filter), one the table holds (the checkpoint lost the
    commit of the batch it re-runs) is still skipped."""
    checkpoint = tmp_path / "checkpoint"
    h.applier.checkpoint = checkpoint

    def planned(batch_id):  # the offset log's entry of a batch, as Spark writes it before running it
        (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
        (checkpoint / "offsets" / str(batch_id)).write_text(
            'v1\n{"batchWatermarkMs":0}\n' + json.dumps({h.topic.name: {"0": h.topic.next_offset}}) + "\n")

    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    planned(0)
    h.apply()
    assert h.applier._may_hold_part({0: 1}, 0)  # a first batch: where it starts is not known here
    h.topic.change("u", {"id": 1, "v": "b", "n": 1}, 200, 210)
    h.topic.change("u", {"id": 1, "v": "c", "n": 1}, 300, 310)
    planned(1)
    assert not h.applier._may_hold_part({0: 1}, 1)
    second = h.apply()
    before = (h.rows(), len(h.summaries()))
    assert h.applier._may_hold_part({0: 3}, 1)
    h.batch_id = 1  # batch 1 again: the table holds it, so nothing changes and nothing commits
    h.apply(second)
    assert (h.rows(), len(h.summaries())) == before
    h.topic.change("u", {"id": 1, "v": "d", "n": 1}, 400, 410)
    planned(2)
    h.apply()
    assert h.values() == {1: "d"}


def test_deleted_key_never_comes_back_from_a_late_older_change(h):
    create = h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.apply()
    h.topic.change("d", {"id": 1, "v": "a", "n": 1}, 200, 210)
    h.topic.tombstone({"id": 1})
    h.apply()
    # The create arrives again on its own (a replay), later in the log than the delete.
    h.apply([(create[0], create[1], create[2], create[3], h.topic.next_offset)])
    assert h.values() == {}
    # A genuinely newer insert of the key does come back.
    h.topic.next_offset += 1
    h.topic.change("c", {"id": 1, "v": "again", "n": 2}, 300, 310)
    h.apply()
    assert h.values() == {1: "again"}


def test_delta_refuses_a_second_commit_of_a_batch_it_holds(scratch, table_name, tmp_path):
    """The batch's identity rides on the Delta commit (application id, batch id): Delta
    itself skips a write stamped with a batch its log already records."""
    from deltalake import DeltaTable

    from cdc.sinks.formats import open_table

    spark, catalog = scratch
    h = Harness(spark, catalog, table_name, sink="delta", delta_root=tmp_path)
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.apply()
    app, batch = h.applier._txn(0)
    assert DeltaTable(str(h.path)).transaction_version(app) == batch == 0
    table = open_table(spark, h.applier.target_ref)
    before = table.version()
    with table.stamped({"cdc.offsets": "{}"}, (app, batch)):
        spark.sql(f"INSERT INTO {h.applier.target_ref} (id, v) VALUES (2, 'again')")
    table.refresh()
    assert table.version() == before and h.values() == {1: "a"}


def test_delete_memory_past_its_horizon_is_forgotten_at_a_batch_and_not_again_by_a_restart(scratch, table_name):
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name, horizon_hours=1)
    h.applier.forget_every_s = 0  # every batch may drop
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110, ts_ms=1_700_000_000_000)
    h.topic.change("d", {"id": 1, "v": "a", "n": 1}, 200, 210, ts_ms=1_700_000_000_000)  # 2023: past 1h
    h.apply()
    remembered = spark.table(h.applier.deletes_ref).count()
    h.applier.prepare(spark)  # a job start leaves the memory as it is
    started = spark.table(h.applier.deletes_ref).count()
    h.topic.change("c", {"id": 2, "v": "b", "n": 2}, 300, 310)
    h.apply()  # the next batch drops entries older than the horizon
    assert (remembered, started, spark.table(h.applier.deletes_ref).count()) == (1, 1, 0)
    # A restarted job reads when the memory was last cleaned: within forget_every_s, it does not drop again.
    restarted = dataclasses.replace(h.applier, forget_every_s=3600, forget_due=None).prepare(spark)
    h.topic.change("d", {"id": 2, "v": "b", "n": 2}, 400, 410, ts_ms=1_700_000_000_000)
    h.topic.change("c", {"id": 3, "v": "c", "n": 3}, 500, 510)
    restarted(spark.createDataFrame([(*r, []) for r in h.topic.take()], KAFKA_SCHEMA), h.batch_id)
    assert spark.table(h.applier.deletes_ref).count() == 1 and h.values() == {3: "c"}


def test_a_running_job_rewrites_its_small_files_once_enough_were_added(scratch, table_name):
    """Batch after batch adds data files; once `compact_every_files` were added to each
    partition (or that many inserts made to the delete memory), the job rewrites the small
    ones after a batch's commit: the target holds the same rows in fewer files, its deletes
    applied, and the next batch finds its offsets past the rewrite."""
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name, partitioning={"buckets": 8})  # a batch writes a file per bucket
    h.applier.compact_every_files = 3
    lsn, expected = 100, {}

    def batch(changes):
        nonlocal lsn
        for op, key, v in changes:
            lsn += 10
            h.topic.change(op, {"id": key, "v": v, "n": key}, lsn, lsn + 5)
            if op == "d":
                expected.pop(key, None)
            else:
                expected[key] = v
        h.apply()

    batch([("c", k, "a") for k in range(12)])
    assert h.applier.partitions == 8  # read from the target's spec: 3 files a bucket, 24 in all
    files = [catalog.load_table(h.ident).inspect.files().num_rows]
    for round_ in range(4):  # updates and deletes spread over the partitions: files and deletion vectors
        batch([("u", k, f"v{round_}") for k in range(round_, 12, 2)] + [("d", 11 - round_, "")])
        files.append(catalog.load_table(h.ident).inspect.files().num_rows)
    operations = [s.summary.operation.value for s in catalog.load_table(h.ident).snapshots()]
    assert "replace" in operations and max(files) >= 6 and files[-1] < max(files), (files, operations)
    assert h.values() == expected
    batch([("u", 0, "after")])  # the next batch resumes from the offsets past the rewrite
    assert h.values() == expected and expected[0] == "after"
    assert parse_offsets(h.summaries()[-1])[h.topic.name] == {0: h.topic.next_offset}


def test_a_running_job_optimizes_a_delta_target_s_small_files_once_enough_were_added(scratch, table_name, tmp_path):
    """A Delta target, as an Iceberg one: once `compact_every_files` files were added, the job
    OPTIMIZEs the target's and its delete memory's small files after a batch's commit; the rows
    read back by delta-rs are the source's, and the next batch resumes past the rewrite."""
    from deltalake import DeltaTable

    spark, catalog = scratch
    h = Harness(spark, catalog, table_name, sink="delta", delta_root=tmp_path)
    h.applier.compact_every_files = 2
    lsn, expected = 100, {}
    for round_ in range(2):
        for key in range(round_, 10, 2):
            lsn += 10
            h.topic.change("u" if round_ else "c", {"id": key, "v": f"v{round_}", "n": key}, lsn, lsn + 5)
            expected[key] = f"v{round_}"
        lsn += 10
        h.topic.change("d", {"id": 9 - round_, "v": "", "n": 0}, lsn, lsn + 5)
        expected.pop(9 - round_, None)
        h.apply()
    for path in (h.path, f"{h.path}{DELETES_SUFFIX}"):
        operations = [c["operation"] for c in DeltaTable(str(path)).history()]
        assert "OPTIMIZE" in operations, (path, operations)
    assert h.values() == expected
    h.topic.change("u", {"id": 0, "v": "after", "n": 0}, lsn + 10, lsn + 15)
    h.apply()
    expected[0] = "after"
    assert h.values() == expected
    committed = [parse_offsets(s) for s in h.summaries() if s.get(OFFSETS)]  # past a rewrite, if one came last
    assert committed[-1][h.topic.name] == {0: h.topic.next_offset}


def test_a_running_job_keeps_its_newest_snapshots_and_metadata_files(scratch, table_name):
    """Batch after batch, the job expires all but the newest `max_snapshots` snapshots of
    the target and of its delete memory, never the newest with cdc offsets (here behind a
    compaction by another writer), and each commit deletes the metadata files past the
    newest few; a target made without that setting gets it when its job starts. The rows,
    read back, are the source's, and the next batch resumes from the kept offsets."""
    from pathlib import Path
    from urllib.parse import urlparse

    from cdc.sinks.formats import open_table
    from cdc.sinks.iceberg_spark import METADATA_FILES, load_table

    spark, catalog = scratch
    h = Harness(spark, catalog, table_name)
    for ref in (h.applier.target_ref, h.applier.deletes_ref):  # as an older release made them
        update = load_table(spark, ref).updateProperties()
        for k in METADATA_FILES:
            update = update.remove(k)
        update.commit()
        assert not METADATA_FILES.items() <= open_table(spark, ref).properties().items()
    h.applier.max_snapshots = 4
    h.applier.prepare(spark)  # the job's start
    for ident in (h.ident, h.ident + DELETES_SUFFIX):
        assert METADATA_FILES.items() <= catalog.load_table(ident).properties.items(), ident
    expected, lsn, counts = {}, 100, []
    for n in range(10):
        for key in (n % 5, (n + 2) % 5):
            lsn += 10
            op = "d" if (n + key) % 4 == 0 else "u"
            h.topic.change(op, {"id": key, "v": f"v{n}", "n": key}, lsn, lsn + 5)
            if op == "d":
                expected.pop(key, None)
            else:
                expected[key] = f"v{n}"
        h.apply()
        counts.append([len(catalog.load_table(i).snapshots()) for i in (h.ident, h.ident + DELETES_SUFFIX)])
    assert max(c for pair in counts for c in pair) <= 5 and counts[-1][0] >= 4, counts
    assert h.values() == expected
    metadata = Path(urlparse(catalog.load_table(h.ident).metadata_location).path).parent
    assert len(list(metadata.glob("*.metadata.json"))) <= int(METADATA_FILES["write.metadata.previous-versions-max"]) + 1
    spark.sql(h.compact_sql())  # a commit without offsets on top: the newest with offsets stays
    assert open_table(spark, h.applier.target_ref).keep_snapshots(1, resume=True) >= 1
    kept = h.summaries()
    assert len(kept) == 2 and parse_offsets(kept[0])[h.topic.name] == {0: h.topic.next_offset}
    h.topic.change("u", {"id": 9, "v": "after", "n": 9}, lsn + 10, lsn + 15)
    h.apply()
    assert h.values() == {**expected, 9: "after"}


def test_a_delete_memory_is_not_written_before_the_first_delete(scratch, table_name):
    """Job starts and batches without deletes leave the memory without a snapshot, so no
    batch reads it."""
    spark, catalog = scratch
    h = Harness(spark, catalog, table_name)
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.apply()
    h.applier.prepare(spark)  # a job start
    assert catalog.load_table(h.ident + DELETES_SUFFIX).current_snapshot() is None
    h.topic.change("d", {"id": 1, "v": "a", "n": 1}, 200, 210)
    h.apply()
    assert h.values() == {} and spark.table(h.applier.deletes_ref).count() == 1


def test_a_batch_adds_one_file_to_the_delete_memory(h):
    """Every batch reads the whole memory: a batch's deletes go into one file, whatever the
    number of partitions the batch was computed in."""
    for i in range(40):
        h.topic.change("c", {"id": i, "v": "a", "n": i}, 100, 100 + i)
    h.apply()
    for i in range(0, 40, 2):
        h.topic.change("d", {"id": i, "v": "a", "n": i}, 200, 200 + i)
    spark = h.spark
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")  # as many partitions as configured
    try:
        h.apply()
    finally:
        spark.conf.unset("spark.sql.adaptive.coalescePartitions.enabled")
    files = (spark.sql(f"SELECT count(*) FROM {h.applier.deletes_ref}.files").first()[0] if h.sink == "iceberg"
             else spark.sql(f"DESCRIBE DETAIL {h.applier.deletes_ref}").first()["numFiles"])
    assert (files, spark.table(h.applier.deletes_ref).count()) == (1, 20)
    assert sorted(h.values()) == list(range(1, 40, 2))


@pytest.mark.delta_long
def test_change_older_than_a_truncate_never_inserts(h):
    create = h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.apply()
    h.topic.truncate(200, 210)
    h.apply()
    h.apply([(create[0], create[1], create[2], create[3], h.topic.next_offset)])
    assert h.values() == {}


def test_snapshot_summary_carries_offsets_and_batch_id(h):
    for i in range(5):
        h.topic.change("c", {"id": i, "v": str(i), "n": i}, 100, 110 + i)
    h.apply()
    summary = h.summaries()[-1]
    assert parse_offsets(summary) == {h.topic.name: {0: 5}}
    assert summary["cdc.batch-id"] == "0"
    assert summary["cdc.position"].startswith(f"{100:016x}{114:016x}")


@pytest.mark.delta_long
def test_first_load_is_a_bulk_append_and_a_restarted_snapshot_adds_no_duplicates(h):
    for i in range(5):  # the initial snapshot (commit LSN unknown), with a delete streamed meanwhile
        h.topic.change("r", {"id": i, "v": f"snap{i}", "n": i}, None, 100)
    h.topic.change("d", {"id": 4, "v": "snap4", "n": 4}, 150, 160)
    h.apply()
    assert h.last_operation() == "append"  # no MERGE into an empty target
    assert parse_offsets(h.summaries()[-1]) == {h.topic.name: {0: 6}}
    assert h.values() == {i: f"snap{i}" for i in range(4)}
    h.topic.change("u", {"id": 2, "v": "streamed", "n": 2}, 200, 210)
    for i in range(5):  # the snapshot restarted from scratch after a crash: every row again
        h.topic.change("r", {"id": i, "v": f"snap{i}", "n": i}, None, 300)
    h.apply()
    assert h.last_operation() != "append"
    ids = [r["id"] for r in h._read()]
    assert len(ids) == len(set(ids)) == 4  # no duplicates; 4 stays deleted
    assert h.values() == {0: "snap0", 1: "snap1", 2: "streamed", 3: "snap3"}  # a read never beats a change


def test_batch_of_noops_still_records_its_offsets(h):
    h.topic.tombstone({"id": 42})
    h.apply()
    assert parse_offsets(h.summaries()[-1]) == {h.topic.name: {0: 1}}


@pytest.mark.delta_long
def test_truncate_keeps_only_later_rows(h):
    h.topic.change("c", {"id": 1, "v": "old", "n": 1}, 100, 110)
    h.apply()
    h.topic.change("c", {"id": 2, "v": "before truncate", "n": 1}, 200, 210)
    h.topic.truncate(300, 310)
    h.topic.change("c", {"id": 3, "v": "after truncate", "n": 1}, 400, 410)
    h.apply()
    assert h.values() == {3: "after truncate"}


@pytest.fixture(params=["iceberg", "delta"])
def strict(request, scratch, table_name, tmp_path):
    spark, catalog = scratch
    return Harness(spark, catalog, table_name, on_error="fail", sink=request.param, delta_root=tmp_path)


@pytest.mark.delta_long
def test_bad_record_fails_the_batch_and_commits_nothing(strict):
    h = strict
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.topic.raw(json.dumps({"schema": {}, "payload": {"id": 2}}).encode(), b"\x00not json")
    commits = len(h.summaries())
    with pytest.raises(ApplyError, match=r"(?s)partition 0 offset 1: value is not a Debezium JSON envelope.*on_error: dlq"):
        h.apply()
    assert len(h.summaries()) == commits and h.values() == {}


@pytest.mark.delta_long
def test_unknown_op_fails_the_batch(strict):
    h = strict
    rec = h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    bad = rec[1].replace(b'"op": "c"', b'"op": "x"')
    with pytest.raises(ApplyError, match="unknown op x"):
        h.apply([(rec[0], bad, *rec[2:])])


def test_concurrent_compaction_never_loses_or_doubles_a_change(h, monkeypatch):
    """Batches apply while another writer compacts the table again and again; Iceberg
    retries or our conflict retry recomputes (Delta: its concurrent-modification errors);
    every change lands exactly once. On Iceberg one compaction is certainly put between a
    batch's written files and their commit, which must then be computed again (a Delta MERGE
    writes and commits in one statement: its races are the background compactions')."""
    import threading

    for i in range(40):
        h.topic.change("c", {"id": i, "v": "0", "n": 0}, 100, 100 + i)
    h.apply()
    stop = threading.Event()
    errors = []

    def compact():
        while not stop.wait(2):  # compacts every two seconds, far more often than maintenance would
            try:
                h.spark.sql(h.compact_sql()).collect()
            except Exception as e:  # noqa: BLE001 - a compaction losing the race is fine
                if not any(m in str(e) for m in ("ValidationException", "CommitFailed", "Concurrent")):
                    errors.append(e)
    t = threading.Thread(target=compact, daemon=True)
    t.start()
    raced = []
    try:
        for round_no in range(1, 7):
            for i in range(40):
                h.topic.change("u", {"id": i, "v": str(round_no), "n": round_no}, 1000 * round_no, 1000 * round_no + i)
            if round_no == 3 and h.sink == "iceberg":  # a compaction certainly between the batch's write and commit
                lost = metrics.COMMIT_RETRIES.labels(h.applier.name)._value.get()
                compact_before_commit(h, monkeypatch)
            h.apply()
            if round_no == 3 and h.sink == "iceberg":
                raced = [metrics.COMMIT_RETRIES.labels(h.applier.name)._value.get() > lost,
                         "direct refused" in h.applier.timer.steps]
                assert any(raced), "the compaction between the batch's write and commit did not make it compute again"
    finally:
        stop.set()
        t.join()
    assert not errors, errors[0]
    assert h.values() == {i: "6" for i in range(40)}
    topic = h.topic.name
    offsets = [parse_offsets(s)[topic][0] for s in h.summaries() if topic in parse_offsets(s)]
    assert offsets == sorted(offsets) and offsets[-1] == 280


def before_commit(h: Harness, action) -> None:
    """Run `action` once, after the applier's next batch read the table and before it commits
    (the delete memory's upkeep comes in between on every path)."""
    upkeep = h.applier._forget_deletes
    done = []

    def hooked(spark, *args, **kwargs):
        if not done:
            done.append(True)
            action()
        return upkeep(spark, *args, **kwargs)
    h.applier._forget_deletes = hooked


def compact_before_commit(h: Harness, monkeypatch) -> None:
    """Compact the Iceberg target once, after the next batch wrote its files and before it
    commits them (the direct path's RowDelta, or the publish of a staged MERGE)."""
    from cdc.sinks import direct, iceberg_spark

    done = []

    def compact_once():
        if not done:
            done.append(True)
            h.spark.sql(h.compact_sql()).collect()
    commit, publish = direct.Batch.commit, iceberg_spark.publish_staged
    monkeypatch.setattr(direct.Batch, "commit", lambda self, props: compact_once() or commit(self, props))
    monkeypatch.setattr(iceberg_spark, "publish_staged", lambda *a: compact_once() or publish(*a))


UNAVAILABLE = "__debezium_unavailable_value"


@pytest.mark.delta_long
def test_unchanged_toast_placeholder_keeps_the_stored_value(h):
    h.topic.change("c", {"id": 1, "v": "a long text", "n": 1}, 100, 110)
    h.topic.change("c", {"id": 2, "v": "other", "n": 1}, 100, 120)
    h.apply()
    h.topic.change("u", {"id": 1, "v": UNAVAILABLE, "n": 2}, 200, 210)
    h.topic.change("u", {"id": 2, "v": None, "n": 2}, 200, 220)  # a real null is a value
    h.apply()
    rows = h.rows()
    assert (rows[1]["v"], rows[1]["n"]) == ("a long text", 2)
    assert (rows[2]["v"], rows[2]["n"]) == (None, 2)


@pytest.mark.delta_long
def test_toast_placeholder_takes_the_newest_real_value_of_its_batch(h):
    h.topic.change("c", {"id": 1, "v": "old", "n": 1}, 100, 110)
    h.apply()
    h.topic.change("u", {"id": 1, "v": "new", "n": 2}, 200, 210)
    h.topic.change("u", {"id": 1, "v": UNAVAILABLE, "n": 3}, 300, 310)
    h.topic.change("u", {"id": 1, "v": UNAVAILABLE, "n": 4}, 400, 410)
    h.apply()
    assert (h.rows()[1]["v"], h.rows()[1]["n"]) == ("new", 4)


def test_bad_records_go_to_the_dead_letter_table_and_the_rest_applies(h):
    """Garbage bytes, a wrong-shaped envelope, a value that overflows its column and a
    required column without a value, between valid changes: each dead letter keeps its
    offset, raw bytes and error; the valid ones apply; offsets cover all; a re-run batch
    adds no dead letter twice."""
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    garbage = h.topic.raw(json.dumps({"schema": {}, "payload": {"id": 2}}).encode(), b"\x00\xffgarbage")
    h.topic.raw(json.dumps({"schema": {}, "payload": {"id": 3}}).encode(),
                json.dumps({"payload": {"op": "c", "source": {"lsn": 5}}}).encode())  # no 'after' row
    over = h.topic.change("c", {"id": 4, "v": "x", "n": 1}, 120, 130)
    h.topic.records[-1] = (over[0], over[1].replace(b'"n": 1', b'"n": 123456789012'), *over[2:])
    h.topic.change("u", {"id": 1, "v": "b", "n": 2}, 140, 150)
    h.topic.change("c", {"id": 5, "v": "c", "n": 3}, 160, 170)
    records = h.apply()
    assert h.values() == {1: "b", 5: "c"}
    assert parse_offsets(h.summaries()[-1]) == {h.topic.name: {0: 6}}
    dead = h.dead_letters()
    assert [(d["offset"], d["error_class"]) for d in sorted(dead, key=lambda d: d["offset"])] == [
        (1, "not-an-envelope"), (2, "no-after-row"), (3, "value-does-not-fit")]
    first = min(dead, key=lambda d: d["offset"])
    assert first["value"] == garbage[1] and first["key"] == garbage[0] and first["topic"] == h.topic.name
    assert all(d["error_message"] and d["failed_at"] and d["batch_id"] == 0 for d in dead)
    h.batch_id = 0
    h.apply(records)  # the same batch again (a crash before the checkpoint's commit)
    assert len(h.dead_letters()) == 3
    assert h.values() == {1: "b", 5: "c"}


@pytest.mark.delta_long
def test_non_data_messages_between_changes_apply_nothing(h):
    from tests.spark.test_decode import NON_DATA_MESSAGES

    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    for key, value in NON_DATA_MESSAGES:
        h.topic.raw(json.dumps({"schema": {}, "payload": key}).encode(),
                    json.dumps({"schema": {}, "payload": value}).encode())
    h.topic.change("u", {"id": 1, "v": "b", "n": 2}, 120, 130)
    h.apply()
    assert h.values() == {1: "b"}
    assert parse_offsets(h.summaries()[-1]) == {h.topic.name: {0: 6}}
    assert len(h.dead_letters()) == 0


def envelope_with_schema(row: dict, fields: list[tuple[str, str]], lsn: int) -> tuple[bytes, bytes]:
    """A create whose schema names `fields` (name, Connect type), compact as the converter writes it."""
    schema = {"type": "struct", "fields": [
        {"field": "after", "type": "struct", "optional": True,
         "fields": [{"field": f, "type": t, "optional": True} for f, t in fields]}]}
    value = {"schema": schema, "payload": {"op": "c", "after": row, "before": None,
                                            "source": {"lsn": lsn, "sequence": json.dumps([str(lsn), str(lsn)])}}}
    key = {"schema": {"type": "struct"}, "payload": {"id": row["id"]}}
    return json.dumps(key, separators=(",", ":")).encode(), json.dumps(value, separators=(",", ":")).encode()


def test_records_the_target_cannot_take_are_dead_letters_and_the_rest_applies(h):
    """A record whose schema adds a column differing only by case from one the target has,
    or one with the reserved prefix, and a record whose Kafka key and row disagree: each a
    dead letter with its reason, never a stopped table nor a row under the Kafka key."""
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.topic.raw(*envelope_with_schema({"id": 2, "v": "b", "V": "twin"},
                                      [("id", "int32"), ("v", "string"), ("V", "string")], 120))
    h.topic.raw(*envelope_with_schema({"id": 3, "v": "c", "_CDC_OP": "x"},
                                      [("id", "int32"), ("v", "string"), ("_CDC_OP", "string")], 130))
    wrong = h.topic.change("c", {"id": 5, "v": "e", "n": 1}, 140, 150)
    h.topic.records[-1] = (wrong[0].replace(b'"id": 5', b'"id": 4'), *wrong[1:])  # the Kafka key says 4
    h.topic.change("c", {"id": 6, "v": "f", "n": 1}, 160, 170)
    h.apply()
    assert h.values() == {1: "a", 6: "f"}
    dead = sorted(h.dead_letters(), key=lambda d: d["offset"])
    assert [(d["offset"], d["error_class"]) for d in dead] == [
        (1, "schema-refused"), (2, "schema-refused"), (3, "key-mismatch")]
    assert "differ only by case: 'v', 'V'" in dead[0]["error_message"]
    assert "'_CDC_OP' with the prefix reserved" in dead[1]["error_message"]
    assert "disagree on key column(s) id" in dead[2]["error_message"]
    assert "V" not in {c.lower() for c in h.rows()[1]} - {"v"}  # the target gained no twin column


@pytest.mark.delta_long
def test_a_batch_of_schemas_seen_before_is_read_once_and_a_new_schema_is_judged(h):
    """A batch whose record schemas were all judged by an earlier batch is decoded at once,
    without a scan for its schemas (no `schema` step); one seen as refused still makes dead
    letters, a batch bringing a new schema (a column added) is judged like the first, and
    the judged schemas are kept in the commit's summary for the next process."""
    twin = [("id", "int32"), ("v", "string"), ("V", "string")]
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.topic.raw(*envelope_with_schema({"id": 2, "v": "b", "V": "twin"}, twin, 115))
    h.apply()
    assert "schema" in h.applier.timer.steps
    h.topic.change("u", {"id": 1, "v": "b", "n": 2}, 120, 130)
    h.topic.raw(*envelope_with_schema({"id": 3, "v": "c", "V": "twin"}, twin, 135))
    h.apply()
    assert "schema" not in h.applier.timer.steps
    assert h.values() == {1: "b"}
    assert [(d["offset"], d["error_class"]) for d in sorted(h.dead_letters(), key=lambda d: d["offset"])] == [
        (1, "schema-refused"), (3, "schema-refused")]
    h.topic.raw(*envelope_with_schema({"id": 4, "v": "d", "extra": "new"},
                                      [("id", "int32"), ("v", "string"), ("extra", "string")], 140))
    h.topic.change("u", {"id": 1, "v": "e", "n": 3}, 150, 160)
    h.apply()
    assert "schema" in h.applier.timer.steps
    rows = h.rows()
    assert {k: (r["v"], r["extra"]) for k, r in rows.items()} == {1: ("e", None), 4: ("d", "new")}
    assert len(h.dead_letters()) == 2
    # A new process's applier reads the judged schemas from the last commit: no scan either.
    h.applier = dataclasses.replace(h.applier, schemas={}).prepare(h.spark)
    h.topic.change("u", {"id": 1, "v": "f", "n": 4}, 170, 180)
    h.apply()
    assert "schema" not in h.applier.timer.steps and h.values() == {1: "f", 4: "d"}


def test_a_first_batch_of_one_schema_is_not_scanned_for_its_schemas(scratch, table_name, monkeypatch):
    """A target with no schema judged yet (new, bootstrapped) judges its first batch's first
    record's schema and decodes the batch trusting the others to share it: no pass over the
    batch for its schemas when they are all the same; a first batch holding another schema
    (a column added midway) is still judged whole, and either way the rows are exact."""
    spark, catalog = scratch
    scans = []
    monkeypatch.setattr(apply_module, "value_schemas", lambda *a: scans.append(1) or value_schemas(*a))
    one = Harness(spark, catalog, f"{table_name}_one")
    for k in range(1, 4):
        one.topic.change("c", {"id": k, "v": "a", "n": k}, 100 + 10 * k, 105 + 10 * k)
    one.apply()
    assert scans == [] and one.values() == {1: "a", 2: "a", 3: "a"}
    two = Harness(spark, catalog, f"{table_name}_two")
    two.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    two.topic.raw(*envelope_with_schema({"id": 2, "v": "b", "extra": "new"},
                                        [("id", "int32"), ("v", "string"), ("extra", "string")], 120))
    two.apply()
    assert scans == [1]
    assert {k: (r["v"], r["extra"]) for k, r in two.rows().items()} == {1: ("a", None), 2: ("b", "new")}


def test_a_batch_into_a_target_of_the_default_layout_writes_one_data_file(scratch, table_name):
    """A target is unpartitioned unless its registration buckets it: a batch changing every
    row adds one data file, where a target of 8 buckets gets one in each bucket (files
    every reader opens until a running job rewrites them)."""
    spark, catalog = scratch
    added = {}
    for buckets in (None, 8):
        layout = {} if buckets is None else {"partitioning": {"buckets": buckets}}
        h = Harness(spark, catalog, f"{table_name}_{buckets or 'default'}", **layout)
        lsn = 100
        for changes in ([("c", k, "a") for k in range(40)], [("u", k, "b") for k in range(40)]):
            for op, key, v in changes:
                lsn += 10
                h.topic.change(op, {"id": key, "v": v, "n": key}, lsn, lsn + 5)
            h.apply()
        table = catalog.load_table(h.ident)
        assert h.values() == {k: "b" for k in range(40)}
        added[buckets] = int(table.current_snapshot().summary["added-data-files"])
    assert added == {None: 1, 8: 8}, added
