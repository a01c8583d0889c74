"""Exactly once against any second writer: two drivers of the same tables, each with a state
directory of its own (a failover that left the old driver running on another host), under
live changes, and a target rolled back under its running job. Each commit checks, as it
commits, that the target's last offsets are those its batch started from (jvm/direct
OffsetsCheck), so no change is applied twice, no commit's offsets go behind the one before,
and a rollback stops the table with the replay that repairs it instead of a silent gap."""
from __future__ import annotations

import json
import re
import threading
import time

import psycopg
import yaml

from cdc.control.commits import OFFSETS, OFFSETS_BEFORE
from tests.conftest import end_offset, interrupt, start_driver, tail
from tests.eventually import eventually


class Changes:
    """Transactions against the tables from a thread of its own: each updates a row of every
    table, and inserts or deletes another."""

    def __init__(self, env, tables: tuple[str, ...]):
        self.env, self.tables, self.done, self.count = env, tables, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            with psycopg.connect(self.env.dsn, autocommit=True) as conn:
                while not self.done.is_set():
                    n = self.count
                    with conn.transaction():
                        for t in self.tables:
                            conn.execute(f"UPDATE {self.env.q(t)} SET v = %s, n = n + 1 WHERE id = %s",
                                         (f"w{n}", n % 50 + 1))
                            if n % 2:
                                conn.execute(f"INSERT INTO {self.env.q(t)} VALUES (%s, 'new', 0)", (1000 + n,))
                            elif n > 4:
                                conn.execute(f"DELETE FROM {self.env.q(t)} WHERE id = %s", (1000 + n - 3,))
                    self.count += 1
                    time.sleep(0.02)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            self.error = e

    def __enter__(self) -> "Changes":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(30)


def table_of(env, table: str, rows: int = 50) -> str:
    env.sql(f"CREATE TABLE {env.q(table)} (id int PRIMARY KEY, v text, n int)")
    env.sql(f"INSERT INTO {env.q(table)} VALUES " + ", ".join(f"({i}, 'v{i}', {i})" for i in range(1, rows + 1)))
    return table


def ancestry(env, table: str) -> list[dict]:
    """The summaries of the target's current snapshot and its ancestors, oldest first."""
    target = env.catalog.load_table(f"{env.schema}.{table}")
    by_id = {s.snapshot_id: s for s in target.snapshots()}
    out, at = [], target.current_snapshot()
    while at is not None:
        out.append(at.summary.additional_properties)
        at = by_id.get(at.parent_snapshot_id)
    return out[::-1]


def assert_each_change_applied_once(env, table: str) -> set[str]:
    """Each commit with offsets starts where the one before it ended and never goes behind it;
    returns the jobs that committed."""
    commits = [s for s in ancestry(env, table) if OFFSETS in s]
    for previous, commit in zip(commits, commits[1:]):
        assert commit.get(OFFSETS_BEFORE) == previous[OFFSETS], (previous, commit)
        ends, starts = json.loads(commit[OFFSETS]), json.loads(previous[OFFSETS])
        for topic, parts in starts.items():
            assert all(ends[topic][p] >= o for p, o in parts.items()), (previous, commit)
    return {s["cdc.job"] for s in commits}


def caught_up(env, table: str) -> bool:
    topic = f"{env.source}.{env.schema}.{table}"
    offsets = json.loads(ancestry(env, table)[-1].get(OFFSETS, "{}")).get(topic, {})
    return offsets.get("0", -1) >= end_offset(env, topic)


def holds(env, table: str, key: int, value: str) -> bool:
    """Whether the target's row `key` has `value` (read by the second reader)."""
    return any(r["id"] == key and r["v"] == value for r in env.target_records(table))


