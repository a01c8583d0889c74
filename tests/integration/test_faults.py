"""Faults on the real stack: the driver killed at exact crash points, a lost checkpoint,
a rolled-back table, a retention gap. The target must equal the source with no key twice,
and offsets must never advance without their data. The exactly-once tests run against
both sinks (Iceberg, and Delta Lake with its idempotent-write markers); the Delta variants
of the kill before the commit and of the replay are `long` (`make test-long`)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from cdc.control.commits import parse_offsets
from cdc.control.faults import ENV as CRASH_ENV
from tests.compare import assert_equal
from tests.eventually import eventually


def cdc_process(env, table: str, crash: str | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """`cdc run --available-now` as its own driver process (so it can be killed)."""
    extra = {CRASH_ENV: crash} if crash else {}
    return subprocess.run([sys.executable, "-m", "cdc.cli.main", "--config", str(env.config), "run",
                           "--available-now", "--table", f"{env.schema}.{table}"],
                          env={**os.environ, **extra}, capture_output=True, text=True, timeout=timeout)


def offsets_history(env, table: str) -> list[int]:
    """Committed end offset of partition 0, commit by commit (data commits only)."""
    topic = f"{env.source}.{env.schema}.{table}"
    return [parse_offsets(s)[topic][0] for s in env.summaries(table) if topic in parse_offsets(s)]


EXACTLY_ONCE = ("crash_a", "crash_b", "lost_cp", "rolled", "replayed")
TABLE_OF = {  # the table of each test on a Delta target
    "test_driver_killed_before_the_merge": "crash_a", "test_bootstrap_and_maintenance_of_a_delta_target_keep_it_exact":
    "crash_a", "test_driver_killed_after_the_table_commit_before_the_checkpoint_commit": "crash_b",
    "test_checkpoint_deleted_resumes_from_the_table": "lost_cp",
    "test_table_rolled_back_behind_its_checkpoint_stops_the_job": "rolled",
    "test_replay_from_earliest_keeps_the_table_exact": "replayed"}


def create_tables(env, tables):
    from cdc.config import load_tables
    from cdc.register.registrar import register

    s = env.schema
    for t in tables:
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, v text, n numeric(10,2))')
        env.sql(f'INSERT INTO "{s}".{t} SELECT g, \'v\' || g, g FROM generate_series(1, 50) g')
        # small batches for the replayed table, so a replay crosses many batch boundaries
        # (fewer on Delta, whose commits of a few rows cost more)
        size = 12 if env.sink == "iceberg" else 20
        env.register_table(t, options={"max_offsets_per_trigger": size} if t == "replayed" else None)
    register(env.settings, [load_tables(env.settings, f"{s}.{t}")[0] for t in tables])  # one snapshot for all
    for t in tables:
        env.replicate(t)
    return env


@pytest.fixture(scope="module")
def fenv(it_env):
    return create_tables(it_env, EXACTLY_ONCE + ("expired", "recreated"))


@pytest.fixture(scope="module")
def denv(it_delta, request):
    """The Delta tables of the run's selected tests alone (a Delta table costs seconds to fill)."""
    used = {TABLE_OF[item.originalname] for item in request.session.items
            if item.module is request.module and item.originalname in TABLE_OF
            and ("denv" in item.fixturenames or getattr(item, "callspec", None) is not None
                 and item.callspec.params.get("xenv") == "delta")}
    return create_tables(it_delta, tuple(t for t in EXACTLY_ONCE if t in used))


@pytest.fixture(params=["iceberg", "delta"])
def xenv(request):
    """The exactly-once tests' source, with targets of each sink."""
    return request.getfixturevalue("fenv" if request.param == "iceberg" else "denv")


def churn(env, table: str) -> int:
    s = env.schema
    return env.transaction(f'UPDATE "{s}".{table} SET v = v || \'+\', n = n + 1 WHERE id % 3 = 0',
                           f'DELETE FROM "{s}".{table} WHERE id % 10 = 0',
                           f'INSERT INTO "{s}".{table} SELECT g, \'new\', g FROM generate_series(100, 120) g',
                           f'UPDATE "{s}".{table} SET v = \'twice\' WHERE id = 1',
                           f'UPDATE "{s}".{table} SET v = \'thrice\' WHERE id = 1')


@pytest.mark.delta_long
def test_driver_killed_before_the_merge(xenv):
    before = offsets_history(xenv, "crash_a")
    xenv.wait_captured(churn(xenv, "crash_a"))
    crashed = cdc_process(xenv, "crash_a", crash="before-merge:1")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert offsets_history(xenv, "crash_a") == before  # nothing committed
    xenv.replicate("crash_a")
    xenv.assert_equal("crash_a")
    history = offsets_history(xenv, "crash_a")
    assert len(history) == len(before) + 1 and history == sorted(set(history))


