"""Debezium with the Avro converter and the stack's schema registry: Confluent's wire
format decoded per writer schema id in Spark, through a schema change; bad records in an
Avro topic go to the dead letters. Every type of the JSON suite, compared row for row."""
from __future__ import annotations

import io
import json
import struct

import fastavro
import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conftest import _cleanup, end_offset, postgres_env
from tests.integration.test_end_to_end import ALL_TYPES, FLOAT32, ROW, create_mood


@pytest.fixture(scope="module")
def aenv(it_env, stack, settings, tmp_path_factory):
    env = postgres_env(stack, settings, tmp_path_factory.mktemp("avro"), it_env.source + "a", format="avro")
    create_mood(env)
    env.sql(ALL_TYPES.format(s=env.schema))
    env.sql(f'INSERT INTO "{env.schema}".all_types VALUES ' + ", ".join(ROW.format(id=i, s=env.schema)
                                                                    for i in range(1, 31)))
    env.sql(f'INSERT INTO "{env.schema}".all_types (id) VALUES (1000)')
    env.register_table("all_types")
    assert env.cdc("register") == 0
    yield env
    _cleanup(env)


def records(env, topic: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a topic, raw."""
    consumer = Consumer({"bootstrap.servers": env.settings.kafka_bootstrap, "group.id": "cdc-test-avro",
                         "enable.auto.commit": False})
    end = end_offset(env, topic)
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    while len(out) < end:
        msg = consumer.poll(10)
        assert msg is not None, f"topic {topic}: {len(out)} of {end} records read"
        out.append((msg.key(), msg.value()))
    consumer.close()
    return out


def decode_with_fastavro(env, value: bytes) -> dict:
    """A second reader of the wire format: the writer schema from the registry, fastavro."""
    assert value[0] == 0
    (schema_id,) = struct.unpack(">I", value[1:5])
    text = requests.get(f"{env.settings.registry_url}/schemas/ids/{schema_id}", timeout=10).json()["schema"]
    schema = fastavro.parse_schema(json.loads(text))
    return {"schema_id": schema_id, **fastavro.schemaless_reader(io.BytesIO(value[5:]), schema)}


def test_every_type_through_avro_and_a_schema_change(aenv):
    s = aenv.schema
    topic = f"{aenv.source}.{s}.all_types"
    aenv.replicate("all_types", aenv.marker())
    assert aenv.assert_equal("all_types", float32=FLOAT32) == 31
    aenv.replicate("all_types", aenv.transaction(
        f'UPDATE "{s}".all_types SET name = \'renamed\', amount = -0.01, flag = NULL WHERE id <= 5',
        f'DELETE FROM "{s}".all_types WHERE id BETWEEN 10 AND 14',
        f'INSERT INTO "{s}".all_types VALUES ' + ", ".join(ROW.format(id=i, s=s) for i in range(100, 105))))
    assert aenv.assert_equal("all_types", float32=FLOAT32) == 31 - 5 + 5
    # A new column mid-stream: a new writer schema; events before and after it in one batch.
    before_alter = aenv.transaction(f'UPDATE "{s}".all_types SET i = -1 WHERE id = 1')
    aenv.sql(f'ALTER TABLE "{s}".all_types ADD COLUMN note text')
    aenv.replicate("all_types", max(before_alter, aenv.transaction(
        f'UPDATE "{s}".all_types SET note = \'with note\' WHERE id <= 3',
        f'INSERT INTO "{s}".all_types (id, note) VALUES (2000, \'new row\')')))
    assert aenv.assert_equal("all_types", float32=FLOAT32) == 32
    values = [v for _, v in records(aenv, topic) if v is not None]
    first, last = decode_with_fastavro(aenv, values[0]), decode_with_fastavro(aenv, values[-1])
    assert first["schema_id"] != last["schema_id"] and "note" not in first["after"]
    assert last["after"]["note"] == "new row" and last["op"] == "c"


def test_bad_records_in_an_avro_topic_go_to_the_dead_letters(aenv):
    s = aenv.schema
    topic = f"{aenv.source}.{s}.all_types"
    key, value = next(kv for kv in reversed(records(aenv, topic)) if kv[1] is not None)
    first = end_offset(aenv, topic)
    bad = [b"plain garbage", b"\x00\x7f\xff\xff\xf0 an id the registry does not know",
           value[:5] + b"\xff" * 7]  # a known writer schema, a body that is not of it
    producer = Producer({"bootstrap.servers": aenv.settings.kafka_bootstrap})
    for value in bad:
        producer.produce(topic, key=key, value=value)
    producer.flush(30)
    aenv.replicate("all_types", aenv.transaction(f'UPDATE "{s}".all_types SET note = \'after bad\' WHERE id = 2'))
    assert aenv.assert_equal("all_types", float32=FLOAT32) == 32
    dead = aenv.catalog.load_table(f"{s}.all_types__cdc_dead_letters").scan().to_arrow().to_pylist()
    assert sorted((d["offset"], d["error_class"], d["value"]) for d in dead) == [
        (first + i, "not-an-envelope", v) for i, v in enumerate(bad)]


def test_a_writer_schema_the_target_cannot_take_is_a_dead_letter(aenv):
    """A writer schema whose row adds a column differing only by case from one the target
    has: its record is a dead letter with the reason, never decoded into the target; the
    table goes on."""
    s = aenv.schema
    topic = f"{aenv.source}.{s}.all_types"
    key, value = next(kv for kv in reversed(records(aenv, topic)) if kv[1] is not None)
    decoded = decode_with_fastavro(aenv, value)
    schema = json.loads(requests.get(f"{aenv.settings.registry_url}/schemas/ids/{decoded.pop('schema_id')}",
                                     timeout=10).json()["schema"])
    row = next(t for f in schema["fields"] if f["name"] == "before" for t in f["type"] if isinstance(t, dict))
    row["fields"].append({"name": "NAME", "type": ["null", "string"], "default": None})
    answer = requests.post(f"{aenv.settings.registry_url}/subjects/{topic}-twin/versions", timeout=10,
                           headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
                           json={"schema": json.dumps(schema)})
    assert answer.ok, answer.text
    for image in ("before", "after"):
        if decoded[image] is not None:
            decoded[image]["NAME"] = "twin"
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), decoded)
    first = end_offset(aenv, topic)
    producer = Producer({"bootstrap.servers": aenv.settings.kafka_bootstrap})
    producer.produce(topic, key=key, value=b"\x00" + struct.pack(">I", answer.json()["id"]) + body.getvalue())
    producer.flush(30)
    aenv.replicate("all_types", aenv.transaction(f'UPDATE "{s}".all_types SET note = \'after twin\' WHERE id = 3'))
    assert aenv.assert_equal("all_types", float32=FLOAT32) == 32
    dead = [d for d in aenv.catalog.load_table(f"{s}.all_types__cdc_dead_letters").scan().to_arrow().to_pylist()
            if d["offset"] >= first]
    assert [(d["offset"], d["error_class"]) for d in dead] == [(first, "schema-refused")]
    assert "differ only by case: 'name', 'NAME'" in dead[0]["error_message"]
    names = [f.name.lower() for f in aenv.catalog.load_table(f"{s}.all_types").schema().fields]
    assert names.count("name") == 1


def test_the_cut_of_an_avro_source_reads_its_avro_transaction_topic(aenv, capsys):
    """`cdc cut` reads an Avro source's transaction topic by its writer schemas: a transfer
    between two tables, applied to one, holds the cut back; applied to both, the cut is at
    it, and the balances read at the cut's snapshots add up."""
    s = aenv.schema
    names = [f"{s}.debit", f"{s}.credit"]
    for t in ("debit", "credit"):
        aenv.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, balance int NOT NULL)')
        aenv.sql(f'INSERT INTO "{s}".{t} SELECT g, 100 FROM generate_series(1, 3) g')
        aenv.register_table(t)
    assert aenv.cdc("register", "--table", names[0], "--table", names[1]) == 0
    aenv.replicate(("debit", "credit"), aenv.marker())
    marker = aenv.transaction(f'UPDATE "{s}".debit SET balance = balance - 40 WHERE id = 1',
                              f'UPDATE "{s}".credit SET balance = balance + 40 WHERE id = 2')
    aenv.replicate("debit", marker)

    def cut() -> dict:
        capsys.readouterr()
        assert aenv.cdc("cut", "--json") == 0
        return json.loads(capsys.readouterr().out)["sources"][0]

    held = cut()
    assert "change(s) of transaction" in held["held"][names[1]] and names[0] not in held["left_out"], held
    aenv.replicate("credit", marker)
    found = cut()
    assert found["transaction"] and not found["held"] and not found["left_out"], found
    at = {n: aenv.catalog.load_table(n).scan(snapshot_id=found["tables"][n]).to_arrow().to_pylist() for n in names}
    assert sum(r["balance"] for rows in at.values() for r in rows) == 600
    assert {r["id"]: r["balance"] for r in at[names[1]]}[2] == 140


