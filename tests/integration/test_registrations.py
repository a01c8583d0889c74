"""Registrations are data: what a source names never becomes configuration, a target has
one owner, and a refused registration changes nothing."""
from __future__ import annotations

import yaml

HOSTILE = {  # column names PostgreSQL accepts, each a piece of YAML or a comment's end
    "newline": "zz\ntarget: shop.customers\nsink: delta\n#",
    "hash": "a # b",
    "quotes": "it's \"quoted\"",
    "flow": "{key: [x]}",
    "separator": "line\u2028sep\u0085next",
    "carriage": "cr\rhere",
}


def test_tables_add_writes_only_what_cdc_decided(it_env):
    env, s = it_env, it_env.schema
    columns = ", ".join('"' + name.replace('"', '""') + '" text' for name in HOSTILE.values())
    env.sql(f'CREATE TABLE "{s}".hostile (id int PRIMARY KEY, {columns})')
    env.sql(f'INSERT INTO "{s}".hostile VALUES (1, ' + ", ".join(f"'{k}'" for k in HOSTILE) + ")")
    assert env.cdc("tables", "add", f"{s}.hostile") == 0
    path = env.settings.path(env.settings.tables_dir) / f"{s}.hostile.yaml"
    written = path.read_text()
    assert yaml.safe_load(written) == {"name": f"{s}.hostile", "source": {"schema": s, "table": "hostile"},
                                       "key": ["id"]}
    head, body = written.split("\nname: ", 1)
    assert all(line.startswith("#") for line in head.split("\n")), written  # comments only, one per column
    assert len(head.split("\n")) == 2 + 1 + len(HOSTILE) and written.isascii()
    # The names as data: the table registers and replicates every column.
    assert env.cdc("register", "--table", f"{s}.hostile") == 0
    env.replicate("hostile", env.transaction(f'UPDATE "{s}".hostile SET "{HOSTILE["hash"]}" = \'changed\''))
    assert env.assert_equal("hostile") == 1


def include_list(env) -> set[str]:
    from cdc.register.connector import ConnectClient, connector_name

    return set(ConnectClient(env.settings.connect_url).config(connector_name(env.source))["table.include.list"]
               .split(","))


def test_register_one_table_captures_it_alone(it_env):
    env, s = it_env, it_env.schema
    for t in ("only_a", "only_b"):
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, v int)')
        env.sql(f'INSERT INTO "{s}".{t} VALUES (1, 1)')
        assert env.cdc("tables", "add", f"{s}.{t}") == 0
    before = include_list(env)
    assert env.cdc("register", "--table", f"{s}.only_a") == 0
    assert include_list(env) == before | {f"{s}.only_a"}  # not only_b: added, never registered
    env.replicate("only_a")
    assert env.assert_equal("only_a") == 1
    assert env.cdc("register", "--table", f"{s}.only_b") == 0  # then only_b, and only_a stays
    assert include_list(env) == before | {f"{s}.only_a", f"{s}.only_b"}
    env.replicate("only_b", env.transaction(f'UPDATE "{s}".only_a SET v = 2', f'UPDATE "{s}".only_b SET v = 2'))
    env.replicate("only_a")
    assert env.assert_equal("only_a") == 1 and env.assert_equal("only_b") == 1


def test_a_target_has_one_owner(it_env, capsys):
    from cdc.register.connector import ConnectClient, connector_name

    env, s = it_env, it_env.schema
    tables = env.settings.path(env.settings.tables_dir)
    for t in ("owned", "other"):
        env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, v text)')
        env.sql(f'INSERT INTO "{s}".{t} VALUES (1, \'{t}\')')
    env.register_table("owned")
    assert env.cdc("register", "--table", f"{s}.owned") == 0
    env.replicate("owned")
    client, connector = ConnectClient(env.settings.connect_url), connector_name(env.source)
    before = (env.catalog.load_table(f"{s}.owned").properties, client.config(connector))
    thief = tables / f"{s}.thief.yaml"
    thief.write_text(yaml.safe_dump({"name": f"{s}.thief", "source": {"schema": s, "table": "other"},
                                     "target": f"{s}.owned"}))
    try:
        for args in (("--dry-run",), ()):  # both files name the target: refused before anything changes
            capsys.readouterr()
            assert env.cdc("register", *args, "--table", f"{s}.thief") == 2
            err = capsys.readouterr().err
            assert f"registrations {s}.owned" in err and f"and {s}.thief" in err and "one owner" in err, err
        aside = tables / f"{s}.owned.yaml"
        aside.rename(aside.with_suffix(".away"))  # the owner's file gone: the target's own record refuses
        try:
            for args in (("register", "--table", f"{s}.thief"),
                         ("run", "--available-now", "--table", f"{s}.thief")):
                capsys.readouterr()
                assert env.cdc(*args) != 0
                err = capsys.readouterr().err
                assert f"its target lake.{s}.owned belongs to registration {s}.owned" in err, err
        finally:
            aside.with_suffix(".away").rename(aside)
    finally:
        thief.unlink()
    assert (env.catalog.load_table(f"{s}.owned").properties, client.config(connector)) == before
    env.replicate("owned", env.transaction(f'UPDATE "{s}".owned SET v = \'still mine\''))
    assert env.assert_equal("owned") == 1