def test_driver_killed_after_the_table_commit_before_the_checkpoint_commit(xenv):
    before = offsets_history(xenv, "crash_b")
    xenv.wait_captured(churn(xenv, "crash_b"))
    crashed = cdc_process(xenv, "crash_b", crash="after-commit:1")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    committed = offsets_history(xenv, "crash_b")
    assert len(committed) == len(before) + 1  # the batch is in the table, not in the checkpoint's commit log
    xenv.replicate("crash_b")  # Spark re-runs the batch: the table's history says it is applied
    assert offsets_history(xenv, "crash_b") == committed
    xenv.assert_equal("crash_b")
    if xenv.sink == "delta":  # Delta's own marker names the batch: its log would refuse the batch again too
        from deltalake import DeltaTable

        checkpoint = xenv.settings.path(xenv.settings.spark.checkpoint_dir) / f"{xenv.schema}.crash_b"
        query = json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]
        last = [s for s in xenv.summaries("crash_b") if "cdc.batch-id" in s][-1]
        app = f"cdc:{xenv.schema}.crash_b:{query}"
        assert DeltaTable(str(xenv.delta_path("crash_b"))).transaction_version(app) == int(last["cdc.batch-id"])


def test_checkpoint_deleted_resumes_from_the_table(xenv):
    shutil.rmtree(xenv.settings.path(xenv.settings.spark.checkpoint_dir) / f"{xenv.schema}.lost_cp")
    before = offsets_history(xenv, "lost_cp")
    xenv.replicate("lost_cp", churn(xenv, "lost_cp"))
    history = offsets_history(xenv, "lost_cp")
    assert len(history) == len(before) + 1 and history[-1] > before[-1]  # only the new records, once
    xenv.assert_equal("lost_cp")


def test_table_rolled_back_behind_its_checkpoint_stops_the_job(xenv, spark, capsys):
    xenv.replicate("rolled", churn(xenv, "rolled"))
    if xenv.sink == "delta":  # the version before the last batch's commit
        from deltalake import DeltaTable

        version = DeltaTable(str(xenv.delta_path("rolled"))).version()
        spark.sql(f"RESTORE TABLE {xenv.target_ref('rolled')} TO VERSION AS OF {version - 1}")
    else:
        snaps = [s for s in xenv.catalog.load_table(f"{xenv.schema}.rolled").snapshots()]
        spark.sql(f"CALL {xenv.settings.catalog.name}.system.rollback_to_snapshot("
                  f"'{xenv.schema}.rolled', {snaps[-2].snapshot_id})")
    capsys.readouterr()
    assert xenv.cdc("run", "--available-now", "--table", f"{xenv.schema}.rolled") == 3
    err = capsys.readouterr().err
    assert "checkpoint is ahead of the table's committed offsets" in err and "cdc replay --table" in err
    hint = err.split("cdc replay --table ", 1)[1].split("`")[0]  # the remedy the message names
    name, _, offsets = hint.partition(" --from-offsets ")
    assert xenv.cdc("replay", "--table", name, "--from-offsets", offsets.strip("'")) == 0
    xenv.replicate("rolled")
    xenv.assert_equal("rolled")


def test_retention_gap_fails_loudly_and_commits_nothing(fenv, capsys):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    before = offsets_history(fenv, "expired")
    fenv.wait_captured(churn(fenv, "expired"))
    topic = f"{fenv.source}.{fenv.schema}.expired"
    admin = AdminClient({"bootstrap.servers": fenv.settings.kafka_bootstrap})
    from tests.conftest import end_offset
    end = end_offset(fenv, topic)
    for fut in admin.delete_records([TopicPartition(topic, 0, end)]).values():
        fut.result(30)  # as retention would: the log now starts at `end`
    capsys.readouterr()
    assert fenv.cdc("run", "--available-now", "--table", f"{fenv.schema}.expired") == 3
    err = capsys.readouterr().err
    assert f"partition 0 no longer holds offsets {before[-1]}..{end - 1}" in err
    assert f"cdc bootstrap --table {fenv.schema}.expired" in err
    assert offsets_history(fenv, "expired") == before
    # The remedy the message names re-fills the table, and streaming goes on after it.
    assert fenv.cdc("bootstrap", "--yes", "--table", f"{fenv.schema}.expired") == 0
    fenv.replicate("expired", fenv.transaction(f'UPDATE "{fenv.schema}".expired SET v = \'after\' WHERE id < 20',
                                               f'DELETE FROM "{fenv.schema}".expired WHERE id = 21'))
    assert_equal(fenv.dsn, fenv.schema, "expired", fenv.catalog, f"{fenv.schema}.expired", ("id",))


