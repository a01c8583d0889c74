"""PostgreSQL -> Debezium -> Kafka -> `cdc run --available-now` -> Iceberg, read back with
pyiceberg and compared with PostgreSQL row for row, every column."""
from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal

import pytest
import yaml

from cdc.control.commits import parse_offsets
from cdc.register.connector import ConnectClient, connector_name
from tests.compare import assert_equal
from tests.conftest import end_offset

ALL_TYPES = """
CREATE TABLE "{s}".all_types (
    id bigint PRIMARY KEY,
    small smallint, i integer, big bigint,
    amount numeric(12,2), ratio numeric(20,8), flag boolean,
    r real, d double precision,
    name text, code varchar(16), letter char(3),
    born date, seen timestamp, seen_ms timestamp(3), at timestamptz,
    doc json, docb jsonb, uid uuid, raw bytea,
    num numeric, cash money, t time, t_ms time(3), tz timetz, span interval,
    ints int[], words text[], feeling "{s}".mood, ip inet, net cidr
)"""

ROW = ("({id}, {id} % 300, {id} * 7, {id}::bigint * 1000000007, {id} * 1.25 - 100, {id} / 7.0, {id} % 2 = 0, "
       "CASE WHEN {id} % 10 = 0 THEN 'NaN' ELSE {id} / 3.0 END, "
       "CASE {id} % 10 WHEN 5 THEN '-Infinity' WHEN 6 THEN 'Infinity' ELSE {id} / 9.0 END, 'name ' || {id} || ' ☃', 'c' || {id}, 'ab', DATE '2024-02-29' + {id}, "
       "TIMESTAMP '2024-01-01 00:00:00.123456' + {id} * INTERVAL '1 minute', "
       "TIMESTAMP '2024-01-01 12:34:56.789' + {id} * INTERVAL '1 second', "
       "TIMESTAMPTZ '2024-06-30 23:59:59.999999+02' + {id} * INTERVAL '1 hour', "
       "'{{\"n\": {id}, \"tags\": [\"a\", \"b\"]}}', '{{\"k\": {id}}}', md5({id}::text)::uuid, "
       "decode(lpad(to_hex({id}), 8, '0'), 'hex'), "
       "{id} * 1.000000000123, {id} * 1.5 - 20, TIME '13:45:56.123456' + {id} * INTERVAL '1 second', "
       "TIME '01:02:03.456', TIMETZ '13:45:56.5+02', "
       "make_interval(years => {id} % 3, months => {id} % 5, days => -({id} % 4), secs => {id} * 1.5), "
       "ARRAY[{id}, NULL, -{id}], ARRAY['a', 'b c', NULL], "
       "(ARRAY['sad', 'ok', 'happy'])[{id} % 3 + 1]::\"{s}\".mood, ('10.0.' || ({id} % 256) || '.1')::inet, "
       "('10.' || ({id} % 256) || '.0.0/16')::cidr)")

COMPOSITE = 'CREATE TABLE "{s}".lines (order_id int, line_no smallint, sku text, qty int, PRIMARY KEY (order_id, line_no))'
TRUNCATED = 'CREATE TABLE "{s}".events (id int PRIMARY KEY, payload text)'
NO_KEY = 'CREATE TABLE "{s}".no_key (a int, b text)'

FLOAT32 = frozenset({"r"})


def create_mood(env) -> None:
    """The enum type of the types table, once per schema."""
    env.sql(f'DO $$ BEGIN CREATE TYPE "{env.schema}".mood AS ENUM (\'sad\', \'ok\', \'happy\'); '
            f'EXCEPTION WHEN duplicate_object THEN NULL; END $$')


@pytest.fixture(scope="module")
def env(it_env):
    s = it_env.schema
    create_mood(it_env)
    it_env.sql(ALL_TYPES.format(s=s))
    it_env.sql(f'INSERT INTO "{s}".all_types VALUES ' + ", ".join(ROW.format(id=i, s=s) for i in range(1, 41)))
    it_env.sql(f'INSERT INTO "{s}".all_types (id) VALUES (1000)')  # every other column null
    it_env.sql(COMPOSITE.format(s=s))
    it_env.sql(f'INSERT INTO "{s}".lines SELECT o, l, \'sku-\' || o || \'-\' || l, l FROM generate_series(1, 5) o, '
               f'generate_series(1, 3) l')
    it_env.sql(TRUNCATED.format(s=s))
    it_env.sql(f'INSERT INTO "{s}".events SELECT g, \'e\' || g FROM generate_series(1, 10) g')
    it_env.sql(NO_KEY.format(s=s))
    for t, key in (("all_types", None), ("lines", None), ("events", None)):
        it_env.register_table(t, key)
    assert it_env.cdc("register") == 0
    return it_env


