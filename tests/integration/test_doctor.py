"""`cdc doctor` on the real stack: a healthy registered table passes every check; a table
Debezium or Spark would refuse, or a user without the privileges capture needs, fails with
the named problem and its fix, and the fix makes it pass."""
from __future__ import annotations

import json
import secrets

import yaml

from cdc.config import load_settings
from tests.conftest import Env, free_port, write_config


def own_env(env, work, **source) -> Env:
    """The env's source (its schema, slot and publication) under a cdc.yaml and tables
    directory of this module's own; `source` overrides settings (user, password_file)."""
    work.mkdir()
    base = dict(yaml.safe_load(env.config.read_text())["sources"][env.source], **source)
    config = write_config(env.settings, work, {env.source: base})
    return Env(config, load_settings(config), env.source, env.schema, env.dsn, env.catalog, kind=env.kind)


def doctor(env, capsys, *args) -> tuple[int, list[dict]]:
    """Exit code and checks of `cdc doctor --json` for the env's source."""
    capsys.readouterr()
    code = env.cdc("doctor", "--source", env.source, "--json", *args)
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    return code, doc["checks"]


def one(checks: list[dict], name: str, table: str | None = None) -> dict:
    (found,) = [c for c in checks if c["name"] == name and c["table"] == table]
    return found


def register(env, table: str, **body) -> str:
    name = f"{env.schema}.{table}"
    path = env.settings.path(env.settings.tables_dir) / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "source": {"schema": env.schema, "table": table}, **body}))
    return name


POSTGRES_SERVER = {"connection", "wal_level", "replication_slots", "wal_senders", "replication_privilege",
                   "publication"}
POSTGRES_TABLE = {"table_exists", "table_logged", "select_privilege", "replica_identity", "table_owner", "columns"}
SERVICES = {"kafka", "connect", "catalog"}


def test_doctor_passes_a_healthy_table_and_names_what_debezium_or_spark_would_refuse(it_env, tmp_path, capsys):
    env = own_env(it_env, tmp_path / "doctor")
    s = env.schema
    env.sql(f'CREATE TABLE "{s}".doc_ok (id int PRIMARY KEY, v text)')
    healthy = register(env, "doc_ok")
    code, checks = doctor(env, capsys)
    assert code == 0, [c for c in checks if c["status"] == "FAIL"]
    assert all(c["ok"] for c in checks)
    names = {c["name"] for c in checks}
    assert SERVICES | POSTGRES_SERVER | POSTGRES_TABLE | {"connect_plugin_postgresql"} <= names
    assert {c["name"] for c in checks if c["table"] == healthy} == POSTGRES_TABLE
    assert all(c["source"] == env.source for c in checks if c["name"] in POSTGRES_SERVER | POSTGRES_TABLE)
    capsys.readouterr()
    assert env.cdc("doctor", "--source", env.source) == 0
    text = capsys.readouterr().out
    assert f"ok    [{env.source} {healthy}] replica_identity:" in text and text.rstrip().endswith("0 failed"), text

    env.sql(f'CREATE TABLE "{s}".doc_twins (id int PRIMARY KEY, v int, "V" int)')
    env.sql(f'CREATE UNLOGGED TABLE "{s}".doc_unlogged (id int PRIMARY KEY, v int)')
    env.sql(f'CREATE TABLE "{s}".doc_nopk (code text NOT NULL, v int)')
    twins, unlogged, nopk = register(env, "doc_twins"), register(env, "doc_unlogged"), \
        register(env, "doc_nopk", key=["code"])
    tables = env.settings.path(env.settings.tables_dir)
    try:
        code, checks = doctor(env, capsys)
        assert code == 1
        failed = {(c["table"], c["name"]) for c in checks if not c["ok"]}
        assert failed == {(twins, "columns"), (unlogged, "table_logged"), (nopk, "replica_identity")}, failed
        columns = one(checks, "columns", twins)
        assert "columns that differ only by case: 'v', 'V'" in columns["found"] and "rename" in columns["fix"]
        logged = one(checks, "table_logged", unlogged)
        assert "UNLOGGED" in logged["found"]
        assert logged["fix"] == f'ALTER TABLE "{s}"."doc_unlogged" SET LOGGED'
        identity = one(checks, "replica_identity", nopk)
        assert "no primary key and replica identity default" in identity["found"]
        assert identity["fix"] == f'ALTER TABLE "{s}"."doc_nopk" REPLICA IDENTITY FULL'
        assert all(one(checks, n, healthy)["ok"] for n in POSTGRES_TABLE)  # the others are still checked
        capsys.readouterr()
        assert env.cdc("doctor", "--source", env.source) == 1
        text = capsys.readouterr().out
        assert (f"FAIL  [{env.source} {nopk}] replica_identity:" in text
                and f'      fix: ALTER TABLE "{s}"."doc_nopk" REPLICA IDENTITY FULL' in text
                and text.rstrip().endswith("3 failed")), text

        # Each fix, made: every check passes.
        env.sql(f'ALTER TABLE "{s}".doc_twins DROP COLUMN "V"')
        env.sql(f'ALTER TABLE "{s}".doc_unlogged SET LOGGED')
        env.sql(f'ALTER TABLE "{s}".doc_nopk REPLICA IDENTITY FULL')
        code, checks = doctor(env, capsys)
        assert code == 0 and all(c["ok"] for c in checks), [c for c in checks if not c["ok"]]
        assert one(checks, "columns", nopk)["ok"]  # run once the table is keyed
    finally:
        for name in (healthy, twins, unlogged, nopk):
            (tables / f"{name}.yaml").unlink(missing_ok=True)
        for t in ("doc_ok", "doc_twins", "doc_unlogged", "doc_nopk"):
            env.sql(f'DROP TABLE IF EXISTS "{s}".{t}')