def test_a_refused_registration_changes_nothing(it_env, capsys):
    from cdc.register.connector import ConnectClient, connector_name
    from cdc.control.kafka import existing_topics

    env, s = it_env, it_env.schema
    tables = env.settings.path(env.settings.tables_dir)
    env.sql(f'CREATE TABLE "{s}".twins (id int PRIMARY KEY, v int, "V" int)')
    env.sql(f'CREATE TABLE "{s}".reserved (id int PRIMARY KEY, "_CDC_OP" text, note text)')
    env.sql(f'INSERT INTO "{s}".reserved VALUES (1, \'x\', \'one\'), (2, \'y\', \'two\')')
    for table, problem in (("twins", "columns that differ only by case: 'v', 'V'"),
                           ("reserved", "'_CDC_OP' use the prefix '_cdc_' (in any case)")):
        capsys.readouterr()
        assert env.cdc("tables", "add", f"{s}.{table}") == 2
        assert problem in capsys.readouterr().err and not (tables / f"{s}.{table}.yaml").exists()

    # The reserved name left out of the target: the table registers and replicates.
    (tables / f"{s}.reserved.yaml").write_text(yaml.safe_dump(
        {"name": f"{s}.reserved", "source": {"schema": s, "table": "reserved"}, "exclude": ["_CDC_OP"]}))
    assert env.cdc("register", "--table", f"{s}.reserved") == 0
    env.replicate("reserved")
    rows = {r["id"]: r for r in env.target_records("reserved")}
    assert {i: r["note"] for i, r in rows.items()} == {1: "one", 2: "two"} and "_CDC_OP" not in rows[1]

    client, connector = ConnectClient(env.settings.connect_url), connector_name(env.source)
    before = client.config(connector)
    env.register_table("twins")
    try:
        for args in (("--dry-run",), ()):
            capsys.readouterr()
            assert env.cdc("register", *args, "--table", f"{s}.twins") == 2
            assert "Debezium refuses such a table" in capsys.readouterr().err
        assert not env.catalog.table_exists(f"{s}.twins")
        assert f"{env.source}.{s}.twins" not in existing_topics(env.settings.kafka_bootstrap)
        assert client.config(connector) == before

    finally:
        (tables / f"{s}.twins.yaml").unlink()
    # The other tables kept flowing.
    env.replicate("reserved", env.transaction(f'UPDATE "{s}".reserved SET note = \'changed\' WHERE id = 2'))
    assert {r["id"]: r["note"] for r in env.target_records("reserved")} == {1: "one", 2: "changed"}


def rolled_back_register(env, client, monkeypatch, name: str) -> str:
    """The connector step of `register` for table `name`, which must fail and roll back:
    its error, as text."""
    from cdc.config.loader import load_tables
    from cdc.errors import ConnectorError
    from cdc.register import registrar

    monkeypatch.setattr(registrar, "CAPTURE_CHECK_S", 30.0)
    selected = registrar.captured(env.settings, client, env.source, load_tables(env.settings, name))
    try:
        registrar._register_source(env.settings, client, env.source, selected, wait_snapshot=True)
    except ConnectorError as e:
        return str(e)
    raise AssertionError(f"the connector kept a configuration with {name} that stops capture")


