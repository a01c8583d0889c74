"""`spark.shared_query` on the real stack: one query reads the topics of several tables and
applies only those with changes, each commit carrying its own table's offsets; a table
that fails in it leaves it (and is given up on its own) while the others go on, and joins
it again once it runs."""
from __future__ import annotations

import json
import re

import yaml
from confluent_kafka import Producer

from cdc.config.clients import kafka_access
from cdc.control.commits import parse_offsets
from tests.conftest import end_offset, interrupt, start_driver, tail, wait_or_kill
from tests.eventually import eventually


def shared_config(env, tmp_path):
    """The env's cdc.yaml with `spark.shared_query: true`."""
    doc = yaml.safe_load(env.config.read_text())
    doc["spark"]["shared_query"] = True
    config = tmp_path / "cdc.yaml"
    config.write_text(yaml.safe_dump(doc))
    return config


def create(env, tables, **options):
    from cdc.config import load_tables
    from cdc.register.registrar import register

    for t in tables:
        env.sql(f'CREATE TABLE "{env.schema}".{t} (id int PRIMARY KEY, v text)')
        env.sql(f'INSERT INTO "{env.schema}".{t} SELECT g, \'v\' || g FROM generate_series(1, 20) g')
        env.register_table(t, options=options.get(t))
    register(env.settings, [load_tables(env.settings, f"{env.schema}.{t}")[0] for t in tables])


def change(env, table: str, i: int) -> None:
    env.sql(f'UPDATE "{env.schema}".{table} SET v = \'u{i}\' WHERE id <= {i}')
    env.sql(f'DELETE FROM "{env.schema}".{table} WHERE id = {20 - i}')
    env.sql(f'INSERT INTO "{env.schema}".{table} VALUES ({100 + i}, \'n{i}\')')


def wait_line(proc, log_path, text: str, timeout_s: float = 300, times: int = 1) -> None:
    """Until the driver's log holds `text` (`times` times)."""
    eventually(lambda: log_path.read_text().count(text) >= times, repr(text), timeout_s,
               alive=lambda: proc.poll() is None, detail=lambda: tail(log_path))


def wait_equal(env, tables, proc, log_path, timeout_s: float = 300) -> None:
    last = [""]

    def equal() -> bool:
        try:
            for t in tables:
                env.assert_equal(t)
            return True
        except AssertionError as e:
            last[0] = str(e)
            return False

    eventually(equal, "equal targets", timeout_s, 1, alive=lambda: proc.poll() is None,
               detail=lambda: f"{last[0]}\n{tail(log_path)}")


def test_one_query_applies_only_the_tables_with_changes_each_with_its_offsets(it_env, tmp_path, capsys):
    from cdc.cli.main import main as cdc_main

    env, tables = it_env, ("sh_a", "sh_b", "sh_c")
    create(env, tables)
    config = shared_config(env, tmp_path)
    shared_dir = env.settings.path(env.settings.spark.checkpoint_dir) / "_shared"
    before = set(shared_dir.glob("*"))  # a killed job's, of other tables, stays until they run again
    argv = ["--config", str(config), "run", "--available-now", "--table", f"{env.schema}.sh_*"]
    capsys.readouterr()
    assert cdc_main(argv) == 0  # in this process: the run's SparkSession
    assert "one query reads the topics of 3 tables" in capsys.readouterr().err
    commits = {t: len(env.summaries(t)) for t in tables}
    marker = env.transaction(f'UPDATE "{env.schema}".sh_b SET v = \'x\' WHERE id = 3')
    env.wait_captured(marker)
    assert cdc_main(argv) == 0
    for t in tables:
        env.assert_equal(t)
        topic = f"{env.source}.{env.schema}.{t}"
        assert parse_offsets(env.summaries(t)[-1])[topic][0] == end_offset(env, topic)
    # the quiet tables were not committed to again; the one with a change once
    assert {t: len(env.summaries(t)) - commits[t] for t in tables} == {"sh_a": 0, "sh_b": 1, "sh_c": 0}
    # each start reads from the tables' committed offsets: its checkpoint goes with it
    assert set(shared_dir.glob("*")) <= before


