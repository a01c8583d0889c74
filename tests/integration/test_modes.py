"""History and soft-delete modes, masked and excluded columns, through the real connector:
PostgreSQL -> Debezium -> Kafka -> `cdc run` -> Iceberg, read back with pyiceberg and
pyarrow, reconciled by `cdc reconcile --deep`."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.parquet as pq
import pytest
import yaml

from cdc.planning.protect import key_fingerprint, mask_value
from cdc.register.connector import ConnectClient, connector_name
from tests.conftest import end_offset

MASK_KEY = b"the integration tier's masking key"
EMAILS = {1: "ada@example.org", 2: "grace@example.org", 3: "edsger@example.org"}
SSNS = {1: "078-05-1120", 2: "219-09-9999", 3: "457-55-5462"}
# `profiles`: masked columns of every kind but text, and the text cdc hashes for each
# (the target value as Spark writes it), by row.
PROFILE_COLUMNS = ("born date, salary numeric(10,2), seen timestamp(6), seen_ms timestamp(3), login timestamptz, "
                   "score double precision, level real, vip boolean, photo bytea, wake time, pause interval, "
                   "visits bigint, mood smallint")
PROFILES = {
    1: ("'1987-06-05', 1234.5, '2024-05-01 10:00:00.5', '2024-05-01 10:00:00.123', '2024-05-01 12:00:00.123456+02', "
        "1e20, 0.001, true, 'pixels'::bytea, '10:00:00.00025', '1 day 02:00:00', 9007199254740993, -7",
        {"born": "1987-06-05", "salary": "1234.50", "seen": "2024-05-01 10:00:00.5",
         "seen_ms": "2024-05-01 10:00:00.123", "login": "2024-05-01 10:00:00.123456", "score": "1.0E20",
         "level": "0.001", "vip": "true", "photo": "pixels", "wake": "10:00:00.000250",
         "visits": "9007199254740993", "mood": "-7"}),
    2: ("'0044-03-15', -0.01, 'infinity', '1900-01-01 00:00:00', '-infinity', -0.5, 3.25, false, '\\x00ff'::bytea, "
        "'23:59:59.999999', '-3 mons', 0, 0",
        {"born": "0044-03-15", "salary": "-0.01", "seen": "9999-12-31 23:59:59.999999",
         "seen_ms": "1900-01-01 00:00:00", "login": "0001-01-01 00:00:00", "score": "-0.5", "level": "3.25",
         "vip": "false", "wake": "23:59:59.999999", "visits": "0", "mood": "0"}),
}
PROFILE_MASKED = tuple(c.split()[0] for c in PROFILE_COLUMNS.split(", "))


@pytest.fixture(scope="module")
def env(it_env, tmp_path_factory):
    """The run's source with a masking key in its cdc.yaml, and two tables: `people`
    (history, email masked, ssn excluded) and `accounts` (soft delete)."""
    key_file = tmp_path_factory.mktemp("mask") / "key"
    key_file.write_bytes(MASK_KEY)
    doc = yaml.safe_load(it_env.config.read_text())
    doc["masking"] = {"key_file": str(key_file)}
    it_env.config.write_text(yaml.safe_dump(doc))
    s = it_env.schema
    it_env.sql(f'CREATE TABLE "{s}".people (id int PRIMARY KEY, name text, email text, ssn text)')
    it_env.sql(f'INSERT INTO "{s}".people VALUES ' + ", ".join(
        f"({i}, 'person {i}', '{EMAILS[i]}', '{SSNS[i]}')" for i in EMAILS))
    it_env.sql(f'CREATE TABLE "{s}".accounts (id int PRIMARY KEY, balance numeric(12,2))')
    it_env.sql(f'INSERT INTO "{s}".accounts VALUES (1, 10), (2, 20), (3, 30)')
    it_env.sql(f'CREATE TABLE "{s}".profiles (id int PRIMARY KEY, note text, {PROFILE_COLUMNS})')
    it_env.sql(f'INSERT INTO "{s}".profiles VALUES ' + ", ".join(f"({i}, 'row {i}', {v})" for i, (v, _) in
                                                                   PROFILES.items()))
    tables = it_env.settings.path(it_env.settings.tables_dir)
    for table, extra in (("people", {"mode": "history", "mask": ["email"], "exclude": ["ssn"]}),
                         ("accounts", {"mode": "soft_delete"}), ("profiles", {"mask": list(PROFILE_MASKED)})):
        body = {"name": f"{s}.{table}", "source": {"schema": s, "table": table}, **extra}
        (tables / f"{s}.{table}.yaml").write_text(yaml.safe_dump(body))
        assert it_env.cdc("register", "--table", f"{s}.{table}") == 0
    yield it_env
    for table in ("people", "accounts", "profiles"):
        (tables / f"{s}.{table}.yaml").unlink()


def test_history_soft_delete_and_masks_end_to_end(env, capsys):
    s = env.schema
    for table in ("people", "accounts"):  # the initial snapshot, logged as JSON lines
        assert env.cdc("--log-format", "json", "run", "--available-now", "--table", f"{s}.{table}") == 0
        events = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
        applied = [e for e in events if e["event"] == "batch-applied"]
        assert applied and applied[0]["table"] == f"{s}.{table}" and applied[0]["records"] == 3
    for n in (1, 2, 3):  # one row updated three times, each in its own transaction, then deleted
        env.transaction(f"UPDATE \"{s}\".people SET name = 'person 1 v{n}' WHERE id = 1")
    env.transaction(f'DELETE FROM "{s}".people WHERE id = 1')
    last = env.transaction(f'DELETE FROM "{s}".accounts WHERE id = 2',
                           f'UPDATE "{s}".accounts SET balance = 31 WHERE id = 3')
    env.wait_captured(last)
    for table in ("people", "accounts"):
        assert env.cdc("run", "--available-now", "--table", f"{s}.{table}") == 0

    people = env.catalog.load_table(f"{s}.people")
    assert "ssn" not in {f.name for f in people.schema().fields}
    rows = sorted(people.scan().to_arrow().to_pylist(), key=lambda r: (r["id"], r["_cdc_position"]))
    one = [r for r in rows if r["id"] == 1]
    assert [r["name"] for r in one] == ["person 1", "person 1 v1", "person 1 v2", "person 1 v3"]
    assert all(a["_cdc_valid_to"] == b["_cdc_valid_from"] for a, b in zip(one, one[1:]))  # contiguous
    assert one[-1]["_cdc_valid_to"] is not None and not any(r["_cdc_current"] for r in one)  # deleted
    assert {r["id"]: (r["email"], r["_cdc_current"]) for r in rows if r["id"] != 1} == {
        i: (mask_value(EMAILS[i], MASK_KEY), True) for i in (2, 3)}

    accounts = {r["id"]: r for r in env.catalog.load_table(f"{s}.accounts").scan().to_arrow().to_pylist()}
    assert {i: (float(r["balance"]), r["_cdc_deleted"]) for i, r in accounts.items()} == {
        1: (10.0, False), 2: (20.0, True), 3: (31.0, False)}

    clear = [*EMAILS.values(), *SSNS.values()]
    assert not cleartext_in_files(people.location(), clear)
    # Nor in Kafka: the connector left ssn out and hashed email (cdc's MaskColumns), with
    # the key as a reference its REST config shows instead of the key.
    assert not cleartext_in_topic(env.settings.kafka_bootstrap, f"{env.source}.{s}.people", clear)
    config = ConnectClient.of(env.settings).config(connector_name(env.source))
    masked = {c for c in config["transforms.cdcmask.columns"].split(",") if c.split(".")[1] in ("people", "profiles")}
    assert masked == {f"{s}.people.email", *[f"{s}.profiles.{c}" for c in PROFILE_MASKED]}  # beside earlier modules'
    assert config["transforms.cdcmask.key.password"].startswith("${file:") and MASK_KEY.decode() not in json.dumps(config)

    # The current rows equal the source's: counted, and compared row by row (masked columns by hash).
    for table in ("people", "accounts"):
        assert env.cdc("reconcile", "--table", f"{s}.{table}", "--deep") == 0


def test_lineage_names_each_step_and_what_masking_withheld(env, tmp_path):
    """With `lineage` on (a file), `register` sends the capture of the source table into its
    topic and `run` the apply of the topic to the target (START, then COMPLETE), named as
    OpenLineage names them, with the masked and excluded columns and the key's fingerprint,
    and nothing of the key or a clear value."""
    s, src = env.schema, env.settings.sources[env.source]
    sent_to = tmp_path / "lineage.ndjson"
    doc = yaml.safe_load(env.config.read_text())
    doc["lineage"] = {"transport": "file", "file": str(sent_to), "namespace": "it"}
    config = tmp_path / "cdc.yaml"
    config.write_text(yaml.safe_dump(doc))
    assert env.cdc("--config", str(config), "register", "--table", f"{s}.people") == 0
    assert env.cdc("--config", str(config), "run", "--available-now", "--table", f"{s}.people") == 0
    text = sent_to.read_text()
    assert MASK_KEY.decode() not in text and not any(v in text for v in [*EMAILS.values(), *SSNS.values()])
    sent = [json.loads(line) for line in text.splitlines()]
    assert [(e["job"]["namespace"], e["job"]["name"], e["eventType"]) for e in sent] == [
        ("it", f"capture.{s}.people", "COMPLETE"), ("it", f"apply.{s}.people", "START"),
        ("it", f"apply.{s}.people", "COMPLETE")]
    capture, start, done = sent
    topic = (f"kafka://{env.settings.kafka_bootstrap.split(',')[0]}", f"{env.source}.{s}.people")
    assert [(d["namespace"], d["name"]) for d in capture["inputs"]] == [
        (f"postgres://{src.host}:{src.port}", f"{src.database}.{s}.people")]
    assert [(d["namespace"], d["name"]) for d in capture["outputs"]] == [topic]
    people = env.catalog.load_table(f"{s}.people")
    assert [(d["namespace"], d["name"]) for d in done["inputs"]] == [topic]
    assert [(d["namespace"], d["name"]) for d in done["outputs"]] == [("file", urlparse(people.location()).path)]
    assert start["run"]["runId"] == done["run"]["runId"] != capture["run"]["runId"]
    for event in (capture, done):
        facets = event["outputs"][0]["facets"]
        assert [f["name"] for f in facets["schema"]["fields"]] == ["id", "name", "email"]  # ssn never captured
        assert facets["cdc_protection"] | {"_producer": None, "_schemaURL": None} == {
            "masked": ["email"], "excluded": ["ssn"], "maskKeyFingerprint": key_fingerprint(MASK_KEY),
            "_producer": None, "_schemaURL": None}
    steps = [e["outputs"][0]["facets"]["columnLineage"]["fields"]["email"]["inputFields"][0]["transformations"][0]
             for e in (capture, done)]
    assert [(t["subtype"], t["masking"]) for t in steps] == [("TRANSFORMATION", True), ("IDENTITY", False)]
    assert done["outputs"][0]["facets"]["symlinks"]["identifiers"] == [
        {"namespace": f"iceberg://{env.settings.catalog.name}", "name": f"{s}.people", "type": "TABLE"}]


def test_masked_columns_of_every_type_are_hashed_by_the_connector(env):
    """Dates, timestamps, numbers, booleans, bytes, times and intervals are hashed before
    Kafka: each masked field of every change in the topic is a hash, and the target holds
    the hash of the text Spark writes for the value, which `reconcile --deep` (hashing
    the source's rows in Spark) finds equal."""
    import re

    s = env.schema
    assert env.cdc("run", "--available-now", "--table", f"{s}.profiles") == 0
    env.wait_captured(env.transaction(
        f'UPDATE "{s}".profiles SET born = born + 1, salary = NULL, vip = NOT vip WHERE id = 1',
        f'DELETE FROM "{s}".profiles WHERE id = 2'))
    assert env.cdc("run", "--available-now", "--table", f"{s}.profiles") == 0

    changes = topic_payloads(env.settings.kafka_bootstrap, f"{env.source}.{s}.profiles")
    assert {p["op"] for p, _ in changes} >= {"r", "u", "d"}
    for payload, header in changes:
        assert header == f"{key_fingerprint(MASK_KEY)}:{','.join(sorted(PROFILE_MASKED))}", header
        for row in (payload["before"], payload["after"]):
            assert row is None or all(row[c] is None or re.fullmatch("[0-9a-f]{64}", row[c]) for c in PROFILE_MASKED), row
    (row,) = env.catalog.load_table(f"{s}.profiles").scan().to_arrow().to_pylist()
    expected = PROFILES[1][1] | {"born": "1987-06-06", "vip": "false"}
    shown = [c for c in PROFILE_MASKED if c != "pause"]  # an interval's text is Debezium's: reconcile compares it
    assert {c: row[c] for c in shown} == {c: mask_value(expected[c], MASK_KEY) if c != "salary" else None
                                          for c in shown}
    assert row["note"] == "row 1"
    assert env.cdc("reconcile", "--table", f"{s}.profiles", "--deep") == 0


def topic_payloads(bootstrap: str, topic: str) -> list[tuple[dict, str | None]]:
    """The payload and cdc.masked header of every change event of the topic."""
    found = []
    for msg in topic_messages(bootstrap, topic):
        if msg.value() is not None:
            header = dict(msg.headers() or []).get("cdc.masked")
            found.append((json.loads(msg.value())["payload"], header.decode() if header else None))
    return found


def topic_messages(bootstrap: str, topic: str):
    """Every record the topic holds now, read from its first offset to its end."""
    from confluent_kafka import Consumer, TopicPartition

    from cdc.control.kafka import watermarks

    ends = watermarks(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "it-messages", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, lo) for p, (lo, _) in ends.items()])
    left = sum(hi - lo for lo, hi in ends.values())
    try:
        while left > 0:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None, f"{topic}: {left} record(s) not read"
            left -= 1
            yield msg
    finally:
        consumer.close()


