"""`cdc repair` on the real stack: rows deleted, changed, inserted and doubled behind the
engine's back in a target of each sink while the source keeps changing. A dry run lists
them and changes nothing; the repair fixes them; `reconcile --deep` then says OK and the
live stream keeps the target equal to the source."""
from __future__ import annotations

import json

import pytest

from tests.conftest import interrupt, start_driver
from tests.eventually import eventually


@pytest.fixture(params=["iceberg", "delta"])
def renv(request):
    return request.getfixturevalue("it_env" if request.param == "iceberg" else "it_delta")


def damage(spark, env, table: str) -> None:
    """What a stray writer does to the target: a row gone, a value changed, a row the source
    never held, a key twice."""
    target = env.target_ref(table)
    columns = spark.table(target).columns

    def copy(of: int, as_id: int) -> str:
        return (f"INSERT INTO {target} SELECT {', '.join(f'{as_id} AS id' if c == 'id' else f'`{c}`' for c in columns)} "
                f"FROM {target} WHERE id = {of}")

    spark.sql(f"DELETE FROM {target} WHERE id IN (3, 4)")
    spark.sql(f"UPDATE {target} SET v = 'damaged' WHERE id IN (5, 10)")  # 5 changes at the source after
    spark.sql(copy(6, 1000))  # extra
    spark.sql(copy(9, 9))  # duplicate


def equal(env, table: str) -> bool:
    try:
        env.assert_equal(table)
        return True
    except AssertionError:
        return False


def test_repair_fixes_what_a_stray_writer_did(renv, spark, capsys, tmp_path):
    """On Iceberg while a continuous job runs the table (it hands the table over to the
    repair); on Delta with no job running (the repair applies the reads itself)."""
    env, s = renv, renv.schema
    name = f"{s}.fixme"
    env.sql(f'CREATE TABLE "{s}".fixme (id int PRIMARY KEY, v text, n numeric(10,2))')
    env.sql(f'INSERT INTO "{s}".fixme SELECT g, \'v\' || g, g FROM generate_series(1, 100) g')
    env.register_table("fixme")
    assert env.cdc("register", "--table", name) == 0
    env.replicate("fixme")
    damage(spark, env, "fixme")
    with open(tmp_path / "driver.log", "w") as log:
        driver = start_driver(env, "fixme", log) if env.sink == "iceberg" else None
        try:
            live = env.transaction(f'UPDATE "{s}".fixme SET v = \'live\' WHERE id IN (5, 7)',
                                   f'DELETE FROM "{s}".fixme WHERE id = 8',
                                   f'INSERT INTO "{s}".fixme VALUES (200, \'new\', 2)')
            if driver is None:
                env.replicate("fixme", live)
            capsys.readouterr()
            assert env.cdc("repair", "--table", name, "--dry-run", "--json") == 0
            dry = json.loads(capsys.readouterr().out)
            assert dry["found"] == {"missing": 2, "extra": 1, "different": 1, "duplicate": 1}, dry
            assert {json.dumps(k["key"]) for k in dry["keys"] if k["kind"] == "extra"} == {'{"id": 1000}'}
            assert dry["plan"] == {"reread": 4, "delete": 1, "clear": 1} and "after" not in dry
            assert env.cdc("repair", "--table", name) == 0  # as a person types it
            out = capsys.readouterr().out
            assert "5 key(s) differ" in out and "after the repair: OK" in out, out
            later = env.transaction(f'UPDATE "{s}".fixme SET v = \'later\' WHERE id IN (3, 1000, 9)',
                                    f'INSERT INTO "{s}".fixme VALUES (1000, \'real\', 1)')
            if driver is None:
                env.replicate("fixme", later)
            eventually(lambda: equal(env, "fixme"), "the target equal to the source", 120, 1,
                       alive=None if driver is None else lambda: driver.poll() is None)
            env.assert_equal("fixme")
            capsys.readouterr()
            assert env.cdc("reconcile", "--deep", "--table", name) == 0, capsys.readouterr().out
        finally:
            if driver is not None:
                interrupt(driver)
    assert driver is None or driver.returncode == 0, (tmp_path / "driver.log").read_text()[-3000:]


