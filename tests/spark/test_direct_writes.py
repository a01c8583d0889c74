"""A running job's direct path (sinks/direct.py, jvm/direct): batches of Debezium records
through the real apply step, written without a MERGE where the plan allows, make the same
target as the MERGE does (read back by pyiceberg and by Spark), with the same offsets; every
batch it cannot take exactly goes through a query, and a target it cannot write says why."""
from __future__ import annotations

import pytest

from cdc.control.commits import parse_offsets, parse_transaction
from cdc.jobs.plan import BATCH_TASK_RECORDS
from cdc.sinks import direct
from cdc.sinks.formats import open_table
from tests.spark.conftest import SCRATCH
from tests.spark.test_merge_semantics import KAFKA_SCHEMA, UNAVAILABLE, Harness, envelope_with_schema

ROW = {"v": "a", "n": 1}


def both(scratch, table_name) -> tuple[Harness, Harness]:
    """A target written directly where it can be, and one by the MERGE alone."""
    spark, catalog = scratch
    direct_one = Harness(spark, catalog, f"{table_name}_direct")
    merged = Harness(spark, catalog, f"{table_name}_merged")
    merged.applier.direct_writes = False
    return direct_one, merged


def rows(h: Harness) -> dict:
    """The target's rows by key, read by pyiceberg, without the Kafka offset (each target has
    a topic of its own, so its offsets are alike but its own)."""
    return {k: {c: v for c, v in r.items() if c != "_cdc_kafka_offset"} for k, r in h.rows().items()}


def apply_both(pair: tuple[Harness, Harness], records: list) -> str:
    """Apply `records` to both targets, which then hold the same rows; the step the direct
    one's commit took."""
    for h in pair:
        h.apply(records)
    assert rows(pair[0]) == rows(pair[1])
    steps = pair[0].applier.timer.steps
    assert "direct" not in pair[1].applier.timer.steps
    return "direct" if "direct" in steps else "merge" if "merge" in steps else "append" if "append" in steps else ""


def path_of(h: Harness) -> str:
    """How the last batch was applied: by the task alone (`batch`), or after a query decoded it
    (`events`: the direct path's write of decoded events; `merge`, `append`); `refused` first
    when the task found a record that needs a query."""
    steps = h.applier.timer.steps
    path = ("events" if "direct" in steps else "merge" if "merge" in steps else "append") if "decode" in steps \
        else "batch" if "direct" in steps else ""
    return f"refused, {path}" if "direct refused" in steps else path


def test_direct_writes_make_the_merges_target(scratch, table_name):
    pair = both(scratch, table_name)
    d, t = pair[0], pair[0].topic
    t.change("c", {"id": 1, "v": "a", "n": 1.5}, 100, 110)
    t.change("c", {"id": 2, "v": "b", "n": None}, 100, 120)
    t.change("c", {"id": 3, "v": "c", "n": 3}, 100, 130)
    t.change("c", {"id": 4, "v": "d", "n": 4}, 100, 140)
    t.change("u", {"id": 1, "v": "a2", "n": 2.5}, 100, 150)  # the last change of a key wins
    assert apply_both(pair, t.take()) == "direct"  # into an empty target
    t.change("u", {"id": 2, "v": "b2", "n": 2}, 200, 210)
    t.change("u", {"id": 3, "v": "too old", "n": 0}, 50, 60)  # an older position never overwrites
    t.change("c", {"id": 5, "v": "e", "n": 5}, 200, 220)
    assert apply_both(pair, t.take()) == "direct"
    t.change("u", {"id": 2, "v": "b3", "n": 3}, 300, 310)  # a row written directly, replaced again
    t.tombstone({"id": 4})  # a lone tombstone: its row was written earlier in its partition
    assert apply_both(pair, t.take()) == "direct"
    t.change("d", {"id": 5, **ROW}, 400, 410)
    t.change("d", {"id": 9, **ROW}, 400, 420)  # a key the target never held: remembered all the same
    assert apply_both(pair, t.take()) == "direct"
    t.change("c", {"id": 5, "v": "older than its delete", "n": 5}, 350, 360)
    t.change("c", {"id": 6, "v": "f", "n": 6}, 400, 420)
    t.tombstone({"id": 6}, offset=0)  # earlier in its partition than the row: it stays
    assert apply_both(pair, t.take()) == "direct"
    assert d.values() == {1: "a2", 2: "b3", 3: "c", 6: "f"}
    memory = [sorted((r["id"], r["_cdc_position"]) for r in h._read("__cdc_deletes")) for h in pair]
    assert memory[0] == memory[1] and [k for k, _ in memory[0]] == [5, 9]
    t.truncate(500, 510)
    t.change("c", {"id": 7, "v": "after the truncate", "n": 7}, 500, 520)
    assert apply_both(pair, t.take()) == "append"  # a truncate (then the emptied target takes an append)
    t.change("c", {"id": 8, "v": "older than the truncate", "n": 8}, 450, 460)
    t.change("u", {"id": 7, "v": "g", "n": 7}, 600, 610)
    assert apply_both(pair, t.take()) == "direct"
    t.change("u", {"id": 7, "v": "g", "n": 7}, 600, 610)  # redelivered at a new offset
    assert apply_both(pair, t.take()) == "direct"

    assert d.values() == {7: "g"}
    spark = scratch[0]
    by_spark = [sorted(tuple(r) for r in spark.table(h.applier.target_ref).drop("_cdc_kafka_offset").collect())
                for h in pair]
    assert by_spark[0] == by_spark[1]
    assert [parse_offsets(s) for s in d.summaries()][-1] == {d.topic.name: {0: d.topic.next_offset}}
    # Deletion vectors only, one a data file (a file's earlier vector merged into its new one).
    files = spark.sql(f"SELECT file_format, referenced_data_file FROM {d.applier.target_ref}.delete_files").collect()
    assert files and {f.file_format for f in files} == {"PUFFIN"}
    assert len({f.referenced_data_file for f in files}) == len(files)