def cleartext_in_files(location: str, values: list[str]) -> list[str]:
    """Where any of `values` appears in the table's files: in a Parquet file's cells or
    column statistics (read decompressed), or in the bytes of any other file."""
    found = []
    for path in Path(urlparse(location).path).rglob("*"):
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            f = pq.ParquetFile(path)
            cells = {str(v) for col in f.read().columns for v in col.to_pylist()}
            meta = f.metadata
            stats = {str(x) for g in range(meta.num_row_groups) for c in range(meta.num_columns)
                     if (st := meta.row_group(g).column(c).statistics) is not None and st.has_min_max
                     for x in (st.min, st.max)}
            found += [f"{path}: {v}" for v in values if any(v in x for x in cells | stats)]
        else:
            data = path.read_bytes()
            found += [f"{path}: {v}" for v in values if v.encode() in data]
    return found


def cleartext_in_topic(bootstrap: str, topic: str, values: list[str]) -> list[str]:
    """Where any of `values` appears in the keys, values or headers of the topic's records."""
    found = []
    for msg in topic_messages(bootstrap, topic):
        data = b"".join([msg.key() or b"", msg.value() or b"", *[v or b"" for _, v in msg.headers() or []]])
        found += [f"{topic}@{msg.offset()}: {v}" for v in values if v.encode() in data]
    return found


