"""`cdc doctor`'s decisions (report/checks.py), from the values a source or a service shows, and its output."""
from __future__ import annotations

import json

from cdc.errors import ConfigError
from cdc.report import checks as d
from cdc.report import doctor
from cdc.sources.mariadb import BINLOG_WANTED, binlog_wrong


def test_wal_level_must_be_logical():
    assert d.wal_level_check("logical").ok
    check = d.wal_level_check("replica")
    assert not check.ok and check.found.startswith("replica")
    assert check.fix == "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"


def test_replication_slots_free_or_the_sources_own():
    assert d.slots_check(10, 3, "cdc_a", own_exists=False).ok
    full = d.slots_check(4, 4, "cdc_a", own_exists=False)
    assert not full.ok and "4 of max_replication_slots=4 in use, 0 free" in full.found
    assert "pg_drop_replication_slot" in full.fix and "max_replication_slots = 5" in full.fix
    assert d.slots_check(4, 4, "cdc_a", own_exists=True).ok  # its own slot counts as fine


def test_wal_senders_free_or_streaming_already():
    assert d.wal_senders_check(10, 2, own_active=False).ok
    assert d.wal_senders_check(2, 2, own_active=True).ok
    busy = d.wal_senders_check(2, 2, own_active=False)
    assert not busy.ok and "max_wal_senders = 3" in busy.fix


def test_replication_privilege():
    assert d.replication_role_check("cdc", replication=True, superuser=False).ok
    assert d.replication_role_check("cdc", replication=False, superuser=True).ok
    missing = d.replication_role_check("app", replication=False, superuser=False)
    assert not missing.ok and missing.fix == 'ALTER ROLE "app" REPLICATION (as a superuser)'


def test_publication_owned_or_creatable():
    assert d.publication_check("cdc_a", "cdc", "db", True, "cdc", True, False).ok
    assert d.publication_check("cdc_a", "cdc", "db", False, None, False, True).ok
    other = d.publication_check("cdc_a", "cdc", "db", True, "admin", False, True)
    assert not other.ok and other.fix == 'ALTER PUBLICATION "cdc_a" OWNER TO "cdc"'
    cannot = d.publication_check("cdc_a", "cdc", "db", False, None, False, False)
    assert not cannot.ok and cannot.fix.startswith('GRANT CREATE ON DATABASE "db" TO "cdc"')


def test_an_inactive_slot_is_a_warning():
    assert d.slot_retention_check(None) is None
    active = d.slot_retention_check({"name": "cdc_a", "active": True, "retained_wal_bytes": 100, "wal_status": "reserved"})
    assert active.ok and not active.warn
    idle = d.slot_retention_check({"name": "cdc_a", "active": False, "retained_wal_bytes": 3 * 1024 ** 3,
                                   "wal_status": "extended"})
    assert idle.ok and idle.warn and idle.status == "warn"
    assert "INACTIVE, 3.0 GB of WAL held" in idle.found and "pg_drop_replication_slot('cdc_a')" in idle.fix


def test_a_partitioned_table_is_captured_through_its_root():
    assert d.partition_check('"s"."t"', "r", False, None, 0, "cdc_a", False) is None  # a plain table: no check
    root = d.partition_check('"s"."t"', "p", False, "s.t", 3, "cdc_a", True)
    assert root.ok and "partitioned (3 partition(s))" in root.found and "attached later too" in root.found
    assert d.partition_check('"s"."t"', "p", False, "s.t", 3, "cdc_a", None).ok  # no publication yet: register makes it
    old = d.partition_check('"s"."t"', "p", False, "s.t", 3, "cdc_a", False)
    assert not old.ok and "under their own names" in old.found
    assert 'ALTER PUBLICATION "cdc_a" SET (publish_via_partition_root = true)' in old.fix
    leaf = d.partition_check('"s"."t_eu"', "r", True, "s.t", 1, "cdc_a", True)
    assert not leaf.ok and "is a partition of s.t" in leaf.found and leaf.fix.startswith("register s.t instead")


def test_table_kind_persistence_and_privileges():
    assert d.relation_check('"s"."t"', "r").ok and d.relation_check('"s"."t"', "p").ok
    assert "does not exist" in d.relation_check('"s"."t"', None).found
    assert "is a view" in d.relation_check('"s"."t"', "v").found
    assert d.persistence_check('"s"."t"', "p").ok
    unlogged = d.persistence_check('"s"."t"', "u")
    assert not unlogged.ok and unlogged.fix == 'ALTER TABLE "s"."t" SET LOGGED'
    assert not d.persistence_check('"s"."t"', "t").ok
    assert d.select_check('"s"."t"', "cdc", "s", True, True).ok
    no_select = d.select_check('"s"."t"', "app", "s", False, True)
    assert not no_select.ok and no_select.fix == 'GRANT SELECT ON "s"."t" TO "app"'
    neither = d.select_check('"s"."t"', "app", "s", False, False)
    assert neither.fix == 'GRANT USAGE ON SCHEMA "s" TO "app"; GRANT SELECT ON "s"."t" TO "app"'