def _applied_in_batches(env, capsys, marker, records: int) -> list[str]:
    """all_types replicated up to `marker` in batches of at most `records` records, in one run:
    the lines its batches logged."""
    env.register_table("all_types", options={"max_offsets_per_trigger": records})
    try:
        capsys.readouterr()
        env.replicate("all_types", marker)
        return [line for line in capsys.readouterr().err.splitlines() if " applied in " in line]
    finally:
        env.register_table("all_types")


def test_batches_of_writer_schemas_the_job_judged_are_written_by_one_task(aenv, capsys):
    """Once a job has judged a table's writer schemas (its first batch's first record's), its
    batches of those schemas alone, the first among them, are decoded and written by the
    direct path's one task, as JSON ones are; every type still equals the source."""
    s = aenv.schema
    marker = None
    for i in range(9):
        marker = aenv.transaction(f'UPDATE "{s}".all_types SET name = \'batch {i}\', amount = {i}.5 '
                                  f'WHERE id = {100 + i % 5}')
    aenv.transaction(f'DELETE FROM "{s}".all_types WHERE id = 104')
    applied = _applied_in_batches(aenv, capsys, marker, 3)  # several batches in one run
    assert len(applied) >= 3, applied
    assert "schema" in applied[0], applied  # the first: its first record's writer schemas judged
    direct = [line for line in applied if "direct" in line and "direct refused" not in line and "decode" not in line]
    assert len(direct) == len(applied), applied
    assert aenv.assert_equal("all_types", float32=FLOAT32) == 31


