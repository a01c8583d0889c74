"""A continuous `cdc run` of every table follows the registrations: a table registered
while it runs is applied without a restart, and one whose registration goes is stopped,
its later changes left out of its target. Rows are read back through pyiceberg."""
from __future__ import annotations

import subprocess
import sys

import pytest

from cdc.control import jobstate
from tests.compare import differences, rows_by_key
from tests.conftest import _cleanup, interrupt, postgres_env, tail
from tests.eventually import eventually


@pytest.fixture(scope="module")
def fenv(stack, spark, settings, it_env, tmp_path_factory):
    """A source of its own: the job runs every table of its tables directory, and no other."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("follow"), it_env.source + "f")
    yield env
    _cleanup(env)


def same(env, table: str) -> bool:
    """Whether the target holds the source's rows, row for row (read through pyiceberg)."""
    try:
        target = env.target_records(table)
    except Exception:  # noqa: BLE001 - its target not there yet
        return False
    return not differences(env.source_rows(table, ("id",)), rows_by_key(target, ("id",)))


def target_ids(env, table: str) -> set[int]:
    return {r["id"] for r in env.target_records(table)}


def test_a_table_registered_beside_a_running_job_is_applied_and_one_removed_is_stopped(fenv, tmp_path):
    env, s = fenv, fenv.schema
    env.sql(f'CREATE TABLE "{s}".first (id int PRIMARY KEY, v text)')
    env.sql(f'INSERT INTO "{s}".first SELECT g, \'v\' || g FROM generate_series(1, 10) g')
    env.register_table("first")
    assert env.cdc("register") == 0
    log = tmp_path / "run.log"
    with open(log, "w") as out:  # every table: no --table
        job = subprocess.Popen([sys.executable, "-m", "cdc.cli.main", "--config", str(env.config), "run"],
                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(check, what: str, timeout_s: float = 180):
        return eventually(check, what, timeout_s, 0.5, alive=lambda: job.poll() is None,
                          detail=lambda: tail(log))

    try:
        wait(lambda: same(env, "first"), "the first table applied")

        # Registered while the job runs: created, registered, changed after.
        env.sql(f'CREATE TABLE "{s}".later (id int PRIMARY KEY, v text)')
        env.sql(f'INSERT INTO "{s}".later SELECT g, \'v\' || g FROM generate_series(1, 20) g')
        later = env.register_table("later")
        assert env.cdc("register", "--table", later) == 0
        env.transaction(f'INSERT INTO "{s}".later SELECT g, \'new\' FROM generate_series(21, 30) g',
                        f'UPDATE "{s}".later SET v = \'changed\' WHERE id <= 5',
                        f'DELETE FROM "{s}".later WHERE id = 7')
        wait(lambda: same(env, "later"), "the table registered beside the job applied, without a restart")
        assert len(env.target_records("later")) == 29
        assert jobstate.read(env.settings.state_dir, later)["state"] == jobstate.RUNNING
        assert f"{later}: registered: the job starts it" in log.read_text()

        # Its registration gone (the file removed): the job stops it; the other table goes on.
        (env.settings.path(env.settings.tables_dir) / f"{later}.yaml").unlink()
        wait(lambda: f"{later}: no longer registered: the job runs it no more" in log.read_text(),
             "the removed table stopped")
        env.transaction(f'INSERT INTO "{s}".later VALUES (100, \'after\')',  # still captured: the connector
                        f'INSERT INTO "{s}".first VALUES (100, \'after\')')  # was not told
        env.wait_captured(env.marker())
        wait(lambda: 100 in target_ids(env, "first"), "the other table's change applied")
        env.sql(f'INSERT INTO "{s}".first VALUES (101, \'after\')')
        wait(lambda: 101 in target_ids(env, "first"), "the other table's next change applied")
        assert 100 not in target_ids(env, "later")  # no longer run
        assert job.poll() is None
    finally:
        interrupt(job)
    out = log.read_text()
    assert job.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
