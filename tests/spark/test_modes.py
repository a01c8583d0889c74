"""The registration's modes and protected columns through the real apply step, read back
with pyiceberg: history (SCD type 2), soft delete, exclude and mask."""
from __future__ import annotations

import datetime as dt

import pytest

from cdc.planning.protect import key_fingerprint, mask_value
from tests.spark.test_merge_semantics import Harness

T0 = 1_700_000_000_000
PLACEHOLDER = "__debezium_unavailable_value"


def at(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def versions(h) -> dict[int, list[dict]]:
    """Each key's versions in position order."""
    out: dict[int, list[dict]] = {}
    for r in sorted(h._read(), key=lambda r: r["_cdc_position"]):
        out.setdefault(r["id"], []).append(r)
    return out


def test_history_keeps_every_version_with_contiguous_intervals(scratch, table_name):
    h = Harness(*scratch, table_name, mode="history")
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110, ts_ms=T0)
    h.topic.change("u", {"id": 1, "v": "b", "n": 2}, 200, 210, ts_ms=T0 + 1000)
    h.topic.change("c", {"id": 2, "v": "x", "n": 1}, 200, 220, ts_ms=T0 + 1000)
    first = h.apply()
    h.topic.change("u", {"id": 1, "v": PLACEHOLDER, "n": 3}, 300, 310, ts_ms=T0 + 2000)  # unchanged TOASTed v
    h.topic.change("u", {"id": 1, "v": "d", "n": 4}, 400, 410, ts_ms=T0 + 3000)
    h.topic.change("d", {"id": 1, "v": "d", "n": 4}, 500, 510, ts_ms=T0 + 4000)
    h.topic.tombstone({"id": 1})
    h.apply()
    h.applier.skip_committed = False  # a replay: positions alone keep it from adding versions
    h.apply(first)
    got = versions(h)
    one = got[1]
    assert [(r["v"], int(r["n"]), r["_cdc_op"]) for r in one] == [("a", 1, "c"), ("b", 2, "u"), ("b", 3, "u"),
                                                                  ("d", 4, "u")]
    assert [(r["_cdc_valid_from"], r["_cdc_valid_to"]) for r in one] == [
        (at(T0), at(T0 + 1000)), (at(T0 + 1000), at(T0 + 2000)), (at(T0 + 2000), at(T0 + 3000)),
        (at(T0 + 3000), at(T0 + 4000))]
    assert not any(r["_cdc_current"] for r in one)  # deleted: no version is current
    assert [(r["v"], r["_cdc_valid_to"], r["_cdc_current"]) for r in got[2]] == [("x", None, True)]

    h.topic.change("c", {"id": 1, "v": "again", "n": 5}, 600, 610, ts_ms=T0 + 5000)
    h.apply()
    assert versions(h)[1][-1]["_cdc_current"]
    h.topic.truncate(700, 710, ts_ms=T0 + 6000)
    h.topic.change("c", {"id": 3, "v": "after", "n": 6}, 800, 810, ts_ms=T0 + 7000)
    h.apply()
    got = versions(h)
    assert [(r["v"], r["_cdc_valid_from"], r["_cdc_valid_to"], r["_cdc_current"]) for r in got[1][-2:]] == [
        ("d", at(T0 + 3000), at(T0 + 4000), False), ("again", at(T0 + 5000), at(T0 + 6000), False)]
    assert got[2][0]["_cdc_valid_to"] == at(T0 + 6000) and not got[2][0]["_cdc_current"]  # the truncate's time
    assert [(r["v"], r["_cdc_current"]) for r in got[3]] == [("after", True)]


def test_soft_delete_marks_rows_and_older_changes_still_lose(scratch, table_name):
    h = Harness(*scratch, table_name, mode="soft_delete")
    h.topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    h.topic.change("c", {"id": 2, "v": "b", "n": 1}, 100, 120)
    h.apply()
    h.topic.change("d", {"id": 1, "v": "a", "n": 1}, 200, 210)
    h.topic.tombstone({"id": 1})
    h.apply()
    rows = h.rows()
    assert {k: (r["v"], r["_cdc_deleted"]) for k, r in rows.items()} == {1: ("a", True), 2: ("b", False)}
    assert rows[1]["_cdc_op"] == "d"
    h.topic.change("u", {"id": 1, "v": "late", "n": 1}, 150, 160)  # older than the delete
    h.apply()
    assert h.rows()[1]["_cdc_deleted"] and h.rows()[1]["v"] == "a"
    h.topic.change("c", {"id": 1, "v": "back", "n": 2}, 300, 310)
    h.apply()
    assert (h.rows()[1]["v"], h.rows()[1]["_cdc_deleted"]) == ("back", False)
    h.topic.truncate(400, 410)
    h.apply()
    assert {k: (r["_cdc_deleted"], r["_cdc_op"]) for k, r in h.rows().items()} == {1: (True, "t"), 2: (True, "t")}
    h.topic.change("u", {"id": 2, "v": "before truncate", "n": 1}, 350, 360)
    h.apply()
    assert h.rows()[2]["_cdc_deleted"]


