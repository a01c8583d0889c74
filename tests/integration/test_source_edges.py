"""What a real source and a real shell bring: partitioned tables, views, one table registered
twice, rows up to the record limit, bad registration files, a PGPASSWORD in the environment."""
from __future__ import annotations

import json
import time

import psycopg

from cdc.sources.postgres import publication_name
from tests.eventually import eventually


def doctor(env, capsys, table: str) -> dict[str, dict]:
    """`cdc doctor`'s checks of one registered table, by name."""
    capsys.readouterr()
    env.cdc("doctor", "--source", env.source, "--json")
    return {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"] if c["table"] == table}


def test_a_partitioned_table_is_captured_through_its_root(it_env, capsys):
    """Every change of every partition (one attached after registering too, a row moved
    between partitions) reaches the root's target; a partition alone and a view are
    refused with the reason; a publication made without publish_via_partition_root is
    set by `register`, and `doctor` says both."""
    env, s = it_env, it_env.schema
    env.sql(f'CREATE TABLE "{s}".parted (id int, region text, v text, PRIMARY KEY (id, region)) '
            f"PARTITION BY LIST (region)")
    env.sql(f'CREATE TABLE "{s}".parted_eu PARTITION OF "{s}".parted FOR VALUES IN (\'eu\')')
    env.sql(f'CREATE TABLE "{s}".parted_us PARTITION OF "{s}".parted FOR VALUES IN (\'us\')')
    env.sql(f'INSERT INTO "{s}".parted SELECT i, CASE WHEN i % 2 = 0 THEN \'eu\' ELSE \'us\' END, \'v\' || i '
            f"FROM generate_series(1, 20) i")
    env.sql(f'CREATE VIEW "{s}".parted_view AS SELECT * FROM "{s}".parted')
    for table, reason in (("parted_eu", f"is a partition of {s}.parted"), ("parted_view", "is a view, not a table")):
        capsys.readouterr()
        assert env.cdc("tables", "add", f"{s}.{table}") == 2
        err = capsys.readouterr().err
        assert reason in err and "primary key" not in err, err
    # A publication made before, as an older connector made it: partitions' changes under their own names.
    pub = publication_name(env.settings, env.source)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (pub,)).fetchone():
            conn.execute(f'ALTER PUBLICATION "{pub}" SET (publish_via_partition_root = false)')
        else:
            conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE "{s}".parted')
    capsys.readouterr()
    assert env.cdc("tables", "add", f"{s}.parted") == 0
    assert "# Partitioned (2 partitions now)" in capsys.readouterr().out
    checks = doctor(env, capsys, f"{s}.parted")
    assert not checks["partitioned"]["ok"] and "under their own names" in checks["partitioned"]["found"]
    assert env.cdc("register", "--table", f"{s}.parted") == 0
    assert f"publication {pub}: the changes of partitions published through" in capsys.readouterr().out
    env.replicate("parted")
    assert env.assert_equal("parted", key=("id", "region")) == 20

    env.sql(f'CREATE TABLE "{s}".parted_ap PARTITION OF "{s}".parted FOR VALUES IN (\'ap\')')
    marker = env.transaction(
        f'UPDATE "{s}".parted SET v = \'changed\' WHERE id <= 6',
        f'DELETE FROM "{s}".parted WHERE id IN (7, 8)',
        f'INSERT INTO "{s}".parted VALUES (21, \'eu\', \'new\'), (22, \'us\', \'new\'), (23, \'ap\', \'attached\')',
        f'UPDATE "{s}".parted SET region = \'ap\' WHERE id = 9')  # moved to another partition
    env.replicate("parted", marker)
    assert env.assert_equal("parted", key=("id", "region")) == 21
    checks = doctor(env, capsys, f"{s}.parted")
    assert checks["partitioned"]["ok"] and "partitioned (3 partition(s))" in checks["partitioned"]["found"]


