"""Capture health through the real connector: a row of several megabytes replicated with
another table's changes; a paused and a failed connector (a row over the record size
limit) shown by `cdc status` (text and JSON), `status --check` and `cdc reconcile`, then
brought back by `cdc register`."""
from __future__ import annotations

import json

import pytest
import requests
import yaml

from cdc.jobs import metrics
from cdc.jobs.watchers import watch_capture
from cdc.register.connector import ConnectClient, connector_name
from tests.conftest import _cleanup, postgres_env
from tests.eventually import eventually

MIB = 1024 * 1024


def big_text(mib: float) -> str:
    """SQL for an incompressible text of about `mib` MiB (hex digits of random hashes)."""
    return f"(SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, {int(mib * MIB / 32)}) g)"


def test_rows_of_several_megabytes_flow_with_the_other_tables(it_env):
    env, s = it_env, it_env.schema
    env.sql(f'CREATE TABLE "{s}".cap_big (id int PRIMARY KEY, body text)')
    env.sql(f'CREATE TABLE "{s}".cap_small (id int PRIMARY KEY, v int)')
    for table in ("cap_big", "cap_small"):
        assert env.cdc("register", "--table", env.register_table(table)) == 0
    env.transaction(f'INSERT INTO "{s}".cap_big VALUES (1, {big_text(3)}), (2, \'small\')',
                    f'INSERT INTO "{s}".cap_small SELECT g, g FROM generate_series(1, 10) g')
    env.transaction(f'UPDATE "{s}".cap_big SET body = {big_text(5)} WHERE id = 2',
                    f'UPDATE "{s}".cap_small SET v = v + 1')
    marker = env.marker()
    for table in ("cap_big", "cap_small"):
        env.replicate(table, marker)
    assert env.assert_equal("cap_big") == 2 and env.assert_equal("cap_small") == 10
    assert len(env.source_rows("cap_big", ("id",))[(2,)]["body"]) > 5 * 10**6


@pytest.fixture(scope="module")
def small_limit(stack, settings, it_env, tmp_path_factory):
    """A source of its own whose cdc.yaml sets the smallest record limit (1 MiB)."""
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("cap"), it_env.source + "c")
    set_limit(env, MIB)
    yield env
    _cleanup(env)


def set_limit(env, limit: int) -> None:
    doc = yaml.safe_load(env.config.read_text())
    doc.setdefault("kafka", {})["max_record_bytes"] = limit
    env.config.write_text(yaml.safe_dump(doc))


def wait_state(env, state: str, timeout_s: float = 90) -> dict:
    """Until the source's connector or a task reports `state`; the status then."""
    client, name = ConnectClient(env.settings.connect_url), connector_name(env.source)

    def reached() -> dict | None:
        found = client.status(name) or {}
        states = [found.get("connector", {}).get("state")] + [t.get("state") for t in found.get("tasks", [])]
        return found if state in states else None

    return eventually(reached, f"connector {name} {state}", timeout_s, detail=lambda: str(client.status(name)))


def reports(env, capsys, name: str) -> tuple[dict, str, int, dict]:
    """(status --json, status text, status --check's exit code, reconcile's row)."""
    capsys.readouterr()
    assert env.cdc("status", "--json", "--table", name) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert env.cdc("status", "--table", name) == 0
    text = capsys.readouterr().out
    check = env.cdc("status", "--check", "--table", name)
    capsys.readouterr()
    code = env.cdc("reconcile", "--table", name, "--format", "json", "--wait", "20")
    (row,) = json.loads(capsys.readouterr().out)["tables"]
    assert code == {"OK": 0, "DRIFT": 1, "CAPTURE-STOPPED": 3, "IN-FLIGHT": 5}[row["status"]]
    return as_json, text, check, row