def test_the_direct_path_takes_the_last_change_per_key_as_the_merge_does(scratch, table_name):
    pair = both(scratch, table_name)
    d, t = pair[0], pair[0].topic
    t.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    t.change("u", {"id": 1, "v": "a2", "n": 2}, 200, 210)  # the newest position wins
    t.change("u", {"id": 2, "v": "b", "n": 2}, 300, 310)
    t.change("u", {"id": 2, "v": "older, later in Kafka", "n": 0}, 150, 160)
    t.change("c", {"id": 3, "v": "c", "n": 3}, 100, 130)
    t.change("d", {"id": 3, **ROW}, 200, 220)
    t.tombstone({"id": 3})  # after its delete: the key stays deleted, and remembered
    t.change("c", {"id": 4, "v": "d", "n": 4}, 100, 140)
    t.tombstone({"id": 4})
    t.change("c", {"id": 4, "v": "after its tombstone", "n": 4}, 300, 320)  # the row stays
    t.change("d", {"id": 5, **ROW}, 100, 150)
    t.change("c", {"id": 5, "v": "older than its delete", "n": 5}, 90, 95)
    t.tombstone({"id": 6})  # a lone tombstone of a key never held
    t.change("c", {"id": 7, "v": "g", "n": 7}, 100, 170)
    t.tombstone({"id": 7})  # a change then its tombstone: a delete
    assert apply_both(pair, t.take()) == "direct"
    assert d.values() == {1: "a2", 2: "b", 4: "after its tombstone"}
    t.change("c", {"id": 5, "v": "still older than its delete", "n": 5}, 95, 96)
    t.change("c", {"id": 3, "v": "after its delete", "n": 3}, 400, 405)
    t.change("d", {"id": 8, **ROW}, 400, 410)
    t.change("c", {"id": 8, "v": "after its delete in the batch", "n": 8}, 500, 510)
    t.tombstone({"id": 1}, offset=0)  # earlier in its partition than the row
    t.change("d", {"id": 4, **ROW}, 250, 260)  # older than the row
    t.change("c", {"id": 2, "v": "older", "n": 0}, 100, 105)
    assert apply_both(pair, t.take()) == "direct"
    assert d.values() == {1: "a2", 2: "b", 3: "after its delete", 4: "after its tombstone",
                          8: "after its delete in the batch"}
    memory = [sorted((r["id"], r["_cdc_position"]) for r in h._read("__cdc_deletes")) for h in pair]
    assert memory[0] == memory[1] and [k for k, _ in memory[0]] == [3, 4, 5, 8]