def damaged_and_repaired(env, spark, capsys, table: str, t: str, new_row: str) -> None:
    """A stray writer's damage and live changes replicated, then a dry run that finds a key
    of each kind and a repair, as typed, after which the keys agree."""
    damage(spark, env, table)
    env.replicate(table, env.transaction(f"UPDATE {t} SET v = 'live' WHERE id IN (5, 7)",
                                         f"DELETE FROM {t} WHERE id = 8", f"INSERT INTO {t} VALUES {new_row}"))
    capsys.readouterr()
    assert env.cdc("repair", "--table", f"{env.schema}.{table}", "--dry-run", "--json") == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["found"] == {"missing": 2, "extra": 1, "different": 1, "duplicate": 1}, dry
    assert env.cdc("repair", "--table", f"{env.schema}.{table}") == 0
    out = capsys.readouterr().out
    assert "5 key(s) differ" in out and "after the repair: OK" in out, out


def test_repair_of_a_mariadb_table(it_mariadb, spark, capsys):
    """MariaDB: the compare reads the table in one consistent snapshot at its binary log
    position; the keys (one of them text with a quote) are read again through Debezium's
    incremental snapshot with a filter on them."""
    env = it_mariadb
    t, key = env.q("fixme"), ("id", "code")
    env.sql(f"CREATE TABLE {t} (id int, code varchar(8), v varchar(40), n decimal(10,2), PRIMARY KEY (id, code))")
    env.sql(f"INSERT INTO {t} SELECT seq, concat('k''', seq), concat('v', seq), seq FROM seq_1_to_100")
    name = env.register_table("fixme")
    assert env.cdc("register", "--table", name) == 0
    env.replicate("fixme", env.marker())
    damaged_and_repaired(env, spark, capsys, "fixme", t, "(200, 'new', 'new', 2)")
    env.replicate("fixme", env.transaction(f"UPDATE {t} SET v = 'later' WHERE id IN (3, 1000, 9)",
                                           f"INSERT INTO {t} VALUES (1000, 'real', 'real', 1)"))
    assert env.assert_equal("fixme", key) == 100 - 1 + 1 + 1
    assert env.cdc("reconcile", "--deep", "--table", name) == 0, capsys.readouterr().out


def test_repair_of_a_history_target_adds_versions_and_rewrites_none(it_env, spark, capsys):
    """History mode: the current versions are compared and repaired; an extra key's version
    and a doubled key's are closed, each read opens a new version, and the damaged version
    stays in the key's history, closed."""
    from tests.compare import differences, rows_by_key

    env, s = it_env, it_env.schema
    name = f"{s}.fixhist"
    env.sql(f'CREATE TABLE "{s}".fixhist (id int PRIMARY KEY, v text, n numeric(10,2))')
    env.sql(f'INSERT INTO "{s}".fixhist SELECT g, \'v\' || g, g FROM generate_series(1, 20) g')
    env.register_table("fixhist", mode="history")
    assert env.cdc("register", "--table", name) == 0
    env.replicate("fixhist")
    damaged_and_repaired(env, spark, capsys, "fixhist", env.q("fixhist"), "(200, 'new', 2)")
    versions: dict[int, list[dict]] = {}
    for r in sorted(env.target_records("fixhist"), key=lambda r: r["_cdc_valid_from"]):
        versions.setdefault(r["id"], []).append(r)
    current = [r for rs in versions.values() for r in rs if r["_cdc_current"]]
    assert not differences(env.source_rows("fixhist", ("id",)), rows_by_key(current, ("id",)))
    assert [(r["v"], r["_cdc_current"], r["_cdc_valid_to"] is None) for r in versions[10]] == [
        ("damaged", False, False), ("v10", True, True)]  # the damaged version kept, closed
    assert [r["_cdc_current"] for r in versions[1000]] == [False]  # the extra key's version closed
    assert [r["_cdc_current"] for r in versions[9]] == [False, False, True]  # both copies closed, one read
    assert [r["v"] for r in versions[3]] == ["v3"]  # the lost version read again
    env.replicate("fixhist", env.transaction(f'UPDATE "{s}".fixhist SET v = \'later\' WHERE id IN (3, 9)',
                                             f'INSERT INTO "{s}".fixhist VALUES (1000, \'real\', 1)'))
    assert env.cdc("reconcile", "--deep", "--table", name) == 0, capsys.readouterr().out
    assert [(r["v"], r["_cdc_current"]) for r in sorted(
        (r for r in env.target_records("fixhist") if r["id"] == 1000), key=lambda r: r["_cdc_valid_from"])] == [
        ("v6", False), ("real", True)]