def test_a_partitioned_mariadb_table_is_one_table(it_mariadb):
    env, s = it_mariadb, it_mariadb.schema
    env.sql(f"CREATE TABLE `{s}`.parted (id INT, region INT, v VARCHAR(20), PRIMARY KEY (id, region)) "
            f"PARTITION BY RANGE (region) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20))")
    env.sql(f"INSERT INTO `{s}`.parted VALUES (1, 1, 'a'), (2, 15, 'b'), (3, 5, 'c')")
    assert env.cdc("tables", "add", f"{s}.parted") == 0
    assert env.cdc("register", "--table", f"{s}.parted") == 0
    env.replicate("parted")
    env.sql(f"ALTER TABLE `{s}`.parted ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))")
    marker = env.transaction(f"UPDATE `{s}`.parted SET v = 'moved', region = 25 WHERE id = 1",
                             f"DELETE FROM `{s}`.parted WHERE id = 3",
                             f"INSERT INTO `{s}`.parted VALUES (4, 29, 'd')")
    env.replicate("parted", marker)
    assert env.assert_equal("parted", key=("id", "region")) == 3


def test_a_mariadb_restart_after_a_quiet_ddl_skips_nothing(it_mariadb):
    """Debezium's MariaDB connector counts the server's heartbeats into a DDL statement's
    transaction and, restarted (by `register`, a worker's restart), skips as many events
    of those that follow, of every table. The connector's heartbeat write begins the next
    transaction, so a restart after a DDL and a quiet binary log skips nothing."""
    from cdc.register.connector import ConnectClient, connector_name

    env, s = it_mariadb, it_mariadb.schema
    env.sql(f"CREATE TABLE `{s}`.calm (id INT PRIMARY KEY, v INT)")
    env.sql(f"INSERT INTO `{s}`.calm VALUES (1, 1)")
    assert env.cdc("tables", "add", f"{s}.calm") == 0
    assert env.cdc("register", "--table", f"{s}.calm") == 0
    env.replicate("calm")
    client, name = ConnectClient(env.settings.connect_url), connector_name(env.source)
    config = client.config(name)

    def restart(keep_alive: str) -> None:
        client.put_config(name, {**config, "connect.keep.alive.interval.ms": keep_alive})
        client.wait_task_config(name, "connect.keep.alive.interval.ms", keep_alive)
        client.wait_running(name)

    restart("2000")  # the server sends a heartbeat every 1.6 s (Debezium's default: 48 s)
    env.sql(f"CREATE TABLE `{s}`.quiet (id INT PRIMARY KEY)")  # the binary log's last event: a DDL
    time.sleep(20)  # the condition is time itself: a quiet binary log, a dozen server heartbeats
    restart("60000")
    env.sql(f"INSERT INTO `{s}`.calm VALUES (2, 2)")
    env.sql(f"UPDATE `{s}`.calm SET v = 10 WHERE id = 1")
    env.replicate("calm", env.transaction(f"INSERT INTO `{s}`.calm VALUES (3, 3)"))
    assert env.assert_equal("calm") == 3


def test_a_row_just_under_the_record_limit_is_replicated(it_env):
    """A text value longer than the JSON reader's default limit (20,000,000 characters),
    in a row just under kafka.max_record_bytes, is replicated exactly."""
    env, s = it_env, it_env.schema
    limit = env.settings.kafka.max_record_bytes
    env.sql(f'CREATE TABLE "{s}".wide (id int PRIMARY KEY, body text)')
    env.sql(f'INSERT INTO "{s}".wide VALUES (1, \'small\')')
    env.register_table("wide")
    assert env.cdc("register", "--table", f"{s}.wide") == 0
    env.replicate("wide")
    size = limit - 64 * 1024  # room for the envelope's schema and source block
    env.transaction(f'INSERT INTO "{s}".wide SELECT 2, repeat(md5(\'x\'), {size // 32})')
    # A marker after it: the transaction's own id is in the committed offset as soon as its
    # BEGIN event is in Kafka, before its row of 33 MB is.
    env.replicate("wide", env.marker())
    rows = {r["id"]: r["body"] for r in env.target_records("wide")}
    assert len(rows[2]) == size // 32 * 32 > 20_000_000 and rows[1] == "small"
    assert env.assert_equal("wide") == 2
    assert not env.catalog.table_exists(f"{s}.wide__cdc_dead_letters") or \
        env.catalog.load_table(f"{s}.wide__cdc_dead_letters").scan().to_arrow().num_rows == 0