def test_a_target_the_direct_path_cannot_write_says_why(scratch, table_name):
    spark, _ = scratch
    meta = ("_cdc_op string, _cdc_position string, _cdc_source_ts timestamp, _cdc_kafka_partition int, "
            "_cdc_kafka_offset bigint")
    cases = {
        "a key of type double": ("id double, v string", "", 3),
        "a partitioned target": ("id bigint, v string", " PARTITIONED BY (bucket(4, id))", 3),
        "format version 2": ("id bigint, v string", "", 2),
        "a target column the batch does not carry (extra)": ("id bigint, v string, extra string", "", 3),
        "a batch column the target lacks (v)": ("id bigint", "", 3),  # dropped behind the job's back
        None: ("id bigint, v string", "", 3),
    }
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {SCRATCH}.default")
    for n, (reason, (columns, spec, version)) in enumerate(cases.items()):
        ref = f"{SCRATCH}.default.{table_name}_{n}"
        spark.sql(f"CREATE TABLE {ref} ({columns}, {meta}) USING iceberg{spec} "
                  f"TBLPROPERTIES ('format-version' = '{version}')")
        assert open_table(spark, ref).direct_refusal(("id",), ("id", "v")) == reason, ref
        assert direct.refusal(spark, open_table(spark, ref).table, ("id",), ("id", "v")) == reason


def test_direct_writes_off_and_delta_targets_take_the_merge(scratch, table_name, tmp_path):
    spark, catalog = scratch
    off = Harness(spark, catalog, table_name)
    off.applier.direct_writes = False
    on_delta = Harness(spark, catalog, table_name, sink="delta", delta_root=tmp_path)
    for h in (off, on_delta):
        h.topic.change("c", {"id": 1, **ROW}, 100, 110)
        h.apply()
        h.topic.change("u", {"id": 1, "v": "b", "n": 2}, 200, 210)
        h.apply()
        assert "direct" not in h.applier.timer.steps and "merge" in h.applier.timer.steps
        assert h.values() == {1: "b"}


def test_a_batch_is_decoded_counted_and_written_by_one_task_until_a_record_needs_a_query(scratch, table_name):
    """A batch of records whose schemas were judged is decoded, counted and written by one task
    with no query planned; a batch holding a record that needs one (bad, a truncate, a lacking
    unchanged value, a new schema, more records than a task takes) is refused by the task with
    nothing written, and applied as the MERGE-only target applies it; a re-delivered batch's
    records the target holds are left out by the task."""
    pair = both(scratch, table_name)
    d, t = pair[0], pair[0].topic

    def apply(records: list) -> str:
        apply_both(pair, records)
        letters = [sorted((r["offset"], r["error_class"]) for r in h.dead_letters()) for h in pair]
        assert letters[0] == letters[1]
        return path_of(d)

    t.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    t.change("c", {"id": 2, "v": "b", "n": 2}, 100, 120)
    assert apply(t.take()) == "batch"  # its first record's schema judged, the batch trusted to share it
    t.change("u", {"id": 1, "v": "a2", "n": 1}, 200, 210)
    t.change("d", {"id": 2, **ROW}, 200, 220)
    t.tombstone({"id": 2})
    assert apply(t.take()) == "batch"
    assert "plan" not in d.applier.timer.steps  # the table's decoding kept from its first batch
    t.change("u", {"id": 1, "v": "a3", "n": 1}, 300, 310)
    t.raw(b'{"schema": {}, "payload": {"id": 3}}', b"\x00\xffgarbage")  # a dead letter
    assert apply(t.take()) == "refused, events"
    unfit = t.change("c", {"id": 4, "v": "x", "n": 1}, 320, 330)  # a value that is not its column's type, first
    t.records[-1] = (unfit[0], unfit[1].replace(b'"n": 1', b'"n": {"x": 1}'), *unfit[2:])
    t.change("u", {"id": 1, "v": "a3", "n": 3}, 340, 350)
    assert apply(t.take()) == "refused, events"
    assert 4 not in d.rows() and len(d.dead_letters()) == 2
    t.change("u", {"id": 1, "v": UNAVAILABLE, "n": 4}, 400, 410)  # the stored value is kept
    assert apply(t.take()) == "refused, merge"
    assert d.rows()[1]["v"] == "a3" and d.rows()[1]["n"] == 4
    t.raw(*envelope_with_schema({"id": 5, "v": "e", "extra": "new"},
                                [("id", "int32"), ("v", "string"), ("extra", "string")], 500))
    assert apply(t.take()) == "refused, events"  # a new schema: judged, the column added, then decoded
    assert d.rows()[5]["extra"] == "new"
    t.change("u", {"id": 5, "v": "e2", "n": 5}, 600, 610)
    assert apply(t.take()) == "batch"  # the new column's decoding made once the target has it
    assert "plan" in d.applier.timer.steps
    t.truncate(700, 710)
    t.change("c", {"id": 6, "v": "f", "n": 6}, 700, 720)
    assert apply(t.take()).startswith("refused, ")
    d.applier.direct_records = 2
    for i in range(3):
        t.change("u", {"id": 6, "v": f"f{i}", "n": 6}, 800 + i, 810 + i)
    assert apply(t.take()) == "refused, events"  # more records than one task takes
    d.applier.direct_records = BATCH_TASK_RECORDS
    d.applier.direct_bytes = 64
    t.change("c", {"id": 8, "v": "h" * 100, "n": 8}, 850, 860)
    assert apply(t.take()) == "refused, events"  # more bytes than one task holds
    d.applier.direct_bytes = 0
    t.change("c", {"id": 7, "v": "g", "n": 7}, 900, 910)
    first = t.take()
    assert apply(first) == "batch"
    t.change("u", {"id": 7, "v": "g2", "n": 7}, 1000, 1010)
    assert apply([*first, *t.take()]) == "batch"  # re-delivered with a new record
    assert d.values() == {6: "f2", 7: "g2", 8: "h" * 100}  # the truncate emptied the target before 6
    assert [parse_offsets(s) for s in d.summaries()][-1] == {t.name: {0: t.next_offset}}