def _twin(env, message: bytes, subject: str) -> bytes:
    """`message` again in a writer schema of its own: its schema with a doc added, registered
    under `subject` (a new id, the same fields)."""
    (schema_id,) = struct.unpack(">I", message[1:5])
    schema = json.loads(requests.get(f"{env.settings.registry_url}/schemas/ids/{schema_id}", timeout=10)
                        .json()["schema"])
    answer = requests.post(f"{env.settings.registry_url}/subjects/{subject}/versions", timeout=10,
                           headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
                           json={"schema": json.dumps({**schema, "doc": "twin"})})
    assert answer.ok, answer.text
    assert answer.json()["id"] != schema_id
    return b"\x00" + struct.pack(">I", answer.json()["id"]) + message[5:]


def test_a_writer_schema_first_seen_in_a_later_batch_is_judged_not_a_dead_letter(aenv, capsys):
    """A job's later batch is decoded trusting the writer schemas it judged (no scan of the
    batch for them, as a JSON batch trusts its schema parts); a record whose key or value
    comes in a writer schema the job has not decoded yet is seen, and the batch judged and
    decoded again: no dead letter, the table equal to the source."""
    s = aenv.schema
    topic = f"{aenv.source}.{s}.all_types"
    aenv.replicate("all_types", aenv.marker())
    marker = aenv.transaction(f'UPDATE "{s}".all_types SET name = \'twins\' WHERE id = 6')
    aenv.wait_captured(marker)
    key, value = next(kv for kv in reversed(records(aenv, topic)) if kv[1] is not None)
    first = end_offset(aenv, topic)
    producer = Producer({"bootstrap.servers": aenv.settings.kafka_bootstrap})
    for twin in ((_twin(aenv, key, f"{topic}-key-twin"), value), (key, _twin(aenv, value, f"{topic}-value-twin"))):
        producer.produce(topic, key=twin[0], value=twin[1])
    producer.flush(30)
    marker = aenv.transaction(f'UPDATE "{s}".all_types SET name = \'after twins\' WHERE id = 7')
    applied = _applied_in_batches(aenv, capsys, marker, 1)  # a batch a record
    assert len(applied) >= 3, applied
    assert aenv.assert_equal("all_types", float32=FLOAT32) >= 31
    dead = aenv.catalog.load_table(f"{s}.all_types__cdc_dead_letters").scan().to_arrow().to_pylist()
    assert [(d["offset"], d["error_class"]) for d in dead if d["offset"] >= first] == []