def test_a_paused_and_a_failed_capture_are_shown_then_brought_back(small_limit, capsys):
    env, s = small_limit, small_limit.schema
    env.sql(f'CREATE TABLE "{s}".capped (id int PRIMARY KEY, body text)')
    name = env.register_table("capped")
    assert env.cdc("register", "--table", name) == 0
    env.replicate("capped", env.transaction(f'INSERT INTO "{s}".capped VALUES (1, \'one\')'))
    as_json, text, check, row = reports(env, capsys, name)
    assert as_json["tables"][0]["state"] == "caught-up" and as_json["sources"][0]["capturing"]
    assert as_json["sources"][0]["slot"]["name"] == f"cdc_{env.source}"
    assert check == 0 and row["status"] == "OK"

    # Paused by an operator: every report says so; `capture restart` resumes it.
    url, connector = env.settings.connect_url, connector_name(env.source)
    assert requests.put(f"{url}/connectors/{connector}/pause", timeout=10).ok
    wait_state(env, "PAUSED")
    env.sql(f'INSERT INTO "{s}".capped VALUES (2, \'two\')')
    as_json, text, check, row = reports(env, capsys, name)
    assert as_json["tables"][0]["state"] == "capture-stopped"
    assert as_json["sources"][0]["state"] == "PAUSED" and not as_json["sources"][0]["capturing"]
    assert "capture-stopped" in text and "not capturing: connector" in text and "PAUSED" in text
    assert check == 3
    assert row["status"] == "CAPTURE-STOPPED" and "PAUSED" in row["reason"]
    seen: dict[str, bool] = {}  # what a running job's watch thread logs and exports
    watch_capture(env.settings, env.source, seen)
    assert metrics.CAPTURING.labels(env.source)._value.get() == 0
    assert f"source {env.source} is not capturing: connector" in capsys.readouterr().err
    capsys.readouterr()
    assert env.cdc("capture", "restart", "--source", env.source) == 0
    out = capsys.readouterr().out
    assert f"connector {connector} was PAUSED; resumed" in out and f"capture {env.source}: connector RUNNING" in out
    env.replicate("capped", env.marker())
    assert env.assert_equal("capped") == 2
    watch_capture(env.settings, env.source, seen)
    assert metrics.CAPTURING.labels(env.source)._value.get() == 1
    assert f"source {env.source} is capturing again" in capsys.readouterr().err

    # A row over the limit fails the task: status names the size and the setting to raise.
    env.sql(f'INSERT INTO "{s}".capped VALUES (3, {big_text(1.5)})')
    wait_state(env, "FAILED")
    as_json, text, check, row = reports(env, capsys, name)
    (task,) = as_json["sources"][0]["tasks"]
    assert task["state"] == "FAILED" and "RecordTooLargeException" in task["cause"]
    assert "kafka.max_record_bytes (1,048,576)" in as_json["sources"][0]["reason"]
    assert f"a change record of source {env.source} (table {name}) is " in as_json["sources"][0]["reason"]
    assert as_json["tables"][0]["state"] == "capture-stopped" and "kafka.max_record_bytes" in text
    assert check == 3 and row["status"] == "CAPTURE-STOPPED"

    # Restarted with the limit unchanged, the task fails again: the fresh failure, exit 3.
    capsys.readouterr()
    assert env.cdc("capture", "restart", "--source", env.source) == 3
    out, err = capsys.readouterr()
    assert "task 0 was FAILED" in out and "; restarted" in out and "task 0 FAILED" in out
    assert f"source {env.source} is not capturing" in err and "kafka.max_record_bytes (1,048,576)" in err

    # The limit raised, `register` restarts the failed task and the row arrives.
    set_limit(env, 8 * MIB)
    capsys.readouterr()
    assert env.cdc("register", "--table", name) == 0
    assert "task 0 was FAILED (org.apache.kafka.common.errors.RecordTooLargeException" in capsys.readouterr().out
    env.replicate("capped", env.marker())
    assert env.assert_equal("capped") == 3
    _, _, check, row = reports(env, capsys, name)
    assert check == 0 and row["status"] == "OK"


def test_the_stack_writes_no_password_to_a_log_or_its_status(stack, capsys):
    """The MariaDB account's password is in no binary log; `stack status --json` holds no
    password: its `postgres_dsn` names a password file, which psql and psycopg read."""
    import psycopg

    from cdc.cli.main import main

    secret = stack.mariadb.password().encode()
    logs = sorted(stack.mariadb.data.glob("binlog.[0-9]*"))
    assert logs and not [p.name for p in logs if secret in p.read_bytes()]
    capsys.readouterr()
    assert main(["stack", "status", "--json"]) == 0
    out = capsys.readouterr().out
    assert stack.postgres.password() not in out
    dsn = json.loads(out)["postgres_dsn"]
    assert "passfile=" in dsn
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("cdc",)


@pytest.mark.parametrize("source", ["it_env", "it_mariadb"])
def test_each_commit_names_its_last_transaction_as_the_transaction_topic_counts_it(source, request):
    """The connector gives every change its transaction and each transaction's END its count
    per table, on a topic of one partition; each target's commit names the transaction of
    its last change and the change's order in it, and the cut over both tables is at it."""
    from cdc.control.commits import parse_transaction
    from cdc.control.cut import At, Mark, TableCut, next_cut, transaction_end
    from cdc.control.kafka import read_records, watermarks
    from cdc.register.connector import transaction_topic

    env = request.getfixturevalue(source)
    names = [f"{env.schema}.{t}" for t in ("tx_a", "tx_b")]
    for t in ("tx_a", "tx_b"):
        env.sql(f"CREATE TABLE {env.q(t)} (id int PRIMARY KEY, v int)")
        env.sql(f"INSERT INTO {env.q(t)} VALUES (100, 0)")
        assert env.cdc("tables", "add", f"{env.schema}.{t}") == 0
    assert env.cdc("register", *(a for n in names for a in ("--table", n))) == 0
    env.transaction(f"INSERT INTO {env.q('tx_a')} VALUES (1, 1), (2, 2)",
                    f"INSERT INTO {env.q('tx_b')} VALUES (1, 1)",
                    f"UPDATE {env.q('tx_a')} SET v = 3 WHERE id = 1")
    env.wait_captured(env.marker())
    assert env.cdc("run", "--available-now", *(a for n in names for a in ("--table", n))) == 0
    topic = transaction_topic(env.source)
    marks = watermarks(env.settings.kafka_bootstrap, topic)
    assert list(marks) == [0]  # one partition: the transactions in commit order
    lo, hi = marks[0]
    records = read_records(env.settings.kafka_bootstrap, topic, {0: lo}, hi - lo)[0]
    ends = [e for e in (transaction_end(m.value(), m.offset(), env.kind) for m in records) if e]
    a, b = f"{env.schema}.tx_a", f"{env.schema}.tx_b"
    ours = [e for e in ends if a in e.counts and b in e.counts]
    assert len(ours) == 1 and ours[0].counts[a] == 3 and ours[0].counts[b] == 1, ends[-5:]
    assert parse_transaction(env.summaries("tx_a")[-1]) == (ours[0].id, 3)
    assert parse_transaction(env.summaries("tx_b")[-1]) == (ours[0].id, 1)
    commits = {t: len(env.summaries(t)) for t in ("tx_a", "tx_b")}  # each last commit, by its number
    tables = [TableCut(t, f"{env.schema}.{t}", (Mark(n, parse_transaction(env.summaries(t)[-1])),))
              for t, n in commits.items()]
    cut = next_cut([e for e in ends if e.offset >= ours[0].offset], tables).cut
    assert cut.transaction == ends[-1] and cut.tables == {t: At(n) for t, n in commits.items()}  # later ones: the marker's