def test_one_source_table_registered_twice_fills_both_targets(it_env, capsys):
    """Two registrations of one source table (each its target) are captured once, from one
    topic, and applied to both; one keyed otherwise is refused before anything changes;
    removing one keeps the other captured."""
    from cdc.register.connector import ConnectClient, connector_name
    from tests.compare import assert_equal

    env, s = it_env, it_env.schema
    env.sql(f'CREATE TABLE "{s}".twin (id int PRIMARY KEY, v text)')
    env.sql(f'INSERT INTO "{s}".twin SELECT g, \'v\' || g FROM generate_series(1, 30) g')
    assert env.cdc("tables", "add", f"{s}.twin") == 0
    assert env.cdc("register", "--table", f"{s}.twin") == 0
    env.replicate("twin")
    assert env.cdc("tables", "add", f"{s}.twin", "--name", f"{s}.twin2") == 0  # a second target, added later
    assert env.cdc("register", "--table", f"{s}.twin2") == 0
    client, connector = ConnectClient(env.settings.connect_url), connector_name(env.source)
    config = client.config(connector)
    assert config["message.key.columns"].split(";").count(f"{s}.twin:id") == 1  # tables add wrote key: [id]
    assert not client.not_running(connector)
    env.sql(f'ALTER TABLE "{s}".twin REPLICA IDENTITY FULL')  # so a key v is published: refused for its topic
    env.sql(f'ALTER TABLE "{s}".twin ALTER COLUMN v SET NOT NULL')  # (a key column that allows NULL is refused)
    odd = env.register_table("twin", key=["v"], name=f"{s}.twin3")
    try:
        capsys.readouterr()
        assert env.cdc("register", "--table", odd) == 2
        assert "keyed by id and by v" in capsys.readouterr().err
        assert client.config(connector) == config and not env.catalog.table_exists(f"{s}.twin3")
    finally:  # the module's other tests register every file
        (env.settings.path(env.settings.tables_dir) / f"{odd}.yaml").unlink()

    marker = env.transaction(f'UPDATE "{s}".twin SET v = \'changed\' WHERE id <= 5',
                             f'DELETE FROM "{s}".twin WHERE id = 6', f'INSERT INTO "{s}".twin VALUES (31, \'new\')')
    for name in ("twin", "twin2"):
        env.replicate(name, marker)
        assert_equal(env.dsn, s, "twin", env.catalog, f"{s}.{name}", ("id",))
    assert env.cdc("tables", "remove", f"{s}.twin2") == 0
    assert f"{s}.twin" in client.config(connector)["table.include.list"].split(",")
    env.replicate("twin", env.transaction(f'UPDATE "{s}".twin SET v = \'after\' WHERE id = 31'))
    assert env.assert_equal("twin") == 30