def test_snapshot_then_streamed_changes_equal_the_source(env):
    s = env.schema
    env.replicate("all_types")
    assert assert_equal(env.dsn, s, "all_types", env.catalog, f"{s}.all_types", ("id",), FLOAT32) == 41
    txid = env.transaction(
        f'UPDATE "{s}".all_types SET name = \'renamed\', amount = -0.01, flag = NULL WHERE id <= 5',
        f'UPDATE "{s}".all_types SET i = i + 1 WHERE id = 7',
        f'UPDATE "{s}".all_types SET i = i + 1 WHERE id = 7',
        f'UPDATE "{s}".all_types SET i = i + 1, docb = \'{{"k": "changed"}}\' WHERE id = 7',
        f'DELETE FROM "{s}".all_types WHERE id BETWEEN 10 AND 14',
        f'INSERT INTO "{s}".all_types VALUES ' + ROW.format(id=12, s=s),
        f'INSERT INTO "{s}".all_types VALUES ' + ", ".join(ROW.format(id=i, s=s) for i in range(100, 110)),
    )
    txid = max(txid, env.transaction(f'DELETE FROM "{s}".all_types WHERE id = 20',
                                     f'INSERT INTO "{s}".all_types VALUES ' + ROW.format(id=20, s=s)))
    txid = max(txid, env.transaction(f'UPDATE "{s}".all_types SET raw = NULL, at = NULL WHERE id = 30'))
    env.replicate("all_types", txid)
    n = assert_equal(env.dsn, s, "all_types", env.catalog, f"{s}.all_types", ("id",), FLOAT32)
    assert n == 41 - 5 + 1 + 10
    # The JDBC bootstrap reads every type in Debezium's form: the same values as streaming.
    streamed = env.catalog.load_table(f"{s}.all_types").scan().to_arrow().drop(
        ["_cdc_op", "_cdc_position", "_cdc_source_ts", "_cdc_kafka_partition", "_cdc_kafka_offset"]).sort_by("id")
    assert env.cdc("bootstrap", "--yes", "--table", f"{s}.all_types") == 0
    assert assert_equal(env.dsn, s, "all_types", env.catalog, f"{s}.all_types", ("id",), FLOAT32) == n
    loaded = env.catalog.load_table(f"{s}.all_types").scan().to_arrow().select(streamed.column_names).sort_by("id")
    assert loaded.to_pylist() == streamed.to_pylist() or _same_but_nan(loaded.to_pylist(), streamed.to_pylist())


def _same_but_nan(a: list[dict], b: list[dict]) -> bool:
    """Row lists equal, NaN equal to NaN."""
    def norm(rows):
        return [{k: ("NaN" if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in rows]
    return norm(a) == norm(b)


EDGES = ('CREATE TABLE "{s}".edges (id int PRIMARY KEY, ts timestamp, ts_ms timestamp(3), tstz timestamptz, '
         'day date, num numeric, amount numeric(6,2))')


def test_infinities_and_values_without_a_target_value(env):
    """±infinity timestamps and dates become the largest and smallest values the target
    keeps (docs/types.md); a numeric NaN has no decimal value and is a dead letter."""
    import datetime as dt

    s = env.schema
    env.sql(EDGES.format(s=s))
    name = env.register_table("edges")
    assert env.cdc("register", "--table", name) == 0
    txid = env.transaction(
        f"INSERT INTO \"{s}\".edges VALUES (1, 'infinity', 'infinity', 'infinity', 'infinity', 1.5, 1.5), "
        f"(2, '-infinity', '-infinity', '-infinity', '-infinity', -2.25, -2.25), "
        f"(3, '2024-01-01 00:00:00.000001', '2024-01-01 00:00:00.001', '2024-01-01 00:00:00.000001+00', "
        f"'2024-01-01', 12345678901234567890.123456789, 9999.99)",
        f"INSERT INTO \"{s}\".edges (id, num) VALUES (4, 'NaN')")
    env.replicate("edges", txid)
    top, bottom = dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1, 1, 1)
    utc = dt.timezone.utc

    def rows():
        t = env.catalog.load_table(f"{s}.edges").scan().to_arrow().to_pylist()
        return {r["id"]: (r["ts"], r["ts_ms"], r["tstz"], r["day"], r["num"]) for r in t}

    expected = {
        1: (top, top, top.replace(tzinfo=utc), dt.date(9999, 12, 31), Decimal("1.5")),
        2: (bottom, bottom, bottom.replace(tzinfo=utc), dt.date(1, 1, 1), Decimal("-2.25")),
        3: (dt.datetime(2024, 1, 1, 0, 0, 0, 1), dt.datetime(2024, 1, 1, 0, 0, 0, 1000),
            dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=utc), dt.date(2024, 1, 1),
            Decimal("12345678901234567890.123456789")),
    }
    assert rows() == expected
    (dead,) = env.catalog.load_table(f"{s}.edges__cdc_dead_letters").scan().to_arrow().to_pylist()
    assert dead["error_class"] == "value-does-not-fit" and "num" in dead["error_message"]
    env.sql(f'DELETE FROM "{s}".edges WHERE id = 4')
    assert env.cdc("bootstrap", "--yes", "--table", name) == 0  # the JDBC read keeps the same rule
    assert rows() == expected


