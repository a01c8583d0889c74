"""The consistent cut on the real stack: transfers between two tables of one source, an
Iceberg target keeping every version (checking, history mode) and a Delta one keeping
deleted rows marked (savings, soft_delete mode), one applied ahead of the other. The
latest commits break the invariant (a transfer debited and not yet credited); the cut `cdc
cut` publishes never does, read back through pyiceberg and delta-rs at the snapshot and the
version it names, and through Spark at the `cdc_consistent` tag and that version. A job
whose source sets `cut_every_s` moves the cut itself."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import _cleanup, postgres_env

TOTAL = 1000  # the balance of all accounts of both tables


@pytest.fixture(scope="module")
def bank(stack, settings, it_env, tmp_path_factory):
    """A source of its own, so that its cut covers this test's tables alone."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("cut"), it_env.source + "k")
    s = env.schema
    for t, sink, mode in (("checking", "iceberg", "history"), ("savings", "delta", "soft_delete")):
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, balance int NOT NULL)')
        env.register_table(t, sink=sink, mode=mode)
    env.sql(f'INSERT INTO "{s}".checking SELECT g, 100 FROM generate_series(1, 5) g')
    env.sql(f'INSERT INTO "{s}".savings SELECT g, 100 FROM generate_series(1, 5) g')
    assert env.cdc("register") == 0
    yield env
    _cleanup(env)


def cut(env, capsys) -> dict:
    capsys.readouterr()
    assert env.cdc("cut", "--json") == 0
    (found,) = json.loads(capsys.readouterr().out)["sources"]
    return found


def total_at(env, at: dict[str, int | None]) -> int:
    """The balance of both tables' live rows, checking read at its snapshot (pyiceberg, the
    current versions), savings at its version (delta-rs, the rows not marked deleted)."""
    from tests.compare import delta_records

    snapshot, version = at[f"{env.schema}.checking"], at[f"{env.schema}.savings"]
    checking = env.catalog.load_table(f"{env.schema}.checking")
    rows = [r for r in checking.scan(snapshot_id=snapshot).to_arrow().to_pylist()
            if r["_cdc_current"]] if snapshot is not None else []
    if version is not None:
        rows += [r for r in delta_records(env.delta_path("savings"), version) if not r["_cdc_deleted"]]
    return sum(r["balance"] for r in rows)


def latest(env) -> dict[str, int]:
    """Each table's newest commit: checking's snapshot, savings' version."""
    from deltalake import DeltaTable

    return {f"{env.schema}.checking": env.catalog.load_table(f"{env.schema}.checking").current_snapshot().snapshot_id,
            f"{env.schema}.savings": DeltaTable(str(env.delta_path("savings"))).version()}


def transfer(env, amount: int, debit: int, credit: int):
    s = env.schema
    return env.transaction(f'UPDATE "{s}".checking SET balance = balance - {amount} WHERE id = {debit}',
                           f'UPDATE "{s}".savings SET balance = balance + {amount} WHERE id = {credit}')


def test_the_cut_holds_every_transfer_whole_while_the_latest_snapshots_do_not(bank, spark, capsys):
    from cdc.sinks import delta

    env, s = bank, bank.schema
    names = [f"{s}.checking", f"{s}.savings"]
    assert env.cdc("run", "--available-now", "--table", names[0], "--table", names[1]) == 0
    first = cut(env, capsys)
    assert set(first["tables"]) == set(names) and not first["held"] and first["versions"] == [names[1]], first
    assert total_at(env, first["tables"]) == TOTAL
    env.wait_captured(transfer(env, 30, 1, 2))
    transfer(env, 5, 3, 3)
    marker = env.transaction(f'UPDATE "{s}".checking SET balance = balance + 100 WHERE id = 1',
                             f'DELETE FROM "{s}".savings WHERE id = 1')  # savings account 1 closed into checking
    env.replicate("checking", marker)  # one side of the three transactions applied, the other not
    assert total_at(env, latest(env)) == TOTAL - 35 + 100  # the latest commits break the invariant
    held = cut(env, capsys)
    assert total_at(env, held["tables"]) == TOTAL and held["tables"] == first["tables"]
    assert "change(s) of transaction" in held["held"][names[1]], held
    capsys.readouterr()
    assert env.cdc("status", "--json") == 0  # status says which table holds the cut
    rows = {r["table"]: r for r in json.loads(capsys.readouterr().out)["tables"]}
    assert rows[names[1]]["cut"]["holds"] == held["held"][names[1]] and rows[names[0]]["cut"]["holds"] is None
    assert rows[names[0]]["cut"]["snapshot_id"] == first["tables"][names[0]]
    assert rows[names[1]]["cut"]["snapshot_id"] == first["tables"][names[1]]  # the Delta version
    assert env.cdc("status") == 0
    assert f"holds its source's consistent cut (cdc cut): {held['held'][names[1]]}" in capsys.readouterr().out
    env.replicate("savings", marker)
    moved = cut(env, capsys)
    assert moved["transaction"] and moved["transaction"] != first["transaction"] and not moved["held"], moved
    assert moved["tables"] == latest(env) and moved["moved"] == [names[0]]  # a tag on the Iceberg table alone
    assert total_at(env, moved["tables"]) == TOTAL and moved["age_s"] is not None and moved["age_s"] >= 0
    assert env.cdc("status", "--json") == 0
    assert all(r["cut"]["holds"] is None for r in json.loads(capsys.readouterr().out)["tables"])
    tagged = {names[0]: spark.sql(f"SELECT id, balance FROM {env.settings.catalog.name}.{names[0]} "
                                  "VERSION AS OF 'cdc_consistent' WHERE _cdc_current").collect(),
              names[1]: spark.sql(f"SELECT id, balance FROM {delta.ref(env.delta_path('savings'))} "
                                  f"VERSION AS OF {moved['tables'][names[1]]} WHERE NOT _cdc_deleted").collect()}
    assert sum(r.balance for rows in tagged.values() for r in rows) == TOTAL
    assert {r.id: r.balance for r in tagged[names[0]]}[1] == 170 and {r.id: r.balance for r in tagged[names[1]]}[2] == 130
    assert 1 not in {r.id for r in tagged[names[1]]}
    capsys.readouterr()
    assert env.cdc("cut") == 0  # the text a person reads
    text = capsys.readouterr().out
    assert f"cut at transaction {moved['transaction']}" in text and names[0] in text
    assert f"version {moved['tables'][names[1]]}" in text
    # A job whose source sets `cut_every_s` moves the cut itself: at the end of an --available-now run.
    from cdc.report.cut import read_state
    from tests.conftest import cdc_main

    marker = transfer(env, 10, 4, 5)
    env.wait_captured(marker)
    doc = yaml.safe_load(env.config.read_text())
    doc["sources"][env.source]["cut_every_s"] = 60
    config = env.config.with_name("cut_every.yaml")
    config.write_text(yaml.safe_dump(doc))
    assert cdc_main(["--config", str(config), "run", "--available-now", "--table", names[0], "--table", names[1]]) == 0
    standing = read_state(env.settings, env.source)
    assert standing["transaction"] != moved["transaction"] and standing["tables"] == latest(env), standing
    assert total_at(env, standing["tables"]) == TOTAL
    assert env.catalog.load_table(names[0]).metadata.refs["cdc_consistent"].snapshot_id == standing["tables"][names[0]]