def test_two_drivers_of_one_table_apply_each_change_once(it_env, tmp_path):
    env = it_env
    tables = (table_of(env, "twice_upsert"), table_of(env, "twice_history"))
    env.register_table(tables[0])
    env.register_table(tables[1], mode="history")
    assert env.cdc("register") == 0
    env.replicate(tables)
    # A second driver: the same tables and catalog, a state directory and checkpoints of its own.
    other = yaml.safe_load(env.config.read_text())
    other["stack"]["state_dir"] = str(tmp_path / "state")
    other["spark"]["checkpoint_dir"] = str(tmp_path / "checkpoints")
    (tmp_path / "cdc.yaml").write_text(yaml.safe_dump(other))
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    with open(logs[0], "w") as first_log, open(logs[1], "w") as second_log, Changes(env, tables) as changes:
        drivers = [start_driver(env, "twice_*", first_log),
                   start_driver(env, "twice_*", second_log, config=tmp_path / "cdc.yaml")]

        def alive() -> bool:
            return all(d.poll() is None for d in drivers) and changes.error is None

        def lost() -> bool:
            return any("found the table moved under it" in p.read_text(errors="replace") for p in logs)

        try:
            eventually(lambda: changes.count >= 150 and lost(), "a commit losing to the other driver's", 240, 0.5,
                       alive=alive)
            changes.done.set()
            changes.thread.join(30)
            env.wait_captured(env.marker())  # every change in Kafka before the ends are compared
            for t in tables:
                eventually(lambda: caught_up(env, t), f"{t} caught up", 120, 0.5, alive=alive)
        finally:
            for d in drivers:
                interrupt(d)
    assert changes.error is None, changes.error
    assert "Traceback" not in "".join(p.read_text(errors="replace") for p in logs), tail(logs[0]) + tail(logs[1])
    env.assert_equal(tables[0])
    for t in tables:
        jobs = assert_each_change_applied_once(env, t)
        assert len({j.split("@")[1] for j in jobs if "@" in j}) >= 2, f"one driver alone committed to {t}: {jobs}"
    versions = env.target_records(tables[1])
    positions = [(r["id"], r["_cdc_position"]) for r in versions]
    assert len(positions) == len(set(positions)), "a change was applied twice to the history target"
    current = {r["id"]: (r["v"], r["n"]) for r in versions if r["_cdc_current"]}
    assert current == {k[0]: (r["v"], r["n"]) for k, r in env.source_rows(tables[1], ("id",)).items()}


def test_a_target_rolled_back_under_its_running_job_stops_it_until_replayed(it_env, spark, tmp_path, capsys):
    env = it_env
    table = table_of(env, "rolled_live")
    name = env.register_table(table)
    assert env.cdc("register", "--table", name) == 0
    env.replicate(table)
    first = env.catalog.load_table(f"{env.schema}.{table}").current_snapshot().snapshot_id
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        driver = start_driver(env, table, log)
        try:
            for n in range(3):
                env.sql(f"UPDATE {env.q(table)} SET v = 'before rollback {n}' WHERE id = {n + 1}")
                eventually(lambda: holds(env, table, n + 1, f"before rollback {n}"), "the job applying the change",
                           120, 0.2, alive=lambda: driver.poll() is None)
            spark.sql(f"CALL {env.settings.catalog.name}.system.rollback_to_snapshot("
                      f"'{env.schema}.{table}', {first})")
            env.sql(f"UPDATE {env.q(table)} SET v = 'after rollback' WHERE id = 10")
            eventually(lambda: "cdc replay --table" in log_path.read_text(errors="replace"),
                       "the job stopping the table with the replay that repairs it", 120, 0.2)
            assert env.catalog.load_table(f"{env.schema}.{table}").current_snapshot().snapshot_id == first, \
                "a commit landed on top of the rolled-back target"
        finally:
            interrupt(driver)
    text = log_path.read_text(errors="replace")
    assert "rolled back or lost commits" in text, tail(log_path)
    window = re.search(r"--from-offsets '([^']+)'", text).group(1)
    capsys.readouterr()
    assert env.cdc("replay", "--table", name, "--from-offsets", window) == 0
    env.assert_equal(table)
    assert_each_change_applied_once(env, table)