def test_replica_identity():
    assert d.replica_identity_check("t", True, None, "d").ok
    assert d.replica_identity_check("t", False, ("code",), "f").ok
    default = d.replica_identity_check("t", False, ("code",), "d")
    assert not default.ok and default.fix == "ALTER TABLE t REPLICA IDENTITY FULL"
    no_key = d.replica_identity_check("t", False, None, "d")
    assert not no_key.ok and "`key:`" in no_key.fix
    nothing = d.replica_identity_check("t", True, None, "n")
    assert not nothing.ok and nothing.fix == "ALTER TABLE t REPLICA IDENTITY DEFAULT"


def test_table_ownership_for_the_publication():
    assert d.publishable_check("t", "cdc", "cdc", True, False).ok
    assert d.publishable_check("t", "cdc", "app", False, True).ok  # in the publication already
    other = d.publishable_check("t", "cdc", "app", False, False)
    assert not other.ok and other.fix.startswith('GRANT "app" TO "cdc"')


def test_columns_carry_the_preflights_message_and_hint():
    assert d.columns_check("t", None, 3).ok
    error = ConfigError("t: columns that differ only by case: 'v', 'V'", hint="rename one of each at the source")
    check = d.columns_check("t", error)
    assert not check.ok and check.found == error.message and check.fix == error.hint


def test_mariadb_binlog_settings():
    good = {"log_bin": 1, "binlog_format": "ROW", "binlog_row_image": "FULL"}
    assert all(c.ok for c in d.binlog_checks(good, BINLOG_WANTED)) and binlog_wrong(good) == []
    statement = {**good, "binlog_format": "STATEMENT"}
    checks = {c.name: c for c in d.binlog_checks(statement, BINLOG_WANTED)}
    assert not checks["binlog_format"].ok and checks["log_bin"].ok
    assert checks["binlog_format"].found == "binlog_format=STATEMENT (needs ROW)"
    assert "SET GLOBAL binlog_format = 'ROW'" in checks["binlog_format"].fix
    assert binlog_wrong(statement) == ["binlog_format=STATEMENT (needs ROW)"]  # check_binlog's message
    minimal = {c.name: c for c in d.binlog_checks({**good, "log_bin": 0, "binlog_row_image": "MINIMAL"},
                                                  BINLOG_WANTED)}
    assert not minimal["log_bin"].ok and not minimal["binlog_row_image"].ok


def test_mariadb_gtid_and_retention():
    assert d.gtid_check("0-1-42", 0, 0).ok and not d.gtid_check("0-1-42", 0, 0).warn
    assert d.gtid_check("", 0, 0).warn
    assert d.binlog_retention_check(604800, 7).ok and not d.binlog_retention_check(604800, 7).warn
    assert d.binlog_retention_check(0, 0).found.startswith("binary logs are never expired")
    assert d.binlog_retention_check(0, 0.25).warn  # from expire_logs_days: 6 hours
    assert d.binlog_retention_check(3600, 0).warn


def test_mariadb_grants():
    account = "'cdc'@'%'"
    every = ["GRANT ALL PRIVILEGES ON *.* TO `cdc`@`%` IDENTIFIED BY PASSWORD '*6D81' WITH GRANT OPTION"]
    check = d.grants_check(account, "shop", every)
    assert check.ok and "ALL PRIVILEGES on *.*" in check.found and "6D81" not in check.found
    modern = ["GRANT RELOAD, BINLOG MONITOR, REPLICATION SLAVE ON *.* TO `cdc`@`%`",
              "GRANT SELECT ON `shop`.* TO `cdc`@`%`"]
    assert d.grants_check(account, "shop", modern).ok
    classic = ["GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc'@'%'"]
    assert d.grants_check(account, "shop", classic).ok
    short = ["GRANT USAGE ON *.* TO `cdc`@`%`", "GRANT SELECT (id, name) ON `other`.`t` TO `cdc`@`%`",
             "GRANT `reader` TO `cdc`@`%`"]
    missing = d.grants_check(account, "shop", short)
    assert not missing.ok
    assert "lacks REPLICATION SLAVE, REPLICATION CLIENT, RELOAD, SELECT on shop" in missing.found
    assert missing.fix == ("GRANT REPLICATION SLAVE, REPLICATION CLIENT, RELOAD ON *.* TO 'cdc'@'%'; "
                           "GRANT SELECT ON `shop`.* TO 'cdc'@'%'")
    assert d.parse_grants(short) == {"*.*": {"USAGE"}, "other.t": {"SELECT"}}
    on_db = d.grants_check(account, "shop", ["GRANT RELOAD, REPLICATION SLAVE, SLAVE MONITOR ON *.* TO `cdc`@`%`",
                                              "GRANT ALL PRIVILEGES ON `shop`.* TO `cdc`@`%`"])
    assert on_db.ok