def test_a_connector_update_that_stops_capture_is_rolled_back(it_env, monkeypatch, capsys):
    """The safety net under the preflight: a connector configuration Kafka Connect takes and
    Debezium then cannot run (an unlogged table, which the preflight refuses, handed to the
    connector step directly) leaves the connector as it was, and its tables flow on."""
    from cdc.register.connector import ConnectClient, connector_name

    env, s = it_env, it_env.schema
    tables = env.settings.path(env.settings.tables_dir)
    env.sql(f'CREATE TABLE "{s}".rolled_steady (id int PRIMARY KEY, v text)')
    env.sql(f'INSERT INTO "{s}".rolled_steady VALUES (1, \'one\')')
    assert env.cdc("register", "--table", env.register_table("rolled_steady")) == 0
    env.replicate("rolled_steady")
    env.sql(f'CREATE UNLOGGED TABLE "{s}".scratch (id int PRIMARY KEY, v text)')
    env.sql(f'INSERT INTO "{s}".scratch VALUES (1, \'lost\')')
    client, connector = ConnectClient(env.settings.connect_url), connector_name(env.source)
    before = client.config(connector)
    env.register_table("scratch")
    try:
        for args in (("--dry-run",), ()):
            capsys.readouterr()
            assert env.cdc("register", *args, "--table", f"{s}.scratch") == 2
            assert f"{s}.scratch is an unlogged table" in capsys.readouterr().err
        assert client.config(connector) == before

        refused = rolled_back_register(env, client, monkeypatch, f"{s}.scratch")
        assert "its previous configuration is back" in refused, refused
        assert 'cannot add relation "scratch" to publication' in refused, refused
        assert client.config(connector) == before
    finally:
        (tables / f"{s}.scratch.yaml").unlink()
    env.replicate("rolled_steady", env.transaction(f'UPDATE "{s}".rolled_steady SET v = \'flowing\''))
    assert env.assert_equal("rolled_steady") == 1


def test_a_column_that_lived_between_two_runs_keeps_its_values(it_env):
    """Added at the source and dropped again before the job ran: its values, carried by the
    change events of its lifetime, reach the target (every record's schema counts, not only
    the newest)."""
    env, s = it_env, it_env.schema
    env.sql(f'CREATE TABLE "{s}".brief (id int PRIMARY KEY, v int)')
    env.sql(f'INSERT INTO "{s}".brief VALUES (1, 1), (2, 2)')
    assert env.cdc("register", "--table", env.register_table("brief")) == 0
    env.replicate("brief")
    env.transaction(f'ALTER TABLE "{s}".brief ADD COLUMN extra text',
                    f'UPDATE "{s}".brief SET extra = \'kept \' || id, v = v + 10')
    env.transaction(f'ALTER TABLE "{s}".brief DROP COLUMN extra')
    env.replicate("brief", env.transaction(f'UPDATE "{s}".brief SET v = v + 100 WHERE id = 2'))
    rows = {r["id"]: (r["v"], r["extra"]) for r in env.target_records("brief")}
    assert rows == {1: (11, "kept 1"), 2: (112, None)}  # the source's v, and extra as its events said


def test_tables_add_refuses_a_key_column_register_would_refuse(it_env, capsys):
    """A primary key column whose name `register` refuses as a key column: `tables add`
    refuses it too, naming it and what to do, and writes nothing."""
    env, s = it_env, it_env.schema
    env.sql(f'CREATE TABLE "{s}".odd_key ("k\'1" int PRIMARY KEY, v text)')
    capsys.readouterr()
    assert env.cdc("tables", "add", f"{s}.odd_key") == 2
    err = capsys.readouterr().err
    assert "key column \"k'1\" is not a plain identifier" in err, err
    assert "rename the column at the source, or key the table by other columns" in err, err
    assert not (env.settings.path(env.settings.tables_dir) / f"{s}.odd_key.yaml").exists()


def test_register_goes_on_past_a_registration_that_does_not_load(stack, settings, it_env, tmp_path, capsys):
    """`register` of every table with one file that does not load: the others are registered
    and replicate, the bad file is named with its error, and the exit is 2 (configuration)."""
    from tests.conftest import _cleanup, postgres_env

    env = postgres_env(stack, settings, tmp_path, it_env.source + "r")
    s = env.schema
    try:
        for t in ("good_a", "good_b"):
            env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, v text)')
            env.sql(f'INSERT INTO "{s}".{t} VALUES (1, \'{t}\'), (2, \'two\')')
            assert env.cdc("tables", "add", f"{s}.{t}") == 0
        bad = env.settings.path(env.settings.tables_dir) / f"{s}.bad.yaml"
        bad.write_text(yaml.safe_dump({"name": f"{s}.bad", "source": {"schema": s, "table": "good_a"},
                                       "target": f"{s}.bad", "key": ["k'1"]}))
        capsys.readouterr()
        assert env.cdc("register") == 2
        err = capsys.readouterr().err
        assert f"table(s) {s}.bad not registered: their registration does not load" in err, err
        assert f"{bad}: key: key column \"k'1\" is not a plain identifier" in err, err
        assert env.catalog.table_exists(f"{s}.good_a") and env.catalog.table_exists(f"{s}.good_b")
        assert not env.catalog.table_exists(f"{s}.bad")
        env.replicate(("good_a", "good_b"), env.transaction(f'UPDATE "{s}".good_b SET v = \'changed\' WHERE id = 2'))
        assert env.assert_equal("good_a") == 2 and env.assert_equal("good_b") == 2
    finally:
        _cleanup(env)