def test_one_bad_registration_file_is_its_tables_problem_alone(it_env, capsys, tmp_path):
    """A registration file that does not load (here: not UTF-8) is reported as its table's
    problem by status and reconcile, which go on for the other tables, as `run` does; a
    command that names another table does not see it."""
    env, s = it_env, it_env.schema
    env.sql(f'CREATE TABLE "{s}".inv_a (id int PRIMARY KEY, v text)')
    env.sql(f'INSERT INTO "{s}".inv_a VALUES (1, \'one\')')
    env.register_table("inv_a")
    assert env.cdc("register", "--table", f"{s}.inv_a") == 0
    broken = env.settings.path(env.settings.tables_dir) / f"{s}.inv_broken.yaml"
    broken.write_bytes(b"name: caf\xe9\n")  # Latin-1, not UTF-8
    try:
        both = f"{s}.inv_*"
        capsys.readouterr()
        assert env.cdc("run", "--available-now", "--table", both) == 3  # the other ran, and this one is named
        err = capsys.readouterr().err
        assert f"{s}.inv_broken: its registration does not load" in err
        assert f"table(s) {s}.inv_broken not run: their registration does not load" in err
        assert env.assert_equal("inv_a") == 1
        assert env.cdc("status", "--check", "--table", f"{s}.inv_a") == 0
        capsys.readouterr()
        assert env.cdc("status", "--check", "--json", "--table", both) == 3
        doc = json.loads(capsys.readouterr().out)
        rows = {r["table"]: r for r in doc["tables"]}
        assert rows[f"{s}.inv_a"]["lag"] == 0 and rows[f"{s}.inv_broken"]["state"] == "invalid"
        assert f"{broken} is not UTF-8 text: byte 0xe9 at offset 9" in rows[f"{s}.inv_broken"]["invalid"]
        capsys.readouterr()
        assert env.cdc("reconcile", "--table", both) == 3
        out = capsys.readouterr().out
        assert f"{s}.inv_a" in out and " OK " in out and "INVALID" in out and "1 of 2 table(s) OK" in out
        assert env.cdc("reconcile", "--table", f"{s}.inv_a") == 0
        capsys.readouterr()
        assert env.cdc("reconcile", "--table", f"{s}.inv_a", "--out", str(tmp_path / "missing" / "r.txt")) == 2
        assert f"folder {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    finally:
        broken.unlink()


def test_a_connector_update_whose_task_fails_is_rolled_back(it_env, monkeypatch):
    """A configuration Connect takes and whose task then fails at once (here, a key given
    twice for a table, as `register` once wrote for a table registered twice) is replaced by
    the previous one, whose failed task is restarted: the tables it captured flow again."""
    from cdc.register import registrar
    from cdc.register.connector import ConnectClient, connector_name
    from tests.integration.test_registrations import rolled_back_register

    env, s = it_env, it_env.schema
    env.sql(f'CREATE TABLE "{s}".failing (id int PRIMARY KEY, v text)')
    env.sql(f'INSERT INTO "{s}".failing VALUES (1, \'one\')')
    assert env.cdc("register", "--table", env.register_table("failing", key=["id"])) == 0
    env.replicate("failing")
    client, connector = ConnectClient(env.settings.connect_url), connector_name(env.source)
    before = client.config(connector)
    real = registrar.source_connector_config

    def doubled(*args, **kwargs):
        config = real(*args, **kwargs)
        return {**config, "message.key.columns": f"{s}.failing:id;{s}.failing:id"}
    monkeypatch.setattr(registrar, "source_connector_config", doubled)
    refused = rolled_back_register(env, client, monkeypatch, f"{s}.failing")
    assert "its previous configuration is back" in refused, refused
    assert client.config(connector) == before and not client.not_running(connector)
    env.replicate("failing", env.transaction(f'UPDATE "{s}".failing SET v = \'flowing\''))
    assert env.assert_equal("failing") == 1


def test_the_stack_ignores_a_pgpassword_set_in_the_shell(stack, monkeypatch):
    """libpq prefers PGPASSWORD to the stack's password file: `stack up` gives its own."""
    monkeypatch.setenv("PGPASSWORD", "not the stack's password")
    assert stack.postgres.healthy()
    stack.postgres.start()  # running: checked, and its database made sure of
    with stack.postgres.connect() as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("cdc",)


def assert_stopped_naming_the_way_back(env, capsys, poisoned: str, bystander: str) -> None:
    """The source's connector stops (within 120 s), and `status --check` of another table
    exits 3 naming `cdc tables remove` of the poisoned one."""
    from cdc.register.connector import ConnectClient, connector_name

    client, connector = ConnectClient(env.settings.connect_url), connector_name(env.source)
    eventually(lambda: client.not_running(connector), "stop of the connector", 120)
    capsys.readouterr()
    assert env.cdc("status", "--check", "--table", f"{env.schema}.{bystander}") == 3
    out = capsys.readouterr().out
    assert f"cdc tables remove {env.schema}.{poisoned}" in out, out


