"""cdc against a secured Kafka: the stack's SASL_SSL listener (SCRAM-SHA-512 over TLS, a
certificate of the stack's own CA). The stack's Connect worker produces through it, and
every client of cdc here (admin, consumers, Spark's Kafka source) is given that listener
alone. No secret it was given shows in any output or log."""
from __future__ import annotations

import dataclasses
import json
import secrets

import pytest
import yaml

from cdc.config import load_settings
from cdc.planning.protect import mask_value
from tests.conftest import _cleanup, postgres_env

MASK_KEY = f"mask-{secrets.token_hex(8)}"


def secured_config(env, stack, path, password_file=None) -> None:
    """`env`'s cdc.yaml at `path`, its Kafka the SASL_SSL listener only, its masking key
    from the environment."""
    sasl = stack.status()["kafka_sasl"]
    doc = yaml.safe_load(env.config.read_text())
    doc["kafka"] = {"bootstrap_servers": sasl["bootstrap"], "security": {
        "protocol": sasl["protocol"], "sasl_mechanism": sasl["sasl_mechanism"], "username": sasl["username"],
        "password_file": str(password_file or sasl["password_file"]), "ca_file": sasl["ca_file"]}}
    doc["masking"] = {"key": "${CDC_IT_MASK_KEY}"}
    path.write_text(yaml.safe_dump(doc))


@pytest.fixture(scope="module")
def sec(stack, spark, settings, it_env, tmp_path_factory):
    """A source of its own (its connector, slot and masking key), configured as above."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CDC_IT_MASK_KEY", MASK_KEY)
        env = postgres_env(stack, settings, tmp_path_factory.mktemp("sec"), it_env.source + "k")
        secured_config(env, stack, env.config)
        env = dataclasses.replace(env, settings=load_settings(env.config))
        yield env
        _cleanup(env)


def test_register_run_status_and_reconcile_over_sasl_ssl_only(sec, stack, capsys):
    worker = (stack.settings.state_dir / "connect" / "worker.properties").read_text()
    assert f"bootstrap.servers={stack.kafka.sasl_bootstrap}\n" in worker and "producer.security.protocol=SASL_SSL" in worker
    env, s = sec, sec.schema
    assert env.settings.kafka_bootstrap == stack.kafka.sasl_bootstrap != stack.kafka.bootstrap
    env.sql(f'CREATE TABLE "{s}".guarded (id int PRIMARY KEY, v text, email text)')
    env.sql(f'INSERT INTO "{s}".guarded SELECT g, \'v\' || g, \'user\' || g || \'@example.org\' '
            f'FROM generate_series(1, 40) g')
    name = env.register_table("guarded", mask=["email"])
    outputs = []
    capsys.readouterr()
    assert env.cdc("register", "--table", name) == 0  # the topic made, the snapshot awaited, over SASL_SSL
    outputs.append(capsys.readouterr())
    env.replicate("guarded", env.transaction(
        f'UPDATE "{s}".guarded SET v = v || \'+\' WHERE id % 3 = 0',
        f'DELETE FROM "{s}".guarded WHERE id % 7 = 0',
        f'INSERT INTO "{s}".guarded VALUES (100, \'new\', \'new@example.org\')'))
    outputs.append(capsys.readouterr())
    rows = {r["id"]: r for r in env.target_records("guarded")}
    assert len(rows) == 36 and rows[100]["email"] == mask_value("new@example.org", MASK_KEY.encode())
    assert rows[1]["email"] == mask_value("user1@example.org", MASK_KEY.encode()) and rows[3]["v"] == "v3+"
    assert env.cdc("status", "--check", "--json", "--table", name) == 0
    out = capsys.readouterr()
    outputs.append(out)
    row = json.loads(out.out)["tables"][0]
    assert row["table"] == name and row["lag"] == 0
    assert env.cdc("reconcile", "--table", name, "--format", "json", "--deep", "--wait", "30") == 0
    out = capsys.readouterr()
    outputs.append(out)
    (row,) = json.loads(out.out)["tables"]
    assert (row["status"], row["source_rows"], row["target_rows"], row["lag"]) == ("OK", 36, 36, 0)
    assert env.cdc("stack", "status", "--json") == 0
    outputs.append(capsys.readouterr())

    # No secret it was given, in any output or log: the Kafka user's password, the source's
    # password, the masking key.
    state = stack.settings.state_dir
    given = {"kafka password": stack.kafka.sasl_password_file.read_text().strip(),
             "postgres password": stack.postgres.password(), "masking key": MASK_KEY}
    logs = [p for d in (state / "logs", state / "run") for p in d.rglob("*") if p.is_file()]
    assert any(p.name == "connect.log" for p in logs) and any(p.name.startswith("spark") for p in logs)
    texts = {f"output {i}": o.out + o.err for i, o in enumerate(outputs)}
    texts.update({str(p): p.read_text(errors="replace") for p in logs})
    shown = [f"{what} in {where}" for where, text in texts.items() for what, value in given.items() if value in text]
    assert not shown


def test_a_wrong_kafka_password_is_refused_and_never_shown(sec, stack, tmp_path, capsys):
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password-4711")
    config = tmp_path / "cdc.yaml"
    secured_config(sec, stack, config, password_file=wrong)
    capsys.readouterr()
    assert sec.cdc("--config", str(config), "status") == 2  # refused: told at once, not after a timeout
    out = capsys.readouterr()
    assert f"Kafka at {stack.kafka.sasl_bootstrap} refused cdc" in out.err and "SASL authentication" in out.err
    assert "not-the-password-4711" not in out.out + out.err