def test_mariadb_key():
    assert d.key_check("t", True, None).ok and d.key_check("t", False, ("code",)).ok
    assert not d.key_check("t", False, None).ok


def _sample():
    return [d.passed("kafka", "127.0.0.1:19092 answers"),
            d.wal_level_check("replica").at("pg"),
            d.persistence_check('"s"."t"', "u").at("pg", "s.t"),
            d.gtid_check("", 0, 0).at("maria")]


def test_text_output_one_line_per_check_the_fix_below_and_a_summary():
    lines = doctor.format_text(_sample()).splitlines()
    assert lines == [
        "ok    kafka: 127.0.0.1:19092 answers",
        "FAIL  [pg] wal_level: replica (logical decoding needs logical)",
        "      fix: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
        'FAIL  [pg s.t] table_logged: "s"."t" is UNLOGGED: it writes no WAL, so no change of it is captured',
        '      fix: ALTER TABLE "s"."t" SET LOGGED',
        "warn  [maria] gtid: gtid_binlog_pos=(empty), gtid_domain_id=0, gtid_strict_mode=0: no transaction in the "
        "binary log yet",
        "      fix: nothing to do: the first transaction gives a GTID position",
        "4 checks: 1 ok, 1 warning(s), 2 failed",
    ]


def test_json_output_and_exit_codes():
    checks = _sample()
    doc = json.loads(doctor.format_json(checks))
    assert doc["schema_version"] == 1 and doc["ok"] is False
    assert [c["status"] for c in doc["checks"]] == ["ok", "FAIL", "FAIL", "warn"]
    assert doc["checks"][2] == {"status": "FAIL", "name": "table_logged", "ok": False,
                                "found": '"s"."t" is UNLOGGED: it writes no WAL, so no change of it is captured',
                                "fix": 'ALTER TABLE "s"."t" SET LOGGED', "source": "pg", "table": "s.t",
                                "warn": False}
    assert doctor.exit_code(checks) == 1
    assert doctor.exit_code([checks[0], checks[3]]) == 0  # a warning is no failure


def test_unknown_source_is_a_configuration_error(tmp_path, capsys):
    from cdc.cli.main import main

    cfg = tmp_path / "cdc.yaml"
    cfg.write_text("sources:\n  a:\n    database: db\n    user: u\n    password_file: pw\n")
    assert main(["--config", str(cfg), "doctor", "--source", "b"]) == 2
    err = capsys.readouterr().err
    assert "source 'b' is not in cdc.yaml" in err and "sources: a" in err


def test_an_unreachable_source_and_services_are_failed_checks_not_a_traceback(tmp_path, capsys):
    import socket

    from cdc.cli.main import main

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "pw").write_text("not-shown-anywhere")
    cfg = tmp_path / "cdc.yaml"
    cfg.write_text(f"kafka:\n  bootstrap_servers: 127.0.0.1:{port}\nconnect:\n  url: http://127.0.0.1:{port}\n"
                   f"schema_registry:\n  url: http://127.0.0.1:{port}/ccompat\n"
                   f"sources:\n  a:\n    port: {port}\n    database: db\n    user: u\n    password_file: pw\n"
                   f"    format: avro\n"
                   f"catalog:\n  path: {tmp_path}/catalog.db\n  warehouse: {tmp_path}/wh\n")
    assert main(["--config", str(cfg), "doctor", "--json"]) == 1
    out = capsys.readouterr().out
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert not checks["kafka"]["ok"] and f"127.0.0.1:{port}" in checks["kafka"]["found"]
    assert not checks["connect"]["ok"] and f"http://127.0.0.1:{port}" in checks["connect"]["found"]
    assert checks["catalog"]["ok"]
    registry = checks["schema_registry"]  # a source writes Avro
    assert not registry["ok"] and f"http://127.0.0.1:{port}/ccompat is unreachable" in registry["found"]
    connection = checks["connection"]
    assert not connection["ok"] and connection["source"] == "a"
    assert f"cannot connect to source 'a' at 127.0.0.1:{port}/db" in connection["found"]
    assert "not-shown-anywhere" not in out