def test_table_without_primary_key_is_refused(env, capsys):
    name = env.register_table("no_key")
    try:
        assert env.cdc("register", "--table", name) == 2
        assert "has no primary key" in capsys.readouterr().err
    finally:
        (env.settings.path(env.settings.tables_dir) / f"{name}.yaml").unlink()


def test_table_without_primary_key_replicates_by_the_registered_key(env, capsys):
    s = env.schema
    env.sql(f'CREATE TABLE "{s}".keyed_by_config (code text NOT NULL, label text, qty int)')
    env.sql(f'INSERT INTO "{s}".keyed_by_config SELECT \'k\' || g, \'l\' || g, g FROM generate_series(1, 20) g')
    name = env.register_table("keyed_by_config", key=["code"])
    assert env.cdc("register", "--table", name) == 2  # no replica identity: updates would carry no key
    assert "REPLICA IDENTITY FULL" in capsys.readouterr().err
    env.sql(f'ALTER TABLE "{s}".keyed_by_config REPLICA IDENTITY FULL')
    assert env.cdc("register", "--table", name) == 0
    env.replicate("keyed_by_config")
    txid = env.transaction(f'UPDATE "{s}".keyed_by_config SET qty = qty * 2 WHERE qty > 10',
                           f'DELETE FROM "{s}".keyed_by_config WHERE qty = 3')
    env.replicate("keyed_by_config", txid)
    assert assert_equal(env.dsn, s, "keyed_by_config", env.catalog, f"{s}.keyed_by_config", ("code",)) == 19


def test_tables_add_introspects_a_composite_key_and_refuses_a_keyless_table(env, capsys):
    import json

    s, tables = env.schema, env.settings.path(env.settings.tables_dir)
    assert env.cdc("tables", "add", f"{s}.lines", "--name", f"{s}.lines_added") == 0
    written = (tables / f"{s}.lines_added.yaml").read_text()
    assert yaml.safe_load(written) == {"name": f"{s}.lines_added", "source": {"schema": s, "table": "lines"},
                                       "key": ["order_id", "line_no"]}
    assert '#   "sku" "text"' in written and '#   "line_no" "smallint" not null  (key)' in written
    capsys.readouterr()
    assert env.cdc("tables", "add", f"{s}.lines", "--name", f"{s}.lines_added") == 2
    assert "already exists" in capsys.readouterr().err and (tables / f"{s}.lines_added.yaml").read_text() == written
    try:
        assert env.cdc("tables", "add", f"{s}.no_key") == 2
        err = capsys.readouterr().err
        assert "has no primary key" in err and "--key" in err and not (tables / f"{s}.no_key.yaml").exists()
        assert env.cdc("tables", "add", f"{s}.no_key", "--key", "a,b") == 2
        assert "REPLICA IDENTITY FULL" in capsys.readouterr().err  # updates would carry no key
        assert env.cdc("tables", "add", f"{s}.lines", "--name", "not-qualified") == 2
        assert "<namespace>.<table>" in capsys.readouterr().err
        assert env.cdc("tables", "add", f"{s}.lines", "--name", f"{s}.lines_delta",
                       "--sink", "delta") == 0
        assert yaml.safe_load((tables / f"{s}.lines_delta.yaml").read_text())["sink"] == "delta"
        capsys.readouterr()
        assert env.cdc("tables", "list", "--json") == 0
        listing = json.loads(capsys.readouterr().out)
        assert listing["schema_version"] == 1
        listed = {t["table"]: t for t in listing["tables"]}
        assert not listed[f"{s}.lines_added"]["registered"] and listed[f"{s}.lines"]["registered"]
        assert listed[f"{s}.lines"]["key"] is None and listed[f"{s}.lines_added"]["key"] == ["order_id", "line_no"]
        assert (listed[f"{s}.lines_delta"]["sink"], listed[f"{s}.lines"]["sink"]) == ("delta", "iceberg")
        assert listed[f"{s}.lines_delta"]["target"].endswith(f"/{s}/lines_delta")
    finally:
        (tables / f"{s}.lines_added.yaml").unlink()
        (tables / f"{s}.lines_delta.yaml").unlink(missing_ok=True)