def test_each_path_s_commit_names_the_transaction_of_the_table_s_last_change(scratch, table_name):
    """The task's path, the direct write after a query and the MERGE each stamp the commit with
    the source transaction of the change at its position and that change's order in it, which
    the consistent cut reads (control/cut.py); a batch of no change carries the last one on."""
    pair = both(scratch, table_name)
    d, t = pair[0], pair[0].topic
    t.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110, transaction=("571:100", 1))
    t.change("c", {"id": 2, "v": "b", "n": 2}, 100, 120, transaction=("571:100", 2))
    t.change("c", {"id": 3, "v": "c", "n": 3}, 90, 95, transaction=("570:90", 1))  # older, later in Kafka
    apply_both(pair, t.take())
    assert path_of(d) == "batch"
    assert [parse_transaction(h.summaries()[-1]) for h in pair] == [("571", 2)] * 2  # PostgreSQL's txId
    t.change("u", {"id": 1, "v": "a2", "n": 1}, 200, 210, transaction=("580:200", 1))
    t.raw(b'{"schema": {}, "payload": {"id": 9}}', b"\x00\xffgarbage")  # the batch takes a query
    apply_both(pair, t.take())
    assert path_of(d) == "refused, events"
    assert [parse_transaction(h.summaries()[-1]) for h in pair] == [("580", 1)] * 2
    t.tombstone({"id": 2})
    apply_both(pair, t.take())
    assert [parse_transaction(h.summaries()[-1]) for h in pair] == [("580", 1)] * 2


def test_several_tables_batches_share_one_job_and_a_table_needing_a_query_goes_alone(scratch, table_name):
    """Three tables' records in one batch (jobs/together.py): each table's part decoded,
    counted and written by one job's task, then committed with its own offsets; the table
    whose part holds a bad record is told to take a batch of its own, which then applies it
    as the MERGE-only target does; a table's part leaves out the other topics' records and
    those past its range."""
    from cdc.jobs.together import Together

    def frame(records: list):
        return spark.createDataFrame([r if len(r) == 6 else (*r, []) for r in records], KAFKA_SCHEMA)

    spark, _ = scratch
    pairs = [both(scratch, f"{table_name}_{i}") for i in range(3)]
    topics = [pair[0].topic for pair in pairs]
    for pair, t in zip(pairs, topics):  # a table's first batch learns its records' schema alone
        t.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
        assert apply_both(pair, t.take()) == "direct"
    starts = [t.next_offset for t in topics]
    for i, t in enumerate(topics):
        t.change("u", {"id": 1, "v": f"b{i}", "n": 2}, 200, 210)
        t.change("c", {"id": 2, "v": "c", "n": 3}, 200, 220)
        if i == 1:
            t.raw(b'{"schema": {}, "payload": {"id": 3}}', b"\x00\xffgarbage")  # a dead letter
        if i == 2:
            t.change("d", {"id": 1, **ROW}, 200, 230)
    taken, ends = [t.take() for t in topics], [t.next_offset for t in topics]
    later = topics[0].change("c", {"id": 9, "v": "later", "n": 9}, 300, 310)  # past table 0's range
    batch = frame([*(r for records in taken for r in records), later])
    appliers = {pair[0].applier.name: pair[0].applier for pair in pairs}
    ranges = {name: (pair[0].batch_id, {0: start}, {0: end}, len(records))
              for name, pair, start, end, records in zip(appliers, pairs, starts, ends, taken)}
    read = []
    done = Together(appliers, dict.fromkeys(appliers, spark),
                    lambda session, spans: read.append(spans) or batch)(ranges, 0.0)
    names = list(appliers)
    assert done == {names[0]: True, names[1]: False, names[2]: True}
    assert read[-1] == {t.name: ({0: start}, {0: end}) for t, start, end in zip(topics, starts, ends)}
    assert "together" in pairs[0][0].applier.timer.steps
    pairs[1][0].applier(frame(taken[1]), pairs[1][0].batch_id, direct=False)  # its batch of its own
    for pair, t, records, end in zip(pairs, topics, taken, ends):
        pair[0].batch_id += 1
        pair[1].apply(records)
        assert rows(pair[0]) == rows(pair[1])
        assert parse_offsets(pair[0].summaries()[-1]) == {t.name: {0: end}}
    assert 9 not in pairs[0][0].rows() and len(pairs[1][0].dead_letters()) == 1