def test_a_key_column_that_allows_null_is_refused_before_capture(it_env, capsys):
    """`--key` on columns that allow NULL: a row with a NULL in its key could not be applied,
    so `tables add` and `register` refuse, naming the columns and the remedy; once the
    columns are NOT NULL, the table registers and replicates."""
    env, s = it_env, it_env.schema
    tables = env.settings.path(env.settings.tables_dir)
    env.sql(f'CREATE TABLE "{s}".nk (a int, b text, v text)')
    env.sql(f'ALTER TABLE "{s}".nk REPLICA IDENTITY FULL')
    env.sql(f'INSERT INTO "{s}".nk VALUES (1, \'x\', \'one\'), (2, \'y\', \'two\')')
    hint = (f'ALTER TABLE "{s}"."nk" ALTER COLUMN "a" SET NOT NULL; '
            f'ALTER TABLE "{s}"."nk" ALTER COLUMN "b" SET NOT NULL')
    capsys.readouterr()
    assert env.cdc("tables", "add", f"{s}.nk", "--key", "a,b") == 2
    err = capsys.readouterr().err
    assert f"{s}.nk (registration {s}.nk): key columns a, b allow NULL" in err and hint in err, err
    assert not (tables / f"{s}.nk.yaml").exists()
    env.register_table("nk", key=["a", "b"])  # written by hand: `register` refuses it the same way
    try:
        for args in (("--dry-run",), ()):
            capsys.readouterr()
            assert env.cdc("register", *args, "--table", f"{s}.nk") == 2
            err = capsys.readouterr().err
            assert "key columns a, b allow NULL" in err and hint in err, err
        assert not env.catalog.table_exists(f"{s}.nk")
        capsys.readouterr()
        env.cdc("doctor", "--source", env.source)  # the preflight says it too
        out = capsys.readouterr().out
        assert f"FAIL  [{env.source} {s}.nk] columns: {s}.nk (registration {s}.nk): key columns a, b allow NULL" \
            in out and hint in out, out
    finally:
        (tables / f"{s}.nk.yaml").unlink()
    env.sql(f'ALTER TABLE "{s}".nk ALTER COLUMN a SET NOT NULL')
    capsys.readouterr()
    assert env.cdc("tables", "add", f"{s}.nk", "--key", "a,b") == 2  # b still allows NULL
    err = capsys.readouterr().err
    assert "key column b allows NULL" in err and f'ALTER TABLE "{s}"."nk" ALTER COLUMN "b" SET NOT NULL' in err, err
    env.sql(f'ALTER TABLE "{s}".nk ALTER COLUMN b SET NOT NULL')
    assert env.cdc("tables", "add", f"{s}.nk", "--key", "a,b") == 0
    assert env.cdc("register", "--table", f"{s}.nk") == 0
    env.replicate("nk", env.transaction(f'UPDATE "{s}".nk SET v = \'changed\' WHERE a = 2'))
    assert env.assert_equal("nk", key=("a", "b")) == 2


def test_a_mariadb_key_column_that_allows_null_is_refused_with_its_statement(it_mariadb, capsys):
    env, s = it_mariadb, it_mariadb.schema
    env.sql(f"CREATE TABLE `{s}`.nk (a INT, b VARCHAR(10), v TEXT, UNIQUE KEY (a, b))")
    capsys.readouterr()
    assert env.cdc("tables", "add", f"{s}.nk", "--key", "a,b") == 2
    err = capsys.readouterr().err
    assert f"{s}.nk (registration {s}.nk): key columns a, b allow NULL" in err, err
    assert (f"ALTER TABLE `{s}`.`nk` MODIFY `a` int(11) NOT NULL; "
            f"ALTER TABLE `{s}`.`nk` MODIFY `b` varchar(10) NOT NULL") in err, err
    assert not (env.settings.path(env.settings.tables_dir) / f"{s}.nk.yaml").exists()
    env.sql(f"ALTER TABLE `{s}`.nk MODIFY a int(11) NOT NULL, MODIFY b varchar(10) NOT NULL")
    assert env.cdc("tables", "add", f"{s}.nk", "--key", "a,b") == 0