def test_register_dry_run_prints_the_changes_and_makes_none(env, capsys):
    from cdc.control.kafka import existing_topics

    s = env.schema
    env.sql(f'CREATE TABLE "{s}".pairs (region text, code int, label text, PRIMARY KEY (region, code))')
    env.sql(f'INSERT INTO "{s}".pairs SELECT \'r\' || (g % 3), g, \'l\' || g FROM generate_series(1, 12) g')
    assert env.cdc("tables", "add", f"{s}.pairs") == 0
    client, connector, topic = ConnectClient(env.settings.connect_url), connector_name(env.source), f"{env.source}.{s}.pairs"
    before = client.config(connector)
    capsys.readouterr()
    assert env.cdc("register", "--dry-run", "--table", f"{s}.pairs") == 0
    out = capsys.readouterr().out
    assert f"target lake.{s}.pairs would be created, key region, code" in out
    assert f"topic {topic} would be created" in out
    assert f"connector {connector}: would change:" in out and f"{s}.pairs" in out.split("table.include.list")[1]
    assert "password" not in out or "****" in out
    assert client.config(connector) == before and topic not in existing_topics(env.settings.kafka_bootstrap)
    assert not env.catalog.table_exists(f"{s}.pairs")
    assert env.cdc("register", "--table", f"{s}.pairs") == 0  # then for real: the table replicates
    env.replicate("pairs")
    assert assert_equal(env.dsn, s, "pairs", env.catalog, f"{s}.pairs", ("region", "code")) == 12
    assert env.cdc("register", "--dry-run", "--table", f"{s}.pairs") == 0
    assert f"connector {connector}: unchanged" in capsys.readouterr().out


def test_status_reports_lag_positions_and_job_state(env, capsys):
    import json

    s = env.schema
    name = f"{s}.events"
    env.replicate("events")
    capsys.readouterr()
    assert env.cdc("status", "--json", "--table", name) == 0
    shown = json.loads(capsys.readouterr().out)
    (row,) = shown["tables"]
    assert shown["schema_version"] == 1 and shown["ok"]
    assert row["lag"] == 0 and row["committed_offsets"] == row["kafka_end_offsets"]
    assert (row["table"], row["sink"]) == (name, "iceberg")
    assert row["location"] == env.catalog.load_table(name).metadata.location and row["location"].startswith("file:")
    assert row["job"]["state"] == "caught-up" and row["position"] and row["source_commit_time"]
    assert row["dead_letters"] == 0 and row["snapshot_id"]
    env.wait_captured(env.transaction(f'INSERT INTO "{s}".events VALUES (900, \'pending\'), (901, \'pending\')'))
    assert env.cdc("status", "--json", "--table", name) == 0
    (pending,) = json.loads(capsys.readouterr().out)["tables"]
    assert pending["lag"] == 2 and pending["position"] == row["position"]
    env.replicate("events")
    assert env.cdc("status", "--table", name) == 0
    text = capsys.readouterr().out
    assert name in text and "caught-up" in text


def test_unknown_table_is_a_usage_error(env, capsys):
    assert env.cdc("run", "--available-now", "--table", "no.such") == 2
    assert "no registered table named 'no.such'" in capsys.readouterr().err


def test_table_registered_after_the_connector_runs_is_filled(env):
    s = env.schema
    env.sql(f'CREATE TABLE "{s}".late (id int PRIMARY KEY, label text, price numeric(8,3))')
    env.sql(f'INSERT INTO "{s}".late SELECT g, \'late \' || g, g / 8.0 FROM generate_series(1, 300) g')
    name = env.register_table("late")
    assert env.cdc("register", "--table", name) == 0  # incremental snapshot through the signal table
    env.replicate("late")
    assert assert_equal(env.dsn, s, "late", env.catalog, f"{s}.late", ("id",)) == 300
    txid = env.transaction(f'UPDATE "{s}".late SET price = price * 2 WHERE id % 3 = 0',
                           f'DELETE FROM "{s}".late WHERE id > 290')
    env.replicate("late", txid)
    assert assert_equal(env.dsn, s, "late", env.catalog, f"{s}.late", ("id",)) == 290


def test_a_backlog_is_taken_in_batches_sized_from_the_memory_and_the_record_size(env, monkeypatch, capsys):
    """With no `max_offsets_per_trigger`, a backlog is applied in batches of a size the job
    sets from its memory and the topic's records: a share of the memory this small comes
    out at the floor, lowered here to 100 records."""
    from cdc.config.clients import kafka_access
    from cdc.jobs import backlog
    from cdc.control.kafka import tail_record_bytes

    s = env.schema
    env.sql(f'CREATE TABLE "{s}".backlog (id int PRIMARY KEY, label text)')
    env.sql(f'INSERT INTO "{s}".backlog SELECT g, repeat(\'x\', g % 50) FROM generate_series(1, 250) g')
    name = env.register_table("backlog")
    assert env.cdc("register", "--table", name) == 0
    env.wait_captured(env.transaction(f'DELETE FROM "{s}".backlog WHERE id % 10 = 0',
                                      f'UPDATE "{s}".backlog SET label = \'changed\' WHERE id % 4 = 1'))
    topic = f"{env.source}.{s}.backlog"
    sized = tail_record_bytes(kafka_access(env.settings), topic)
    newest = len(last_record_value(env, topic))
    assert 0.5 * newest < sized < 2 * newest  # the mean of the newest records, keys and headers included
    monkeypatch.setattr(backlog, "BATCH_MEMORY_SHARE", 1e-9)
    monkeypatch.setattr(backlog, "AUTO_MIN_RECORDS", 100)
    capsys.readouterr()
    env.replicate("backlog")
    assert f"batches of at most 100 records (about {round(sized):,} bytes a record)" in capsys.readouterr().err
    ends = [parse_offsets(x)[topic][0] for x in env.summaries("backlog") if topic in parse_offsets(x)]
    records = end_offset(env, topic)
    assert len(ends) >= records // 100 and all(b - a <= 100 for a, b in zip([0, *ends], ends)), ends
    assert ends[-1] == records
    assert assert_equal(env.dsn, s, "backlog", env.catalog, f"{s}.backlog", ("id",)) == 225