@pytest.mark.parametrize("sink", ["iceberg", pytest.param("delta", marks=pytest.mark.long)])
def test_history_keeps_the_changes_that_a_truncate_of_their_batch_ends(scratch, table_name, tmp_path, sink):
    h = Harness(*scratch, table_name, mode="history", sink=sink, delta_root=tmp_path)
    h.topic.change("c", {"id": 1, "v": "held", "n": 1}, 100, 110, ts_ms=T0)
    h.apply()
    h.topic.change("u", {"id": 1, "v": "a", "n": 2}, 200, 210, ts_ms=T0 + 1000)
    h.topic.change("c", {"id": 2, "v": "b", "n": 1}, 200, 220, ts_ms=T0 + 1000)
    h.topic.truncate(300, 310, ts_ms=T0 + 2000)
    h.topic.change("c", {"id": 2, "v": "b2", "n": 2}, 400, 410, ts_ms=T0 + 3000)
    h.topic.truncate(500, 510, ts_ms=T0 + 4000)  # two truncates in one batch
    h.topic.change("c", {"id": 3, "v": "c", "n": 1}, 600, 610, ts_ms=T0 + 5000)
    batch = h.apply()
    h.applier.skip_committed = False  # the batch again: positions alone keep it from adding versions
    h.apply(batch)
    got = {k: [(r["v"], r["_cdc_valid_from"], r["_cdc_valid_to"], r["_cdc_current"]) for r in rows]
           for k, rows in versions(h).items()}
    assert got == {
        1: [("held", at(T0), at(T0 + 1000), False), ("a", at(T0 + 1000), at(T0 + 2000), False)],
        2: [("b", at(T0 + 1000), at(T0 + 2000), False), ("b2", at(T0 + 3000), at(T0 + 4000), False)],
        3: [("c", at(T0 + 5000), None, True)]}


def soft_delete_changes(topic) -> list[int]:
    """A run of changes whose soft-delete result must not depend on how it is cut into
    batches; returns the index after which the first batch ends."""
    topic.change("c", {"id": 1, "v": "a", "n": 1}, 100, 110)
    topic.change("c", {"id": 2, "v": "b", "n": 1}, 100, 120)
    topic.change("u", {"id": 1, "v": "a2", "n": 2}, 200, 210)  # the target holds 1: updated, then deleted
    topic.change("d", {"id": 1, "v": None, "n": None}, 200, 220)
    topic.tombstone({"id": 1})
    topic.change("c", {"id": 3, "v": "c", "n": 1}, 300, 310)  # created and deleted within one batch
    topic.change("d", {"id": 3, "v": None, "n": None}, 300, 320)
    topic.tombstone({"id": 3})
    topic.change("c", {"id": 4, "v": "d", "n": 1}, 400, 410)  # created, then truncated in the same batch
    topic.truncate(500, 510)
    topic.change("c", {"id": 5, "v": "e", "n": 1}, 600, 610)
    topic.change("u", {"id": 5, "v": "e2", "n": 2}, 600, 620)
    topic.change("d", {"id": 5, "v": None, "n": None}, 700, 710)
    topic.change("c", {"id": 6, "v": "f", "n": 1}, 800, 810)
    return 2