def test_doctor_names_the_privileges_a_user_lacks(it_env, tmp_path, capsys):
    role, password = f"it_doc_{secrets.token_hex(3)}", secrets.token_hex(12)
    secret = tmp_path / "password"
    secret.write_text(password)
    it_env.sql(f'CREATE TABLE "{it_env.schema}".doc_private (id int PRIMARY KEY, v text)')
    it_env.sql(f"CREATE ROLE \"{role}\" LOGIN NOREPLICATION NOSUPERUSER PASSWORD '{password}'")
    try:
        env = own_env(it_env, tmp_path / "doctor", user=role, password_file=str(secret))
        private = register(env, "doc_private")
        code, checks = doctor(env, capsys)
        assert code == 1
        replication = one(checks, "replication_privilege")
        assert not replication["ok"] and f"role {role} has neither REPLICATION nor SUPERUSER" in replication["found"]
        assert replication["fix"] == f'ALTER ROLE "{role}" REPLICATION (as a superuser)'
        select = one(checks, "select_privilege", private)
        assert not select["ok"]
        assert select["fix"] == (f'GRANT USAGE ON SCHEMA "{env.schema}" TO "{role}"; '
                                 f'GRANT SELECT ON "{env.schema}"."doc_private" TO "{role}"')
        owner = one(checks, "table_owner", private)
        assert not owner["ok"] and owner["fix"].startswith(f'GRANT "cdc" TO "{role}"')
        assert one(checks, "connection")["ok"] and one(checks, "wal_level")["ok"]
        assert not any(c["table"] == private and c["name"] == "columns" for c in checks)  # nothing to read yet
        capsys.readouterr()
        assert env.cdc("doctor", "--source", env.source) == 1
        text = capsys.readouterr().out
        assert f'      fix: ALTER ROLE "{role}" REPLICATION (as a superuser)' in text
        assert password not in text

        # The grants of the fixes: REPLICATION and reading the table now pass.
        it_env.sql(f'ALTER ROLE "{role}" REPLICATION')
        it_env.sql(f'GRANT USAGE ON SCHEMA "{env.schema}" TO "{role}"')
        it_env.sql(f'GRANT SELECT ON "{env.schema}".doc_private TO "{role}"')
        code, checks = doctor(env, capsys)
        assert one(checks, "replication_privilege")["found"] == f"role {role} has REPLICATION"
        assert one(checks, "select_privilege", private)["ok"] and one(checks, "columns", private)["ok"]
    finally:
        it_env.sql(f'DROP TABLE IF EXISTS "{it_env.schema}".doc_private')
        if it_env.sql("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)):
            it_env.sql(f'DROP OWNED BY "{role}"')  # the grants of the fixes
            it_env.sql(f'DROP ROLE "{role}"')


def test_doctor_unreachable_source_is_a_failed_check(it_env, tmp_path, capsys):
    env = own_env(it_env, tmp_path / "doctor", port=free_port())
    code, checks = doctor(env, capsys)
    assert code == 1
    connection = one(checks, "connection")
    assert not connection["ok"] and f"cannot connect to source {env.source!r} at 127.0.0.1:" in connection["found"]
    assert one(checks, "kafka")["ok"] and one(checks, "catalog")["ok"]  # the services are still checked
    capsys.readouterr()
    assert env.cdc("doctor", "--source", "no_such_source") == 2
    assert "source 'no_such_source' is not in cdc.yaml" in capsys.readouterr().err


def test_doctor_checks_a_mariadb_source(it_mariadb, tmp_path, capsys):
    env = own_env(it_mariadb, tmp_path / "doctor")
    env.sql(f"CREATE TABLE `{env.schema}`.doc_ok (id int PRIMARY KEY, v text)")
    env.sql(f"CREATE TABLE `{env.schema}`.doc_nokey (code varchar(10) NOT NULL, v int)")
    healthy = register(env, "doc_ok")
    tables = env.settings.path(env.settings.tables_dir)
    try:
        code, checks = doctor(env, capsys)
        assert code == 0, [c for c in checks if not c["ok"]]
        for name, found in (("log_bin", "log_bin=1"), ("binlog_format", "binlog_format=ROW"),
                            ("binlog_row_image", "binlog_row_image=FULL")):
            check = one(checks, name)
            assert check["ok"] and check["found"] == found and check["fix"] is None, check
        assert one(checks, "privileges")["ok"] and "ALL PRIVILEGES on *.*" in one(checks, "privileges")["found"]
        assert "IDENTIFIED" not in json.dumps(checks)  # no password hash from SHOW GRANTS
        assert one(checks, "connect_plugin_mariadb")["ok"]
        assert {c["name"] for c in checks if c["table"] == healthy} == {"table_exists", "key", "columns"}
        assert {"gtid", "binlog_retention"} <= {c["name"] for c in checks}

        nokey = register(env, "doc_nokey")
        code, checks = doctor(env, capsys)
        assert code == 1
        key = one(checks, "key", nokey)
        assert not key["ok"] and "has no primary key and the registration gives no key columns" in key["found"]
        assert "`key:`" in key["fix"]
    finally:
        for f in tables.glob("*.yaml"):
            f.unlink()
        for t in ("doc_ok", "doc_nokey"):
            env.sql(f"DROP TABLE IF EXISTS `{env.schema}`.{t}")