def test_a_job_keeps_its_newest_snapshots_and_metadata_files(env):
    """`options.max_snapshots` from the registration: batch after batch, the job expires all
    but the newest snapshots of the target, keeps its metadata files to the newest few, and
    the target still equals the source, its newest snapshot at the topic's end."""
    from pathlib import Path
    from urllib.parse import urlparse

    s = env.schema
    env.sql(f'CREATE TABLE "{s}".kept (id int PRIMARY KEY, label text)')
    env.sql(f'INSERT INTO "{s}".kept SELECT g, \'x\' || g FROM generate_series(1, 120) g')
    name = env.register_table("kept", options={"max_offsets_per_trigger": 30, "max_snapshots": 2})
    assert env.cdc("register", "--table", name) == 0
    env.replicate("kept", env.transaction(f'UPDATE "{s}".kept SET label = \'changed\' WHERE id % 3 = 0',
                                          f'DELETE FROM "{s}".kept WHERE id % 7 = 0'))
    topic = f"{env.source}.{s}.kept"
    summaries = env.summaries("kept")
    assert len(summaries) <= 3 and parse_offsets(summaries[-1])[topic] == {0: end_offset(env, topic)}, summaries
    metadata = Path(urlparse(env.catalog.load_table(f"{s}.kept").metadata_location).path).parent
    assert len(list(metadata.glob("*.metadata.json"))) <= 11
    assert assert_equal(env.dsn, s, "kept", env.catalog, f"{s}.kept", ("id",)) == 120 - 17


def last_record_value(env, topic: str) -> bytes:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": env.settings.kafka_bootstrap, "group.id": "cdc-tests",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, end_offset(env, topic) - 1)])
        msg = consumer.poll(30)
        return msg.value()
    finally:
        consumer.close()


def test_continuous_run_applies_changes_until_interrupted(env, tmp_path):
    """A running job applies new changes, and its metrics endpoint, scraped meanwhile,
    shows the applied events rising and the lag falling to zero."""
    import socket
    import time

    from tests.compare import differences, source_rows, target_rows
    from tests.conftest import interrupt, start_driver

    s = env.schema
    name = f"{s}.events"
    env.replicate("events")
    env.wait_captured(env.transaction(
        f'INSERT INTO "{s}".events SELECT g, \'backlog \' || g FROM generate_series(300, 339) g'))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        proc = start_driver(env, "events", out, args=("--metrics-port", str(port)))
    scrapes = []
    try:
        live = False
        deadline = time.monotonic() + 180
        while True:  # poll the condition: the running job makes the target equal the source
            scrapes.append(scrape(port, name))
            if scrapes[-1]["applied"] and not live:  # the backlog is being applied: now live changes
                env.transaction(f'INSERT INTO "{s}".events SELECT g, \'live \' || g FROM generate_series(200, 260) g',
                                f'DELETE FROM "{s}".events WHERE id = 100')
                live = True
            diffs = differences(source_rows(env.dsn, s, "events", ("id",)),
                                target_rows(env.catalog, name, ("id",)))
            if live and not diffs and scrapes[-1]["lag"] == 0:
                break
            assert proc.poll() is None, f"cdc run exited early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"not equal after 180s: {diffs[:5]}, metrics {scrapes[-3:]}"
            time.sleep(1)
    finally:
        interrupt(proc)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert "stop requested" in log.read_text()
    applied = [m["applied"] for m in scrapes if m["applied"] is not None]
    lags = [m["lag"] for m in scrapes if m["lag"] is not None]
    assert applied == sorted(applied) and applied[-1] >= 40 + 61, scrapes  # the backlog, then the live inserts
    assert max(lags) >= 40 and lags[-1] == 0, scrapes  # the backlog was seen waiting, then none
    assert scrapes[-1]["batches"] >= 2