@pytest.mark.parametrize("sink", ["iceberg", pytest.param("delta", marks=pytest.mark.long)])
def test_soft_delete_keeps_every_key_the_source_held_however_batches_are_cut(scratch, table_name, tmp_path, sink):
    whole = Harness(*scratch, table_name + "_w", mode="soft_delete", sink=sink, delta_root=tmp_path)
    first = soft_delete_changes(whole.topic)
    records = whole.topic.take()
    whole.apply(records[:first])
    whole.apply(records[first:])
    split = Harness(*scratch, table_name + "_s", mode="soft_delete", sink=sink, delta_root=tmp_path)
    soft_delete_changes(split.topic)
    for record in split.topic.take():  # one change per batch
        split.apply([record])

    def state(h):
        return {k: (r["v"], int(r["n"]), r["_cdc_deleted"], r["_cdc_op"]) for k, r in h.rows().items()}

    assert state(whole) == {1: ("a2", 2, True, "d"), 2: ("b", 1, True, "t"), 3: ("c", 1, True, "d"),
                            4: ("d", 1, True, "t"), 5: ("e2", 2, True, "d"), 6: ("f", 1, False, "c")}
    assert state(split) == state(whole)
    assert {k: r["_cdc_position"] for k, r in split.rows().items()} == \
        {k: r["_cdc_position"] for k, r in whole.rows().items()}
    whole.applier.skip_committed = False  # a replay changes nothing
    whole.apply(records)
    assert state(whole) == state(split)


def test_masked_columns_hold_a_keyed_hash_and_excluded_ones_are_absent(scratch, table_name):
    key = b"a masking key of the test"
    h = Harness(*scratch, table_name, mask=("v",), exclude=("n",), mask_key=key)
    assert "n" not in {f.name for f in h.catalog.load_table(h.ident).schema().fields}
    h.topic.change("c", {"id": 1, "v": "alice@example.com", "n": 1}, 100, 110)
    h.topic.change("c", {"id": 2, "v": None, "n": 1}, 100, 120)
    h.topic.change("c", {"id": 3, "v": "bob@example.com", "n": 1}, 100, 130)
    h.apply()
    h.topic.change("u", {"id": 3, "v": PLACEHOLDER, "n": 2}, 200, 210)  # unchanged TOASTed: the hash stays
    h.apply()
    assert h.values() == {1: mask_value("alice@example.com", key), 2: None, 3: mask_value("bob@example.com", key)}
    assert len(h.values()[1]) == 64 and h.values()[1] != mask_value("alice@example.com", b"another key")


def test_a_column_the_connector_hashed_is_not_hashed_again(scratch, table_name):
    """The connector's MaskColumns hashes text columns before Kafka and names them in the
    header cdc.masked; the job hashes the masked columns it does not name, and a record
    without the header (written before the connector masked) entirely."""
    key = b"a masking key of the test"
    h = Harness(*scratch, table_name, mask=("v", "n"), mask_key=key)
    upstream = [("cdc.masked", f"{key_fingerprint(key)}:v".encode())]
    h.topic.change("c", {"id": 1, "v": mask_value("alice@example.com", key), "n": 7}, 100, 110, headers=upstream)
    h.topic.change("c", {"id": 2, "v": "bob@example.com", "n": 8}, 100, 120)  # from before the connector masked
    other = b"the workers' other key"  # hashed with another key: set aside, never stored
    h.topic.change("c", {"id": 3, "v": mask_value("eve@example.com", other), "n": 1}, 100, 130,
                   headers=[("cdc.masked", f"{key_fingerprint(other)}:v".encode())])
    h.apply()
    h.topic.change("u", {"id": 1, "v": PLACEHOLDER, "n": 9}, 200, 210, headers=upstream)  # unchanged TOASTed
    h.apply()
    assert {k: (r["v"], r["n"]) for k, r in h.rows().items()} == {
        1: (mask_value("alice@example.com", key), mask_value("9.00", key)),  # a decimal hashed as Spark prints it
        2: (mask_value("bob@example.com", key), mask_value("8.00", key))}
    (dead,) = h.dead_letters()
    assert dead["error_class"] == "mask-key-mismatch" and key_fingerprint(other) in dead["error_message"]


def test_a_bad_record_never_brings_a_masked_value_to_the_dead_letters(scratch, table_name):
    """A bad record the job would hash itself (no header of the connector's: written before
    it masked) keeps no raw value in its dead letter, which says why; one whose masked
    columns the connector hashed keeps its raw value."""
    key = b"a masking key of the test"
    h = Harness(*scratch, table_name, mask=("v",), mask_key=key)
    upstream = [("cdc.masked", f"{key_fingerprint(key)}:v".encode())]
    h.topic.change("c", {"id": 1, "v": "alice@example.com", "n": "not a number"}, 100, 110)  # bad, in clear
    h.topic.change("c", {"id": 2, "v": mask_value("bob@example.com", key), "n": "bad"}, 100, 120, headers=upstream)
    h.topic.change("c", {"id": 3, "v": "carol@example.com", "n": 1}, 100, 130)
    h.apply()
    dead = {r["offset"]: r for r in h.dead_letters()}
    assert len(dead) == 2 and set(h.rows()) == {3}
    clear, hashed = (dead[o] for o in sorted(dead))
    assert clear["value"] is None and "withheld" in clear["error_message"]
    assert b"alice" not in bytes(clear["key"]) and "alice" not in clear["error_message"]
    assert mask_value("bob@example.com", key).encode() in bytes(hashed["value"])
    assert "withheld" not in hashed["error_message"]
    assert h.values()[3] == mask_value("carol@example.com", key)