def positions_history(env, table: str) -> list[str]:
    return [s["cdc.position"] for s in env.summaries(table) if "cdc.position" in s]


@pytest.mark.delta_long
def test_replay_from_earliest_keeps_the_table_exact(xenv):
    """Replays from the topic's start over a table the job applied (twice on Iceberg) leave
    it equal to the source, its commits in position order, and the job goes on after them."""
    s = xenv.schema
    txid = churn(xenv, "replayed")
    for key in (3, 6, 9):  # delete, then re-insert the same keys in later transactions
        xenv.transaction(f'DELETE FROM "{s}".replayed WHERE id = {key}')
        txid = xenv.transaction(f'INSERT INTO "{s}".replayed VALUES ({key}, \'again\', {key})')
    txid = max(txid, xenv.transaction(f'DELETE FROM "{s}".replayed WHERE id BETWEEN 40 AND 45'))
    xenv.replicate("replayed", txid)
    xenv.assert_equal("replayed")
    for _ in range(2 if xenv.sink == "iceberg" else 1):  # once on Delta, whose small commits cost more
        assert xenv.cdc("replay", "--table", f"{s}.replayed", "--from-earliest") == 0
        xenv.assert_equal("replayed")
    positions = positions_history(xenv, "replayed")
    assert positions == sorted(positions) and len(positions) > 10
    xenv.replicate("replayed")  # the regular job goes on from its checkpoint, skipping what is applied
    xenv.assert_equal("replayed")


def test_recreated_topic_is_detected_not_consumed(fenv, capsys):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from cdc.control.kafka import existing_topics

    from cdc.register.topics import ensure_topics

    s = fenv.schema
    before = offsets_history(fenv, "recreated")
    topic = f"{fenv.source}.{s}.recreated"
    bootstrap = fenv.settings.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics([topic]).values():
        fut.result(30)
    eventually(lambda: topic not in existing_topics(bootstrap), f"deletion of {topic}", 60, 0.2)  # asynchronous
    ensure_topics(bootstrap, [topic], fenv.settings.kafka)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(before[-1] + 5):  # the new topic grows past the old offsets: they do not go backwards
        producer.produce(topic, key=b'{"schema": {}, "payload": {"id": 1}}', value=None)
    producer.flush(30)
    capsys.readouterr()
    assert fenv.cdc("run", "--available-now", "--table", f"{s}.recreated") == 3
    err = capsys.readouterr().err
    assert f"topic {topic} was recreated (topic id" in err
    assert offsets_history(fenv, "recreated") == before
    assert fenv.cdc("bootstrap", "--yes", "--table", f"{s}.recreated") == 0
    fenv.replicate("recreated", fenv.transaction(f'UPDATE "{s}".recreated SET v = \'after\' WHERE id < 20',
                                                 f'DELETE FROM "{s}".recreated WHERE id = 21'))
    assert_equal(fenv.dsn, s, "recreated", fenv.catalog, f"{s}.recreated", ("id",))


def test_bootstrap_and_maintenance_of_a_delta_target_keep_it_exact(denv, capsys):
    from cdc.planning.bootstrap import PROPERTY, Bootstrap
    from cdc.sinks import delta

    name, t = f"{denv.schema}.crash_a", f'"{denv.schema}".crash_a'
    # In Kafka, not applied: the bootstrap's read holds them.
    denv.wait_captured(denv.transaction(f"UPDATE {t} SET v = 'before' WHERE id < 10", f"DELETE FROM {t} WHERE id = 11"))
    capsys.readouterr()
    assert denv.cdc("bootstrap", "--yes", "--table", name, "--chunk-rows", "40") == 0
    out = capsys.readouterr().out
    boot = Bootstrap.from_json(delta.properties(delta.open_table(denv.delta_path("crash_a")))[PROPERTY])
    assert f"bootstrap {boot.id} (jdbc) done" in out and boot.state == "done" and len(boot.chunks) >= 2
    denv.assert_equal("crash_a")
    assert denv.cdc("maintain", "--table", name) == 0
    assert str(denv.delta_path("crash_a")) + ": data files" in capsys.readouterr().out
    denv.assert_equal("crash_a")
    # Streaming resumes from the offsets the bootstrap recorded.
    denv.replicate("crash_a", denv.transaction(f"UPDATE {t} SET v = 'after' WHERE id < 20",
                                               f"DELETE FROM {t} WHERE id = 21", f"INSERT INTO {t} VALUES (500, 'new', 5)"))
    denv.assert_equal("crash_a")