def scrape(port: int, table: str) -> dict:
    """cdc_events_applied, the summed cdc_lag_records and the batch count of `table` from
    the job's /metrics (None before the job has them; nothing when it does not answer yet)."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except requests.ConnectionError:
        return {"applied": None, "lag": None, "batches": None}
    samples = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples
               if s.labels.get("table") == table]
    lag = [v for n, _, v in samples if n == "cdc_lag_records"]
    return {"applied": next((v for n, _, v in samples if n == "cdc_events_applied_total"), None),
            "lag": sum(lag) if lag else None,
            "batches": next((v for n, _, v in samples if n == "cdc_batch_duration_seconds_count"), None)}


def test_tables_in_one_application_commit_only_their_own_offsets(env, tmp_path, capsys):
    """Every registered table in one job, one SparkSession each, applying one batch at a time
    (`spark.batches_at_once: 1`): no two batches' applying overlaps."""
    from cdc.cli.main import main as cdc_main
    from cdc.control.commits import parse_offsets

    s = env.schema
    txid = env.transaction(f'UPDATE "{s}".lines SET qty = qty + 1', f'UPDATE "{s}".events SET payload = \'x\'',
                           f'UPDATE "{s}".all_types SET small = 1 WHERE id = 1')
    env.wait_captured(txid)
    doc = yaml.safe_load(env.config.read_text())
    doc["spark"]["batches_at_once"] = 1
    (config := tmp_path / "cdc.yaml").write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert cdc_main(["--config", str(config), "--log-format", "json", "run", "--available-now"]) == 0
    applied = [e for e in map(json.loads, capsys.readouterr().err.splitlines()) if e.get("event") == "batch-applied"]
    spans = sorted((dt.datetime.fromisoformat(e["time"]).timestamp() - e["seconds"],
                    dt.datetime.fromisoformat(e["time"]).timestamp()) for e in applied)
    assert len({e["table"] for e in applied}) >= 3
    assert all(start >= end - 0.01 for (_, end), (start, _) in zip(spans, spans[1:])), spans
    for table in ("all_types", "lines", "events", "late"):
        summary = env.catalog.load_table(f"{s}.{table}").current_snapshot().summary.additional_properties
        assert list(parse_offsets(summary)) == [f"{env.source}.{s}.{table}"]
        assert_equal(env.dsn, s, table, env.catalog, f"{s}.{table}", ("id",) if table != "lines"
                     else ("order_id", "line_no"), FLOAT32)


def test_a_table_with_a_poisoned_registration_fails_while_the_others_replicate(env, spark, capsys):
    from cdc.control import jobstate

    s = env.schema
    env.sql(f'CREATE TABLE "{s}".poisoned (id int PRIMARY KEY, v text)')
    name = env.register_table("poisoned")  # never `cdc register`ed: it has no target to apply to
    try:
        env.wait_captured(env.transaction(f'UPDATE "{s}".lines SET qty = qty + 10',
                                          f'INSERT INTO "{s}".events VALUES (700, \'beside a poisoned table\')'))
        capsys.readouterr()
        assert env.cdc("run", "--available-now") == 3
        err = capsys.readouterr().err
        assert f"{name}: failed: target lake.{name} of table {name} does not exist" in err and "go on" in err
        assert assert_equal(env.dsn, s, "lines", env.catalog, f"{s}.lines", ("order_id", "line_no"))
        assert assert_equal(env.dsn, s, "events", env.catalog, f"{s}.events", ("id",))
        states = {t: jobstate.read(env.settings.state_dir, f"{s}.{t}")["state"] for t in ("poisoned", "lines", "events")}
        assert states == {"poisoned": jobstate.FAILED, "lines": jobstate.CAUGHT_UP, "events": jobstate.CAUGHT_UP}
        pools = spark.sparkContext._jsc.sc().getAllPools()  # each table's batches ran in its pools by size
        names = {pools.apply(i).name() for i in range(pools.size())}
        assert all(any(re.fullmatch(rf"cdc-batch-\d\d-{re.escape(f'{s}.{t}')}", n) for n in names)
                   for t in ("lines", "events"))
    finally:
        (env.settings.path(env.settings.tables_dir) / f"{name}.yaml").unlink()


def test_undecodable_record_stops_the_job_and_commits_nothing(env, capsys):
    from confluent_kafka import Producer

    from cdc.control.commits import parse_offsets

    s = env.schema
    env.sql(f'CREATE TABLE "{s}".fragile (id int PRIMARY KEY, v text)')
    name = env.register_table("fragile", options={"on_error": "fail"})
    assert env.cdc("register", "--table", name) == 0
    txid = env.transaction(f'INSERT INTO "{s}".fragile VALUES (1, \'ok\')')
    env.replicate("fragile", txid)
    topic = f"{env.source}.{s}.fragile"
    table = env.catalog.load_table(f"{s}.fragile")
    committed = parse_offsets(table.current_snapshot().summary.additional_properties)[topic]
    producer = Producer({"bootstrap.servers": env.settings.kafka_bootstrap})
    producer.produce(topic, key=b'{"schema": {}, "payload": {"id": 2}}', value=b"\x00\x01 not an envelope")
    producer.flush(30)
    capsys.readouterr()
    assert env.cdc("run", "--available-now", "--table", name) == 3
    err = capsys.readouterr().err
    assert f"partition 0 offset {committed[0]}: value is not a Debezium JSON envelope" in err
    table = env.catalog.load_table(f"{s}.fragile")
    assert parse_offsets(table.current_snapshot().summary.additional_properties)[topic] == committed