def test_a_failing_table_leaves_the_shared_query_and_the_others_go_on(it_env, tmp_path):
    """Continuous: the poisoned table fails in the shared batch, is seen to, leaves the
    query and is given up on its own; the others are applied in that batch and after it;
    a table with its own batch sizes runs in a query of its own throughout."""
    env = it_env
    create(env, ("sq_a", "sq_b", "sq_c", "sq_d"), sq_b={"on_error": "fail"}, sq_d={"max_offsets_per_trigger": 500})
    config = shared_config(env, tmp_path)
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        proc = start_driver(env, "sq_*", log, config=config)
    try:
        wait_equal(env, ("sq_a", "sq_b", "sq_c", "sq_d"), proc, log_path)
        producer = Producer(kafka_access(env.settings).client())
        producer.produce(f"{env.source}.{env.schema}.sq_b", key=b'{"id": 1}', value=b"not json")
        assert producer.flush(30) == 0
        for i, t in enumerate(("sq_a", "sq_b", "sq_c", "sq_d")):
            change(env, t, i + 1)
        env.wait_captured(env.marker())
        wait_equal(env, ("sq_a", "sq_c", "sq_d"), proc, log_path)
        wait_line(proc, log_path, f"{env.schema}.sq_b: failed: ")
        for i, t in enumerate(("sq_a", "sq_c")):  # the shared query goes on without it
            change(env, t, i + 10)
        env.wait_captured(env.marker())
        wait_equal(env, ("sq_a", "sq_c"), proc, log_path)
    finally:
        interrupt(proc)
        wait_or_kill(proc, 60)
    text = log_path.read_text()
    assert "one query reads the topics of 3 tables" in text, tail(log_path)  # not sq_d: its own batch sizes
    assert "leaves the shared query" in text and "sq_b" in text
    assert proc.returncode != 0  # a table was given up
    topic = f"{env.source}.{env.schema}.sq_b"
    assert parse_offsets(env.summaries("sq_b")[-1])[topic][0] < end_offset(env, topic)  # nothing past the bad record


def test_a_table_failing_for_a_while_leaves_the_shared_query_and_joins_it_again(it_env, tmp_path):
    """Continuous: one table's data files cannot be read for a while; it leaves the shared
    query, retries in a query of its own while the other goes on, and once it runs again it
    joins the shared query, which applies its later changes."""
    from cdc.control import jobstate

    env, tables = it_env, ("sj_a", "sj_b")
    create(env, tables)
    config = shared_config(env, tmp_path)
    log_path = tmp_path / "driver.log"
    data = env.settings.path(env.settings.catalog.warehouse) / env.schema / "sj_b" / "data"
    away = data.with_name("data.away")
    with open(log_path, "w") as log:
        proc = start_driver(env, "sj_*", log, config=config)
    try:
        wait_equal(env, tables, proc, log_path)
        data.rename(away)
        data.write_text("")  # a file where the directory was: no data file can be read
        try:
            for i, t in enumerate(tables):
                change(env, t, i + 1)
            env.wait_captured(env.marker())
            wait_line(proc, log_path, f"{env.schema}.sj_b: leaves the shared query")
            wait_equal(env, ("sj_a",), proc, log_path)
            wait_line(proc, log_path, "retrying in")  # sj_b's backoff, before a query of its own
        finally:
            data.unlink()
            away.rename(data)
        wait_line(proc, log_path, f"{env.schema}.sj_b: joins the shared query shared-1s again")
        wait_equal(env, tables, proc, log_path)
        assert jobstate.read(env.settings.state_dir, f"{env.schema}.sj_b").get("query") == "shared-1s"
        commits = len(env.summaries("sj_b"))
        for i, t in enumerate(tables):
            change(env, t, i + 5)
        env.wait_captured(env.marker())
        wait_equal(env, tables, proc, log_path)
        assert len(env.summaries("sj_b")) > commits
    finally:
        interrupt(proc)
        wait_or_kill(proc, 60)
    text = log_path.read_text()
    assert proc.returncode == 0, tail(log_path)  # no table given up
    assert "retrying in" in text and text.count("joins the shared query") == 1, tail(log_path)
    assert not (env.settings.path(env.settings.spark.checkpoint_dir) / f"{env.schema}.sj_b").exists()