def index_counts(spark) -> tuple[int, int, int]:
    """The key index's data files read for their rows, its live files built from a scan's
    planning, and the snapshots it read to move them, so far in this JVM (jvm/direct, KeyIndex)."""
    reads, builds, steps = spark._jvm.cdc.direct.KeyIndex.counts()
    return reads, builds, steps


def test_the_key_index_reads_a_file_once_and_follows_what_others_commit(scratch, table_name):
    spark, _ = scratch
    pair = both(scratch, table_name)
    d, t = pair[0], pair[0].topic
    for i in range(1, 9):
        t.change("c", {"id": i, "v": f"v{i}", "n": i}, 100, 100 + i)
    t.change("d", {"id": 9, **ROW}, 100, 120)  # the delete memory's first file
    assert apply_both(pair, t.take()) == "direct"
    t.change("u", {"id": 1, "v": "one", "n": 1}, 200, 210)
    assert apply_both(pair, t.take()) == "direct"
    reads, builds, steps = index_counts(spark)
    t.change("u", {"id": 2, "v": "two", "n": 2}, 300, 310)  # keys of files read before
    t.change("u", {"id": 1, "v": "one again", "n": 1}, 300, 320)  # of the file the batch before wrote
    assert apply_both(pair, t.take()) == "direct"
    read, built, stepped = index_counts(spark)
    # no file read (the one the batch before wrote is held as written), no scan planned, and no
    # manifest read: the live files follow the job's own commits
    assert (read - reads, built - builds, stepped - steps) == (0, 0, 0)

    # others' commits between two batches: a delete, a rewrite of every data file
    for h in pair:
        spark.sql(f"DELETE FROM {h.applier.target_ref} WHERE id = 3")
    spark.sql(f"CALL scratch.system.rewrite_data_files(table => '{d.ident}', options => map('rewrite-all', 'true'))")
    before_rollback = d.catalog.load_table(d.ident).current_snapshot().snapshot_id
    t.change("u", {"id": 3, "v": "three, after its delete", "n": 3}, 400, 410)
    t.change("u", {"id": 4, "v": "four", "n": 4}, 400, 420)
    t.change("d", {"id": 5, **ROW}, 400, 430)
    assert apply_both(pair, t.take()) == "direct"
    assert d.values() == {1: "one again", 2: "two", 3: "three, after its delete", 4: "four", 6: "v6", 7: "v7",
                          8: "v8"}
    assert index_counts(spark)[1] == built  # moved through the others' delete and rewrite
    assert index_counts(spark)[2] >= stepped + 2

    # a rollback: the held snapshot is no ancestor of the table's, so its live files are built anew
    spark.sql(f"CALL scratch.system.rollback_to_snapshot('{d.ident}', {before_rollback})")
    t.change("u", {"id": 4, "v": "four again", "n": 4}, 500, 510)
    t.change("u", {"id": 6, "v": "six", "n": 6}, 500, 520)
    d.apply(t.take())
    assert path_of(d) == "batch"
    assert index_counts(spark)[1] == built + 1
    assert d.values() == {1: "one again", 2: "two", 4: "four again", 5: "v5", 6: "six", 7: "v7", 8: "v8"}