def test_bad_records_are_set_aside_and_every_valid_change_applies(env):
    """Garbage bytes, a wrong-shaped envelope and a value that overflows its column,
    produced straight into the topic between real changes (the default on_error: dlq)."""
    import json

    from confluent_kafka import Producer

    from cdc.config import load_tables
    from cdc.report.status import status
    s = env.schema
    env.sql(f'CREATE TABLE "{s}".lettered (id int PRIMARY KEY, v text, n numeric(10,2))')
    name = env.register_table("lettered")
    assert env.cdc("register", "--table", name) == 0
    env.wait_captured(env.transaction(f'INSERT INTO "{s}".lettered SELECT g, \'v\' || g, g FROM generate_series(1, 20) g'))
    topic = f"{env.source}.{s}.lettered"
    first = end_offset(env, topic)
    key = b'{"schema": {}, "payload": {"id": 7}}'
    bad = [b"\x00\x01 not an envelope",
           json.dumps({"schema": {}, "payload": {"op": "u", "source": {"lsn": 1}}}).encode(),
           json.dumps({"schema": {}, "payload": {"op": "u", "after": {"id": 7, "v": "x", "n": 123456789012.5},
                                                 "source": {"lsn": 1, "txId": 1}}}).encode()]
    producer = Producer({"bootstrap.servers": env.settings.kafka_bootstrap})
    for value in bad:
        producer.produce(topic, key=key, value=value)
    producer.flush(30)
    env.replicate("lettered", env.transaction(f'UPDATE "{s}".lettered SET v = \'after\' WHERE id <= 10',
                                              f'DELETE FROM "{s}".lettered WHERE id = 20'))
    assert_equal(env.dsn, s, "lettered", env.catalog, f"{s}.lettered", ("id",))
    dead = env.catalog.load_table(f"{s}.lettered__cdc_dead_letters").scan().to_arrow().to_pylist()
    assert sorted((d["offset"], d["error_class"], d["value"]) for d in dead) == [
        (first, "not-an-envelope", bad[0]), (first + 1, "no-after-row", bad[1]),
        (first + 2, "value-does-not-fit", bad[2])]
    assert all(d["key"] == key and d["topic"] == topic and d["error_message"] for d in dead)
    (row,), _ = status(env.settings, load_tables(env.settings, name))
    assert row["dead_letters"] == 3 and row["lag"] == 0


def test_reconcile_reports_ok_in_flight_and_drift(env, spark, capsys):
    import json
    import time

    s = env.schema
    env.sql(f'CREATE TABLE "{s}".audited (id int PRIMARY KEY, v text)')
    env.sql(f'INSERT INTO "{s}".audited SELECT g, \'v\' || g FROM generate_series(1, 30) g')
    name = env.register_table("audited")
    assert env.cdc("register", "--table", name) == 0
    env.replicate("audited", env.marker())
    capsys.readouterr()
    assert env.cdc("reconcile", "--table", name, "--format", "json", "--wait", "30") == 0
    (row,) = json.loads(capsys.readouterr().out)["tables"]
    assert (row["status"], row["source_rows"], row["target_rows"], row["lag"]) == ("OK", 30, 30, 0)
    written = time.time()
    env.wait_captured(env.transaction(f'DELETE FROM "{s}".audited WHERE id <= 5'))
    assert env.cdc("reconcile", "--table", name, "--wait", "2") == 5  # the job has not run: in transit
    assert "IN-FLIGHT" in capsys.readouterr().out
    # status --check's bounds: 10 records not applied (5 deletes, their tombstones), the
    # oldest as old as the transaction
    assert env.cdc("status", "--table", name, "--json", "--max-lag", "9") == 0  # no --check: exit 0
    shown = json.loads(capsys.readouterr().out)
    (row,) = shown["tables"]
    assert row["lag"] == 10 and 0 < row["age_s"] <= time.time() - written + 1
    assert not shown["ok"] and shown["problems"] == [f"table {name}: lag 10 record(s) is over --max-lag 9"]
    assert env.cdc("status", "--table", name, "--check", "--max-lag", "10", "--max-age", "3600") == 0
    assert env.cdc("status", "--table", name, "--check", "--max-lag", "9") == 1
    assert f"check: table {name}: lag 10 record(s) is over --max-lag 9" in capsys.readouterr().out
    env.replicate("audited")
    assert env.cdc("reconcile", "--table", name, "--wait", "30") == 0
    assert " OK " in capsys.readouterr().out
    assert env.cdc("reconcile", "--table", name, "--deep", "--format", "json", "--wait", "30") == 0
    (row,) = json.loads(capsys.readouterr().out)["tables"]
    assert row["status"] == "OK" and row["deep"]["compared"] and row["deep"]["rows"] == {"source": 25, "target": 25}
    spark.sql(f"DELETE FROM {env.target_ref('audited')} WHERE id >= 28")  # behind the engine's back
    assert env.cdc("reconcile", "--table", name, "--format", "json", "--wait", "30") == 1
    (row,) = json.loads(capsys.readouterr().out)["tables"]
    assert (row["status"], row["source_rows"], row["target_rows"]) == ("DRIFT", 25, 22)
    assert env.cdc("reconcile", "--table", name, "--deep", "--format", "json", "--wait", "30") == 1
    (row,) = json.loads(capsys.readouterr().out)["tables"]
    assert [(k["kind"], k["key"]) for k in row["deep"]["keys"]] == [("missing", {"id": i}) for i in (28, 29, 30)]
    # One value changed behind the engine's back: the counts agree, --deep finds the row.
    env.sql(f'DELETE FROM "{s}".audited WHERE id >= 28')
    env.replicate("audited", env.marker())
    spark.sql(f"UPDATE {env.settings.catalog.name}.{s}.audited SET v = 'tampered' WHERE id = 12")
    assert env.cdc("reconcile", "--table", name, "--wait", "30") == 0
    assert env.cdc("reconcile", "--table", name, "--deep", "--wait", "30") == 1
    out = capsys.readouterr().out
    assert "0 missing in the target, 0 extra, 1 different" in out and "different id=12" in " ".join(out.split())
    html = env.settings.state_dir / f"reconcile-{s}.html"
    assert env.cdc("reconcile", "--table", name, "--format", "html", "--out", str(html), "--wait", "30") == 0
    page = html.read_text()
    assert page.count("<svg") == 1 and "<polyline" in page and "DRIFT" in page and name in page
    runs = sorted((r for r in env.catalog.load_table("cdc_meta.reconcile_history").scan().to_arrow().to_pylist()
                   if r["table_name"] == name), key=lambda r: r["checked_at"])
    assert [r["status"] for r in runs] == ["OK", "IN-FLIGHT", "OK", "OK", "DRIFT", "DRIFT", "OK", "DRIFT", "OK"]
    assert runs[-3]["deep_different"] is None and runs[-2]["deep_different"] == 1