def test_a_change_capture_can_never_produce_is_left_behind_with_its_table(it_env, capsys):
    """A column added that differs from another only by case stops the source's capture at
    its first change, for every table. `status` names the way back; `cdc tables remove`
    takes that table out of capture and past the change, so the other tables capture again;
    fixed at the source, it is registered and bootstrapped again, exact."""
    from cdc.register.connector import ConnectClient, connector_name

    env, s = it_env, it_env.schema
    for t in ("case_clash", "clash_bystander"):
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, v text)')
        env.sql(f'INSERT INTO "{s}".{t} VALUES (1, \'one\')')
        assert env.cdc("tables", "add", f"{s}.{t}") == 0
        assert env.cdc("register", "--table", f"{s}.{t}") == 0
        env.replicate(t)
    client, connector = ConnectClient(env.settings.connect_url), connector_name(env.source)
    env.sql(f'ALTER TABLE "{s}".case_clash ADD COLUMN "V" text')
    env.sql(f'INSERT INTO "{s}".case_clash VALUES (2, \'two\', \'TWO\')')
    env.sql(f'INSERT INTO "{s}".clash_bystander VALUES (2, \'waits\')')
    assert_stopped_naming_the_way_back(env, capsys, "case_clash", "clash_bystander")

    assert env.cdc("tables", "remove", f"{s}.case_clash") == 0
    assert not client.not_running(connector)
    env.replicate("clash_bystander", env.transaction(f'UPDATE "{s}".clash_bystander SET v = \'flows\' WHERE id = 1'))
    assert env.assert_equal("clash_bystander") == 2

    env.sql(f'ALTER TABLE "{s}".case_clash RENAME COLUMN "V" TO v_upper')
    assert env.cdc("tables", "add", f"{s}.case_clash") == 0
    assert env.cdc("register", "--table", f"{s}.case_clash") == 0
    capsys.readouterr()
    assert env.cdc("bootstrap", "--table", f"{s}.case_clash", "--yes") == 0
    env.replicate("case_clash", env.transaction(f'UPDATE "{s}".case_clash SET v_upper = \'later\' WHERE id = 1'))
    assert env.assert_equal("case_clash") == 2


