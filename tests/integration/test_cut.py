"""The consistent cut on the real stack: transfers between two tables of one source, an
Iceberg target keeping every version (checking, history mode) and a Delta one keeping
deleted rows marked (savings, soft_delete mode), one applied ahead of the other. The
latest commits break the invariant (a transfer debited and not yet credited); the cut `cdc
cut` publishes never does, read back through pyiceberg and delta-rs at the snapshot and the
version it names, and through Spark at the `cdc_consistent` tag and that version. A job
whose source sets `cut_every_s` moves the cut itself."""
from __future__ import annotations

import json
from pathlib import Path

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


# ---- one table's trouble, a re-created target and a quiet source: a pair of Iceberg tables ----


@pytest.fixture(scope="module")
def pair(stack, settings, it_env, tmp_path_factory):
    """A source of its own with two Iceberg tables, registered and applied."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("cutp"), it_env.source + "p")
    for t in ("pa", "pb"):
        env.sql(f'CREATE TABLE "{env.schema}".{t} (id int PRIMARY KEY, v int NOT NULL)')
        env.sql(f'INSERT INTO "{env.schema}".{t} SELECT g, 0 FROM generate_series(1, 3) g')
        env.register_table(t)
    assert env.cdc("register") == 0
    env.replicate(("pa", "pb"))
    yield env
    _cleanup(env)


def both_in_the_cut(env, capsys, step: int) -> dict:
    """A transaction changing both tables, applied to both; the cut then holds it, each
    table's tag on its snapshot there."""
    s = env.schema
    env.replicate(("pa", "pb"), env.transaction(f'UPDATE "{s}".pa SET v = {step} WHERE id = 1',
                                                f'UPDATE "{s}".pb SET v = {step} WHERE id = 1'))
    found = cut(env, capsys)
    assert set(found["tables"]) == {f"{s}.pa", f"{s}.pb"} and not found["held"] and not found["left_out"], found
    assert tags_exist(env, found) == found["tables"]
    return found


def tags_exist(env, found: dict) -> dict[str, int]:
    """Each table's `cdc_consistent` tag, asserted on a snapshot its table has."""
    tags = {}
    for name in found["tables"]:
        table = env.catalog.load_table(name)
        ref = table.metadata.refs.get("cdc_consistent")
        if ref is not None:
            assert ref.snapshot_id in {snap.snapshot_id for snap in table.snapshots()}, (name, ref)
            tags[name] = ref.snapshot_id
    return tags


def test_status_and_cut_go_on_for_the_others_when_a_target_s_metadata_file_is_missing(pair, capsys):
    """A target's current metadata file moved away: `status`, `status --check`, `cut` and
    `reconcile` report that table's error and what to do, the other table as usual, with no
    traceback; `status --check`, `cut` and `reconcile` exit 3 (a table failed). Once the file
    is back, all is as before."""
    from urllib.parse import urlparse

    env, s = pair, pair.schema
    both_in_the_cut(env, capsys, 1)
    metadata = Path(urlparse(env.catalog.load_table(f"{s}.pb").metadata_location).path)
    away = metadata.with_name(metadata.name + ".away")
    metadata.rename(away)
    try:
        capsys.readouterr()
        assert env.cdc("status", "--json") == 0
        out = capsys.readouterr()
        rows = {r["table"]: r for r in json.loads(out.out)["tables"]}
        assert rows[f"{s}.pb"]["state"] == "unreadable" and "Traceback" not in out.err
        assert "cannot be read" in rows[f"{s}.pb"]["unreadable"] and metadata.name in rows[f"{s}.pb"]["unreadable"]
        assert f"cdc register --table {s}.pb" in rows[f"{s}.pb"]["remedy"]
        assert rows[f"{s}.pa"]["registered"] and rows[f"{s}.pa"]["lag"] == 0
        assert env.cdc("status", "--check") == 3
        out = capsys.readouterr()
        assert f"check: table {s}.pb: its target" in out.out and f"{s}.pa" in out.out and "Traceback" not in out.err
        assert env.cdc("cut", "--json") == 3
        out = capsys.readouterr()
        (found,) = json.loads(out.out)["sources"]
        assert "cannot be read" in found["left_out"][f"{s}.pb"] and f"{s}.pa" in found["tables"], found
        assert f"{s}.pb" not in found["tables"] and "Traceback" not in out.err
        assert f"the cut left out table(s) it could not read: {s}.pb" in out.err
        assert env.cdc("reconcile", "--json", "--wait", "30") == 3
        out = capsys.readouterr()
        rows = {r["table"]: r for r in json.loads(out.out)["tables"]}
        assert rows[f"{s}.pb"]["status"] == "UNREADABLE" and rows[f"{s}.pa"]["status"] == "OK", rows
        assert "Traceback" not in out.err
    finally:
        away.rename(metadata)
    assert env.cdc("status", "--check") == 0
    both_in_the_cut(env, capsys, 2)  # the table rejoins the cut at its next transaction


def test_the_cut_after_a_target_is_re_created_names_and_tags_only_snapshots_that_exist(pair, capsys):
    """A target dropped and re-created by `register` (the remedy of a failed table): the cut
    no longer hands out the old target's snapshot nor tags it, the other table's tag stays,
    and the new target rejoins the cut at its next transaction, from its own history."""
    env, s = pair, pair.schema
    before = both_in_the_cut(env, capsys, 3)
    for ident in env.catalog.list_tables(s):  # the target and its __cdc_* tables, as the remedy says
        if ident[-1] == "pb" or ident[-1].startswith("pb__cdc"):
            env.catalog.purge_table(ident)
    assert env.cdc("register", "--table", f"{s}.pb") == 0
    capsys.readouterr()
    assert env.cdc("cut", "--json") == 0
    out = capsys.readouterr()
    (found,) = json.loads(out.out)["sources"]
    assert "Traceback" not in out.err and found["tables"] == {f"{s}.pa": before["tables"][f"{s}.pa"]}, found
    assert "re-created" in found["left_out"][f"{s}.pb"], found
    assert tags_exist(env, {"tables": {f"{s}.pa": 0, f"{s}.pb": 0}}) == {f"{s}.pa": before["tables"][f"{s}.pa"]}
    env.replicate("pb")  # the snapshot `register` asked for
    after = both_in_the_cut(env, capsys, 4)
    new = {snap.snapshot_id for snap in env.catalog.load_table(f"{s}.pb").snapshots()}
    assert after["tables"][f"{s}.pb"] in new and after["transaction"] != before["transaction"]


def test_a_quiet_source_s_cut_is_current(pair, capsys):
    """Once the cut holds every transaction there is, its age is 0 however long the source
    stays quiet; a transaction not in it yet makes it the age of that transaction."""
    import time

    env, s = pair, pair.schema
    both_in_the_cut(env, capsys, 5)
    env.wait_captured(env.marker())  # a transaction that changes no table of the cut: it moves to it
    time.sleep(3)
    quiet = cut(env, capsys)
    assert quiet["age_s"] == 0 and not quiet["held"], quiet
    written = time.time()
    env.wait_captured(env.transaction(f'UPDATE "{s}".pa SET v = 6 WHERE id = 2'))  # not applied yet
    time.sleep(2)
    behind = cut(env, capsys)
    assert behind["transaction"] == quiet["transaction"] and f"{s}.pa" in behind["held"], behind
    assert 2 <= behind["age_s"] <= time.time() - written + 2, behind
    env.replicate("pa")
    assert cut(env, capsys)["age_s"] == 0