def test_status_and_the_job_find_the_offsets_after_a_rewrite_and_an_outside_expiry(env, spark, capsys):
    """An operator rewrites the target's files and expires every snapshot but the current
    one (the rewrite, whose commit carries no cdc offsets): the offsets of the last batch
    are read from the metadata file written before the expiry, by status (pyiceberg) and by
    the job (Iceberg's Java API), which goes on from them."""
    rewrite_then_expire_outside(env, spark, capsys, "history_cut")


def rewrite_then_expire_outside(env, spark, capsys, t: str) -> None:
    from cdc.sinks.iceberg_target import IcebergTarget

    s = env.schema
    env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, label text)')
    env.sql(f'INSERT INTO "{s}".{t} SELECT g, \'e\' || g FROM generate_series(1, 20) g')
    name = env.register_table(t)
    assert env.cdc("register", "--table", name) == 0
    env.replicate(t)
    env.replicate(t, env.transaction(f'UPDATE "{s}".{t} SET label = \'u\' WHERE id <= 5',
                                     f'DELETE FROM "{s}".{t} WHERE id = 20'))
    batch = parse_offsets(env.summaries(t)[-1])
    assert batch and batch == parse_offsets(IcebergTarget(spark, env.target_ref(t)).last_committed_summary())
    ident = f"{env.settings.catalog.name}.system"
    spark.sql(f"CALL {ident}.rewrite_data_files(table => '{name}', options => map('rewrite-all', 'true'))")
    spark.sql(f"CALL {ident}.expire_snapshots(table => '{name}', older_than => current_timestamp(), retain_last => 1)")
    (kept,) = env.summaries(t)
    assert kept.get("cdc.offsets") is None  # the rewrite's commit, alone in the history
    capsys.readouterr()
    assert env.cdc("status", "--json", "--table", name) == 0
    (row,) = json.loads(capsys.readouterr().out)["tables"]
    topic = next(iter(batch))
    assert row["lag"] == 0 and row["age_s"] == 0 and row["committed_offsets"] == row["kafka_end_offsets"]
    assert {int(p): o for p, o in row["committed_offsets"].items()} == batch[topic]
    assert parse_offsets(IcebergTarget(spark, env.target_ref(t)).last_committed_summary()) == batch
    assert env.cdc("reconcile", "--table", name, "--wait", "30") == 0  # compared at the rewrite's snapshot
    env.replicate(t, env.transaction(f'INSERT INTO "{s}".{t} VALUES (21, \'after\')'))
    assert assert_equal(env.dsn, s, t, env.catalog, name, ("id",)) == 20
    assert parse_offsets(env.summaries(t)[-1])[topic][0] == end_offset(env, topic)