def test_one_table_is_fixed_while_the_others_run(it_env, tmp_path, capsys):
    """Continuous: a table stops on a type change no target column can take; its remedy is
    in the log and `status --json`. Its target re-created by `register` while the job runs
    starts after the topic's old records: the job hands the table over to `register` and
    takes it back as soon as its target is there; then
    `bootstrap` of it is handed over by the running job and taken back after, and another
    table removed by `tables remove` is run no more. The other tables are applied throughout."""
    env, s, tables = it_env, it_env.schema, ("fx_a", "fx_b", "fx_c")
    create(env, tables)
    config = shared_config(env, tmp_path)
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        proc = start_driver(env, "fx_*", log, config=config)
    try:
        wait_equal(env, tables, proc, log_path)
        env.sql(f'ALTER TABLE "{s}".fx_b ALTER COLUMN v TYPE integer USING length(v)')
        env.sql(f'INSERT INTO "{s}".fx_b VALUES (500, 5)')
        change(env, "fx_a", 1)
        env.wait_captured(env.marker())
        wait_line(proc, log_path, f"{s}.fx_b: failed: ")
        wait_equal(env, ("fx_a", "fx_c"), proc, log_path)
        capsys.readouterr()
        env.cdc("status", "--json", "--table", f"{s}.fx_b")
        job = json.loads(capsys.readouterr().out)["tables"][0]["job"]
        assert job["state"] == "failed" and "not a safe widening" in job["error"], job
        assert f"`cdc bootstrap --table {s}.fx_b`" in job["remedy"] and "->" not in job["error"], job
        assert "; to do: nothing of this batch was committed" in log_path.read_text()

        for ident in env.catalog.list_tables(s):  # the target and its __cdc_* tables, as the remedy says
            if ident[-1] == "fx_b" or ident[-1].startswith("fx_b__cdc"):
                env.catalog.purge_table(ident)
        assert env.cdc("register", "--table", f"{s}.fx_b") == 0  # the job hands it over meanwhile
        assert "already holds records; the new target starts after them" in capsys.readouterr().out
        wait_line(proc, log_path, f"{s}.fx_b: taken back")  # at once, not FAILED_RETRY_S after it failed
        wait_equal(env, tables, proc, log_path)  # the snapshot register asked for, not the old records

        env.sql(f'UPDATE "{s}".fx_b SET v = v + 1 WHERE id <= 5')  # v is an integer now
        change(env, "fx_c", 3)
        assert env.cdc("bootstrap", "--table", f"{s}.fx_b", "--yes") == 0  # the job runs it: handed over
        wait_line(proc, log_path, f"{s}.fx_b: taken back", times=2)
        env.sql(f'DELETE FROM "{s}".fx_b WHERE id = 6')
        change(env, "fx_a", 5)
        env.wait_captured(env.marker())
        wait_equal(env, tables, proc, log_path)

        assert env.cdc("tables", "remove", f"{s}.fx_c") == 0  # handed over, then its registration is gone
        wait_line(proc, log_path, f"{s}.fx_c: no longer registered: the job runs it no more")
        change(env, "fx_a", 7)
        env.wait_captured(env.marker())
        wait_equal(env, ("fx_a", "fx_b"), proc, log_path)
    finally:
        interrupt(proc)
        wait_or_kill(proc, 60)
    text = log_path.read_text()
    assert proc.returncode == 0, tail(log_path)  # every table runs at the end
    assert f"{s}.fx_b: handed over to process" in text and text.count("failed: ") == 1, tail(log_path)
    assert f"{s}.fx_b: trying the failed table again" not in text, tail(log_path)


def test_small_batches_of_several_tables_are_written_by_one_job_each_table_committed_alone(it_env, tmp_path):
    """Continuous: the tables' small batches of a shared query are decoded and written by one
    Spark job, then each table is committed with its own offsets. A table whose part needs a
    query (a bad record for its dead letters, a truncate, a key change) takes a batch of its
    own and the others still share theirs; every target ends equal to its source."""
    env, s, tables = it_env, it_env.schema, ("tg_a", "tg_b", "tg_c", "tg_d")
    create(env, tables)
    config = shared_config(env, tmp_path)
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        proc = start_driver(env, "tg_*", log, config=config)
    try:
        wait_equal(env, tables, proc, log_path)  # a table's first batch learns its records' schema alone
        env.transaction(*[f'UPDATE "{s}".{t} SET v = \'one\' WHERE id <= 5' for t in tables],
                        *[f'DELETE FROM "{s}".{t} WHERE id = 7' for t in tables],
                        *[f'INSERT INTO "{s}".{t} VALUES (50, \'fifty\')' for t in tables])
        env.wait_captured(env.marker())
        wait_equal(env, tables, proc, log_path)
        wait_line(proc, log_path, "tables' batches decoded and written by one job")

        producer = Producer(kafka_access(env.settings).client())
        producer.produce(f"{env.source}.{s}.tg_a", key=b'{"id": 1}', value=b"not json")  # a dead letter
        assert producer.flush(30) == 0
        env.transaction(f'TRUNCATE "{s}".tg_b', f'INSERT INTO "{s}".tg_b VALUES (1, \'after\')',
                        f'UPDATE "{s}".tg_c SET id = 60 WHERE id = 2',  # a key change
                        f'UPDATE "{s}".tg_d SET v = \'two\' WHERE id > 10', f'DELETE FROM "{s}".tg_d WHERE id = 3')
        env.wait_captured(env.marker())
        wait_equal(env, tables, proc, log_path)
        env.transaction(*[f'UPDATE "{s}".{t} SET v = \'three\' WHERE id = 1' for t in tables])
        env.wait_captured(env.marker())
        wait_equal(env, tables, proc, log_path)
    finally:
        interrupt(proc)
        wait_or_kill(proc, 60)
    text = log_path.read_text()
    assert proc.returncode == 0, tail(log_path)
    assert len(env.catalog.load_table(f"{s}.tg_a__cdc_dead_letters").scan().to_arrow()) == 1
    for t in tables:
        topic = f"{env.source}.{s}.{t}"
        assert parse_offsets(env.summaries(t)[-1])[topic][0] == end_offset(env, topic)
    shared = [int(n) for n in re.findall(r"(\d+) tables' batches decoded and written by one job", text)]
    assert shared and min(shared) > 1, tail(log_path)