def test_masked_columns_of_every_kind_are_hashed_once_as_their_target_text(scratch, table_name):
    """A masked column that is not text arrives either as the connector's hash (named in the
    header, its field now a string) or as its wire value (a change from before the
    connector masked): the second is hashed as Spark writes its target value, so both give
    the hash the connector makes; a wire value that does not fit is set aside."""
    from cdc.sources.types import Column

    key = b"a masking key of the test"
    columns = (Column("id", "int", nullable=False), Column("d", "date"), Column("ts", "timestamp_us"),
               Column("tz", "timestamptz"), Column("b", "binary"), Column("f", "double"), Column("ok", "boolean"),
               Column("t", "time_us"), Column("n", "decimal", precision=10, scale=2))
    masked = tuple(c.name for c in columns[1:])
    h = Harness(*scratch, table_name, columns=columns, mask=masked, mask_key=key)
    text = {"d": "2024-05-01", "ts": "2024-05-01 10:00:00.5", "tz": "2024-05-01 10:00:00.123456", "b": "bytes",
            "f": "1.0E20", "ok": "true", "t": "10:00:00.000250", "n": "12.50"}
    hashed = {c: mask_value(v, key) for c, v in text.items()}
    every = [("cdc.masked", f"{key_fingerprint(key)}:{','.join(sorted(masked))}".encode())]
    h.topic.change("c", {"id": 1, **hashed}, 100, 110, headers=every)
    wire = {"d": 19844, "ts": 1714557600500000, "tz": "2024-05-01T10:00:00.123456Z", "b": "Ynl0ZXM=", "f": 1e20,
            "ok": True, "t": 36000000250, "n": "12.5"}
    h.topic.change("c", {"id": 2, **wire}, 100, 120)  # from before the connector masked
    some = [("cdc.masked", f"{key_fingerprint(key)}:d,n".encode())]  # the connector left the others
    h.topic.change("c", {"id": 3, **wire, "d": hashed["d"], "n": hashed["n"]}, 100, 130, headers=some)
    h.topic.change("c", {"id": 4, **wire, "d": "not a day"}, 100, 140)
    h.apply()
    for i in (1, 2, 3):
        assert {c: h.rows()[i][c] for c in masked} == hashed, i
    assert 4 not in h.rows()
    (dead,) = h.dead_letters()
    assert dead["error_class"] == "value-does-not-fit" and "d" in dead["error_message"]


def test_a_masked_table_without_a_key_is_refused(scratch, table_name):
    with pytest.raises(ValueError, match="masking key"):
        Harness(*scratch, table_name, mask=("v",))


def test_the_hash_in_spark_is_hmac_sha256_of_the_text(spark):
    from cdc.planning.protect import hmac_sql

    long_key = b"k" * 100  # longer than SHA-256's block: hashed first, as RFC 2104 says
    for key in (b"short", long_key):
        row = spark.sql(f"SELECT {hmac_sql('s', key)} AS s, {hmac_sql('i', key)} AS i, {hmac_sql('n', key)} AS n "
                        f"FROM VALUES ('snowman ☃', 42, CAST(NULL AS STRING)) AS v(s, i, n)").first()
        assert (row["s"], row["i"], row["n"]) == (mask_value("snowman ☃", key), mask_value("42", key), None)
    plan = spark.sql(f"SELECT {hmac_sql('id', b'short')} FROM range(1)")
    pad = bytes(b ^ 0x36 for b in b"short".ljust(64, b"\0")).hex()
    shown = plan._sc._jvm.PythonSQLUtils.explainString(plan._jdf.queryExecution(), "extended")
    assert "sha2" in shown and pad not in shown.lower()  # the key's pads are redacted from EXPLAIN
