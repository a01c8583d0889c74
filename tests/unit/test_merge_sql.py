import pytest

from cdc.planning.merge import (KEY_BUCKETS, append_sql, forget_deletes_sql, key_bucket, merge_sql, remember_deletes_sql, remembered_deletes_sql,
                                table_ref, truncate_sql)


def test_merge_is_guarded_by_position_and_quotes_identifiers():
    sql = merge_sql("`lake`.`s`.`t`", "batch", ("id",), ("id", "select"))
    assert "ON t.`id` = s.`id`" in sql
    assert "s._op = 'd' AND (t._cdc_position IS NULL OR s._position > t._cdc_position) THEN DELETE" in sql
    assert "s._op IN ('c', 'u', 'r') AND (t._cdc_position IS NULL OR s._position > t._cdc_position) THEN UPDATE SET t.`select` = s.`select`" in sql
    assert "t.`id` = s.`id`," not in sql.split("UPDATE SET")[1]  # keys are never updated
    assert ("WHEN NOT MATCHED AND s._op IN ('c', 'u', 'r') AND "
            "(s._deleted_position IS NULL OR s._position > s._deleted_position) THEN INSERT") in sql
    assert "s._offset > t._cdc_kafka_offset THEN DELETE" in sql


def test_first_load_appends_what_the_merge_would_insert():
    sql = append_sql("`lake`.`s`.`t`", "batch", ("id", "select"), floor="00ff")
    assert sql.startswith("INSERT INTO `lake`.`s`.`t` (`id`, `select`, `_cdc_op`,")
    assert "SELECT s.`id`, s.`select`, s.`_op`," in sql and "FROM `batch` s" in sql
    assert ("WHERE s._op IN ('c', 'u', 'r') AND (s._deleted_position IS NULL OR "
            "s._position > s._deleted_position) AND s._position > '00ff'") in sql
    with pytest.raises(ValueError):
        append_sql("x", "b", ("id",), floor="0' OR '1'='1")


def test_composite_key():
    sql = merge_sql("x", "b", ("a", "b"), ("a", "b", "c"))
    assert "ON t.`a` = s.`a` AND t.`b` = s.`b`" in sql


def test_truncate_refuses_non_position():
    assert truncate_sql("x", "00ff") == "DELETE FROM x WHERE (_cdc_position IS NULL OR _cdc_position < '00ff')"
    with pytest.raises(ValueError):
        truncate_sql("x", "0' OR '1'='1")


def test_table_ref_quotes_backticks():
    assert table_ref("lake", "ns.t") == "`lake`.`ns`.`t`"


def test_truncate_floor_guards_inserts():
    sql = merge_sql("x", "b", ("id",), ("id",), floor="00aa")
    assert "s._position > '00aa' THEN INSERT" in sql
    with pytest.raises(ValueError):
        merge_sql("x", "b", ("id",), ("id",), floor="' OR 1=1 --")


def test_delete_memory_appends_and_is_read_by_the_newest_position():
    sql = remember_deletes_sql("`d`", "b", ("id",))
    assert sql.startswith("INSERT INTO `d` (`id`, _cdc_position, _cdc_source_ts, _cdc_moved) "
                          "SELECT /*+ COALESCE(1) */ `id`, _position, _source_ts, _moved")
    assert sql.endswith("WHERE _op = 'd'")
    read = remembered_deletes_sql("`d`", ("id", "k"))
    assert "`id` AS `_deleted_0`, `k` AS `_deleted_1`, max(_cdc_position) AS _deleted_position" in read
    assert read.endswith("FROM `d` GROUP BY `id`, `k`")
    assert remembered_deletes_sql("`d`", ("id",), 42).endswith("FROM `d` VERSION AS OF 42 GROUP BY `id`")
    assert "make_dt_interval(0, 24, 0, 0)" in forget_deletes_sql("`d`", 24)


def test_toastable_columns_keep_the_stored_value_without_one_in_the_batch():
    sql = merge_sql("x", "b", ("id",), ("id", "doc", "n"), toastable=("doc",))
    assert "t.`doc` = CASE WHEN s._has_0 THEN s.`doc` ELSE t.`doc` END" in sql
    assert "t.`n` = s.`n`" in sql


def test_a_small_batch_names_its_key_buckets_on_the_targets_side():
    types = {"a": "BIGINT", "b b": "DECIMAL(12,2)"}
    target = key_bucket(types, "t")
    assert target == f"pmod(xxhash64(CAST(t.`a` AS BIGINT), CAST(t.`b b` AS DECIMAL(12,2))), {KEY_BUCKETS})"
    assert key_bucket(types) == f"pmod(xxhash64(CAST(`a` AS BIGINT), CAST(`b b` AS DECIMAL(12,2))), {KEY_BUCKETS})"
    sql = merge_sql("x", "b", ("a", "b b"), ("a", "b b", "c"), buckets=(target, (3, 70)))
    assert f"ON t.`a` = s.`a` AND t.`b b` = s.`b b` AND {target} IN (3, 70)\n" in sql
    # -0.0 = 0.0 and NaN = NaN in a join, but their hashes differ: no buckets for such keys.
    assert key_bucket({"a": "BIGINT", "f": "DOUBLE"}, "t") is None and key_bucket({"f": "FLOAT"}) is None