def test_one_job_reads_its_tables_ranges_from_kafka_with_one_consumer(stack, settings, scratch, table_name):
    """The job of several tables' batches reads their ranges from the real Kafka itself
    (reading.kafka_records, jvm/direct's KafkaRead): the parts of each topic from their start
    (a partition a start lacks: from its first record) up to their end, headers kept (a key
    change's take a query), and each target then equal to the MERGE's. A range Kafka no longer
    holds is an error that says data was lost, never a shorter batch."""
    import secrets

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka import TopicPartition as KafkaPartition

    from cdc.config.clients import kafka_access
    from cdc.jobs.reading import kafka_records
    from cdc.jobs.together import Together

    spark, _ = scratch
    pairs = [both(scratch, f"{table_name}_{secrets.token_hex(3)}_{i}") for i in range(3)]
    topics = [pair[0].topic for pair in pairs]
    access = kafka_access(settings).client()
    admin = AdminClient(access)
    for future in admin.create_topics([NewTopic(t.name, num_partitions=2, replication_factor=1)
                                       for t in topics]).values():
        future.result(30)
    producer = Producer(access)

    def produce(records: list) -> list:
        for key, value, topic, partition, offset, *headers in records:
            producer.produce(topic, key=key, value=value, partition=partition, headers=(headers or [None])[0],
                             on_delivery=lambda err, msg, at=offset: sent.append((err, msg.offset(), at)))
        assert producer.flush(30) == 0
        assert all(err is None and got == at for err, got, at in sent), sent  # the records' offsets, as built
        return records

    sent: list = []
    for pair, t in zip(pairs, topics):  # a table's first batch learns its records' schema alone
        t.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
        t.change("c", {"id": 2, "v": "b", "n": 2}, 100, 120)
        assert apply_both(pair, produce(t.take())) == "direct"
    starts = [t.next_offset for t in topics]
    for i, t in enumerate(topics):
        t.change("u", {"id": 1, "v": f"b{i}", "n": 2}, 200, 210)
        t.change("c", {"id": 3, "v": "c", "n": 3}, 200, 220)
        if i == 2:
            t.key_change({"id": 2, **ROW}, {"id": 20, **ROW}, 200, 230)  # its headers: a query looks it up
    taken = [produce(t.take()) for t in topics]
    ends = [t.next_offset for t in topics]
    topics[1].partition, topics[1].next_offset = 1, 0  # a partition its table's start lacks
    taken[1] += produce([topics[1].change("c", {"id": 4, "v": "other partition", "n": 4}, 200, 240)])
    topics[1].partition = 0
    produce([topics[0].change("c", {"id": 9, "v": "later", "n": 9}, 300, 310)])  # past table 0's range
    appliers = {pair[0].applier.name: pair[0].applier for pair in pairs}
    names = list(appliers)
    ranges = {name: (pair[0].batch_id, {0: start}, {0: end, 1: 1 if i == 1 else 0}, len(records))
              for i, (name, pair, start, end, records) in enumerate(zip(names, pairs, starts, ends, taken))}
    read = lambda session, spans: kafka_records(session, settings, spans)  # noqa: E731
    done = Together(appliers, dict.fromkeys(appliers, spark), read)(ranges, 0.0)
    assert done == {names[0]: True, names[1]: True, names[2]: False}
    assert "together" in pairs[0][0].applier.timer.steps
    pairs[2][0].applier(pairs[2][0].spark.createDataFrame([(*r, []) if len(r) == 5 else r for r in taken[2]],
                                                          KAFKA_SCHEMA), pairs[2][0].batch_id, direct=False)
    for pair, records in zip(pairs, taken):
        pair[0].batch_id += 1
        pair[1].apply(records)
        assert rows(pair[0]) == rows(pair[1])
    assert 9 not in pairs[0][0].rows() and pairs[1][0].values()[4] == "other partition"
    assert parse_offsets(pairs[1][0].summaries()[-1]) == {topics[1].name: {0: ends[1], 1: 1}}

    # Kafka no longer holds the start of table 0's next range
    for future in admin.delete_records([KafkaPartition(topics[0].name, 0, ends[0] + 1)]).values():
        future.result(30)
    part = appliers[names[0]].direct_part(spark, direct.KafkaRecords.schema, {0: ends[0]}, {0: ends[0] + 1}, 1,
                               pairs[0][0].batch_id)
    with pytest.raises(Exception, match="data loss"):
        direct.write_parts(spark, read(spark, {topics[0].name: ({0: ends[0]}, {0: ends[0] + 1})}), [part.jvm])


def test_the_kafka_records_schema_is_the_kafka_sources(spark):
    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
             .option("assign", '{"t": [0]}').option("includeHeaders", "true").load())  # never read
    assert direct.KafkaRecords.schema == frame.schema
