"""`cdc repair`'s plan (planning/repair.py): which keys are read again, which rows deleted,
the bound, and the signals' filters, without a source or a Spark."""
from __future__ import annotations

import json

import pytest

from cdc.errors import ConfigError
from cdc.planning.repair import (clear_sql, delete_extras_sql, key_filter, plan_repair, remember_extras_sql,
                                 snapshot_signals)


def found(*keys: tuple[str, dict]) -> dict:
    counts = {"missing": 0, "extra": 0, "different": 0, "duplicate": 0}
    for kind, _ in keys:
        counts[kind] += 1
    return {**counts, "keys": [{"kind": kind, "key": key} for kind, key in keys]}


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal(column: str, value) -> str:
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"


def test_keys_the_source_holds_are_read_again_and_the_others_deleted():
    plan = plan_repair("ns.t", found(("missing", {"id": 1}), ("extra", {"id": 2}), ("different", {"id": 3}),
                                     ("duplicate", {"id": 4})), "upsert")
    assert plan.reread == ({"id": 1}, {"id": 3}, {"id": 4})
    assert plan.delete == ({"id": 2},) and plan.clear == ({"id": 4},)
    assert plan.counts() == {"reread": 3, "delete": 1, "clear": 1} and not plan.empty
    assert plan_repair("ns.t", found(), "history").empty  # nothing to do is no refusal


def test_a_drift_past_the_bound_says_to_bootstrap():
    with pytest.raises(ConfigError) as e:
        plan_repair("ns.t", found(*[("missing", {"id": i}) for i in range(3)]), "upsert", max_keys=2)
    assert "3 keys differ" in str(e.value) and "cdc bootstrap --table ns.t" in e.value.hint
    assert plan_repair("ns.t", found(("missing", {"id": 1})), "history").reread == ({"id": 1},)
    with pytest.raises(ValueError, match="limit"):  # every key must be listed
        plan_repair("ns.t", {**found(("missing", {"id": 1})), "keys": []}, "upsert")


def test_the_filter_names_exactly_the_keys_quoted_by_the_source():
    assert key_filter(("id",), [{"id": 1}, {"id": 2}], ident, literal) == '"id" IN (1, 2)'
    both = key_filter(("a", 'we"ird'), [{"a": 1, 'we"ird': "x'y"}, {"a": 2, 'we"ird': "z"}], ident, literal)
    assert both == '("a" = 1 AND "we""ird" = \'x\'\'y\') OR ("a" = 2 AND "we""ird" = \'z\')'


def test_keys_are_spread_over_signals_that_fit_the_signal_table():
    keys = [{"id": i} for i in range(200)]
    one = snapshot_signals("public.t", ("id",), keys, ident, literal, None)
    assert len(one) == 1
    data = json.loads(one[0])
    assert data == {"data-collections": ["public.t"], "type": "incremental", "additional-conditions": [
        {"data-collection": "public.t", "filter": key_filter(("id",), keys, ident, literal)}]}
    several = snapshot_signals("public.t", ("id",), keys, ident, literal, 300)
    assert len(several) > 1 and all(len(d) <= 300 for d in several)
    read = [int(v) for d in several for v in json.loads(d)["additional-conditions"][0]["filter"]
            .split("IN (")[1].rstrip(")").split(", ")]
    assert read == list(range(200))  # every key once, in order
    with pytest.raises(ConfigError, match="does not fit"):
        snapshot_signals("public.t", ("id",), [{"id": "x" * 400}], ident, literal, 300)


def test_an_extra_row_goes_only_while_it_is_the_compared_one_and_is_remembered_at_its_position():
    sql = delete_extras_sql("cat.ns.t", "rows", ("id",), "upsert")
    assert sql == ("MERGE INTO cat.ns.t t USING `rows` s ON t.`id` <=> s.`id` AND t._cdc_position <=> "
                   "s._cdc_position WHEN MATCHED THEN DELETE")
    assert "UPDATE SET t._cdc_deleted = true, t._cdc_op = 'd'" in delete_extras_sql("t", "rows", ("id",), "soft_delete")
    remember = remember_extras_sql("cat.ns.t__cdc_deletes", "rows", ("id",))
    assert remember.startswith("INSERT INTO cat.ns.t__cdc_deletes (`id`, _cdc_position, _cdc_source_ts, _cdc_moved)")
    assert "coalesce(_cdc_position, '0000" in remember
    assert clear_sql("t", "keys", ("a", "b")) == ("MERGE INTO t t USING `keys` s ON t.`a` <=> s.`a` AND "
                                                  "t.`b` <=> s.`b` WHEN MATCHED THEN DELETE")


def test_a_history_target_s_versions_are_closed_not_deleted():
    extras = delete_extras_sql("t", "rows", ("id",), "history")
    assert extras.endswith("AND t._cdc_position <=> s._cdc_position AND t._cdc_current WHEN MATCHED THEN "
                           "UPDATE SET t._cdc_valid_to = current_timestamp(), t._cdc_current = false")
    assert clear_sql("t", "keys", ("id",), "history") == (
        "MERGE INTO t t USING `keys` s ON t.`id` <=> s.`id` AND t._cdc_current WHEN MATCHED THEN "
        "UPDATE SET t._cdc_valid_to = current_timestamp(), t._cdc_current = false")