def test_a_bad_record_the_job_masks_keeps_no_clear_value_in_the_dead_letters(env):
    """A record of a masked table without the connector's cdc.masked header (written before
    it masked) that is also bad is set aside without its raw value, and no masked value
    reaches the dead-letter table's files in clear."""
    from confluent_kafka import Producer

    from cdc.config.clients import kafka_access

    s = env.schema
    topic = f"{env.source}.{s}.people"
    record = next(r for r in (json.loads(m.value()) for m in topic_messages(env.settings.kafka_bootstrap, topic)
                              if m.value()) if r["payload"]["after"])
    clear = "forged.clear@example.com"
    record["payload"]["after"] = {**record["payload"]["after"], "id": 90, "email": clear}
    record["payload"]["op"] = "x"  # no operation Debezium writes: a dead letter
    producer = Producer(kafka_access(env.settings).client())
    producer.produce(topic, key=json.dumps({"schema": None, "payload": {"id": 90}}).encode(),
                     value=json.dumps(record).encode())  # no cdc.masked header: the job must hash it
    assert producer.flush(30) == 0
    env.replicate("people")
    dead = env.catalog.load_table(f"{s}.people__cdc_dead_letters")
    (row,) = [r for r in dead.scan().to_arrow().to_pylist() if r["offset"] == end_offset(env, topic) - 1]
    assert row["value"] is None and "withheld" in row["error_message"], row
    assert clear not in json.dumps(row, default=str)
    assert not cleartext_in_files(dead.location(), [clear])