def test_two_deployments_on_one_source_keep_each_others_tables(it_env, capsys, tmp_path):
    """A second cdc.yaml (its own tables_dir) on the same source and Connect shares the
    source's connector: neither's `register` nor `tables remove` takes the other's tables
    (or their key columns) out of capture, and the last table of one does not retire it.
    A key the replica identity does not publish is refused."""
    import yaml

    from cdc.cli.main import main as cdc_main
    from cdc.register.connector import ConnectClient, connector_name

    env, s = it_env, it_env.schema
    for t in ("dep_a", "dep_b"):
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, code text UNIQUE NOT NULL, v text)')
        env.sql(f'INSERT INTO "{s}".{t} SELECT g, \'c\' || g, \'v\' || g FROM generate_series(1, 10) g')
    doc = yaml.safe_load(env.config.read_text())
    doc["tables_dir"] = str(tmp_path / "tables_b")
    config_b = tmp_path / "cdc-b.yaml"
    config_b.write_text(yaml.safe_dump(doc))

    def cdc_b(*args: str) -> int:
        return cdc_main(["--config", str(config_b), *args])

    client, connector = ConnectClient(env.settings.connect_url), connector_name(env.source)
    signal = env.settings.sources[env.source].signal_table

    def captured() -> set[str]:
        return set((client.config(connector) or {}).get("table.include.list", signal).split(",")) - {signal}

    before = captured()  # this module's other tables
    capsys.readouterr()
    assert cdc_b("tables", "add", f"{s}.dep_b", "--key", "code") == 2  # a delete would carry no code
    assert "is not in its replica identity (id)" in capsys.readouterr().err
    env.sql(f'ALTER TABLE "{s}".dep_b REPLICA IDENTITY FULL')
    assert cdc_b("tables", "add", f"{s}.dep_b", "--key", "code") == 0
    assert cdc_b("register", "--table", f"{s}.dep_b") == 0
    assert env.cdc("tables", "add", f"{s}.dep_a") == 0
    capsys.readouterr()
    assert env.cdc("register", "--table", f"{s}.dep_a", "--dry-run") == 0
    kept = next((line for line in capsys.readouterr().out.splitlines() if "keeps capturing" in line), "")
    assert f"{s}.dep_b" in kept.split(", which")[0] and "which no registration under" in kept, kept
    assert env.cdc("register", "--table", f"{s}.dep_a") == 0
    assert captured() == before | {f"{s}.dep_a", f"{s}.dep_b"}
    assert f"{s}.dep_b:code" in client.config(connector)["message.key.columns"].split(";")

    marker = env.transaction(f'UPDATE "{s}".dep_b SET v = \'b1\' WHERE id <= 3',
                             f'UPDATE "{s}".dep_a SET v = \'a1\' WHERE id <= 3')
    env.wait_captured(marker)
    assert cdc_b("run", "--available-now", "--table", f"{s}.dep_b") == 0
    env.replicate("dep_a")
    assert env.assert_equal("dep_b", key=("code",)) == 10 and env.assert_equal("dep_a") == 10

    assert env.cdc("tables", "remove", f"{s}.dep_a") == 0  # B's table stays, and so does the connector
    assert captured() == before | {f"{s}.dep_b"}
    marker = env.transaction(f'DELETE FROM "{s}".dep_b WHERE id = 4', f'UPDATE "{s}".dep_b SET v = \'b2\'')
    env.wait_captured(marker)
    assert cdc_b("run", "--available-now", "--table", f"{s}.dep_b") == 0
    assert env.assert_equal("dep_b", key=("code",)) == 9
    assert cdc_b("tables", "remove", f"{s}.dep_b") == 0
    assert captured() == before  # the connector retired if these were its last tables


def test_a_mariadb_statement_capture_can_never_read_is_left_behind_with_its_table(it_mariadb, capsys):
    """A MariaDB column type Debezium's DDL parser refuses (INET6) stops the source's capture
    for every table. `status` names the way back; `cdc tables remove` takes that table out
    and moves the connector past that statement's transaction, so the other table captures
    again, exact."""
    from cdc.register.connector import ConnectClient, connector_name

    env, s = it_mariadb, it_mariadb.schema
    for t in ("inet_poison", "inet_bystander"):
        env.sql(f"CREATE TABLE `{s}`.{t} (id INT PRIMARY KEY, v VARCHAR(20))")
        env.sql(f"INSERT INTO `{s}`.{t} VALUES (1, 'one')")
        assert env.cdc("tables", "add", f"{s}.{t}") == 0
        assert env.cdc("register", "--table", f"{s}.{t}") == 0
        env.replicate(t)
    client, connector = ConnectClient(env.settings.connect_url), connector_name(env.source)
    env.sql(f"ALTER TABLE `{s}`.`inet_poison` ADD COLUMN ip INET6")
    env.sql(f"INSERT INTO `{s}`.inet_bystander VALUES (2, 'waits')")
    assert_stopped_naming_the_way_back(env, capsys, "inet_poison", "inet_bystander")

    capsys.readouterr()
    assert env.cdc("tables", "remove", f"{s}.inet_poison") == 0
    assert "moved past transaction" in capsys.readouterr().out
    assert not client.not_running(connector)
    env.replicate("inet_bystander", env.transaction(f"UPDATE `{s}`.inet_bystander SET v = 'flows' WHERE id = 1"))
    assert env.assert_equal("inet_bystander") == 2