def test_another_masking_key_is_refused(env, tmp_path, capsys):
    """A target records its key's fingerprint: register, run, bootstrap and a deep reconcile
    with another key are refused, and the target is unchanged."""
    from cdc.planning.protect import PROP_MASK_KEY, key_fingerprint

    s = env.schema
    people = env.catalog.load_table(f"{s}.people")
    assert people.properties[PROP_MASK_KEY] == key_fingerprint(MASK_KEY)
    assert MASK_KEY.decode() not in json.dumps(people.properties)
    snapshot = people.current_snapshot().snapshot_id
    other = tmp_path / "other-key"
    other.write_bytes(b"another key")
    doc = yaml.safe_load(env.config.read_text())
    doc["masking"] = {"key_file": str(other)}
    config = tmp_path / "cdc.yaml"
    config.write_text(yaml.safe_dump(doc))
    env.wait_captured(env.transaction(f"UPDATE \"{s}\".people SET email = 'new@example.org' WHERE id = 2"))
    for args in (("register", "--table", f"{s}.people"), ("run", "--available-now", "--table", f"{s}.people"),
                 ("bootstrap", "--yes", "--table", f"{s}.people"), ("reconcile", "--deep", "--table", f"{s}.people")):
        capsys.readouterr()
        assert env.cdc("--config", str(config), *args) != 0, args
        err = capsys.readouterr().err
        assert "the masking key is not the one its target's hashes were made with" in err, (args, err)
        assert f"the target's {key_fingerprint(MASK_KEY)}" in err and "another key" not in err
    people = env.catalog.load_table(f"{s}.people")
    assert people.current_snapshot().snapshot_id == snapshot  # nothing written with the other key
    assert env.cdc("run", "--available-now", "--table", f"{s}.people") == 0  # the right key goes on
