import re

import pytest

from cdc.config import load_settings, load_tables
from cdc.errors import ConfigError
from cdc.sources.types import postgres_column

BASE = """
sources:
  pg: {host: 127.0.0.1, port: 5432, database: app, user: repl, password: "${CDC_TEST_PW}"}
tables_dir: tables
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("CDC_TEST_PW", "s3cret")
    (tmp_path / "cdc.yaml").write_text(BASE)
    (tmp_path / "tables").mkdir()
    return tmp_path


def write_table(project, name, body):
    (project / "tables" / f"{name}.yaml").write_text(body)


def test_minimal_registration_defaults(project):
    write_table(project, "shop.orders", "name: shop.orders\nsource: {schema: public, table: orders}\n")
    s = load_settings(project / "cdc.yaml")
    (t,) = load_tables(s)
    assert t.source.name == "pg" and t.target == "shop.orders" and t.key is None
    assert s.sources["pg"].password.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(s)
    assert s.state_dir == (project / ".state").resolve()


def test_unset_env_reference_names_the_variable(project, monkeypatch):
    monkeypatch.delenv("CDC_TEST_PW")
    (project / "cdc.yaml").write_text(BASE + "tables_dir: ${CDC_TEST_TABLES}\n".replace("tables_dir", "state_dir"))
    with pytest.raises(ConfigError, match=r"state_dir refers to \$\{CDC_TEST_TABLES\}"):
        load_settings(project / "cdc.yaml")


def test_a_secret_is_needed_only_by_the_commands_that_read_it(project, monkeypatch):
    """An unset ${VAR} of a password or the masking key is refused when it is read, not when
    cdc.yaml loads: `cdc stack down` or `status` need no masking key."""
    from cdc.config.clients import read_secret
    from cdc.sources import password

    monkeypatch.delenv("CDC_TEST_PW")
    monkeypatch.delenv("CDC_TEST_MASK", raising=False)
    (project / "cdc.yaml").write_text(BASE + "masking: {key: '${CDC_TEST_MASK}'}\n")
    s = load_settings(project / "cdc.yaml")
    with pytest.raises(ConfigError, match=r"masking.key refers to \$\{CDC_TEST_MASK\}, which is not set"):
        read_secret(s, s.masking.key, s.masking.key_file, "masking.key")
    with pytest.raises(ConfigError, match=r"sources.pg.password refers to \$\{CDC_TEST_PW\}"):
        password(s, s.sources["pg"], "pg")
    monkeypatch.setenv("CDC_TEST_PW", "later")
    assert load_settings(project / "cdc.yaml").sources["pg"].password.get_secret_value() == "later"


@pytest.mark.parametrize("file, body, error", [
    ("shop.orders", "name: shop.orders\nsource: {schema: public, table: orders}\nkeys: [id]\n",
     r"unknown key 'keys'"),
    ("shop.orders", "name: shop.orders\nsource: {name: nope, schema: public, table: orders}\n",
     r"unknown source 'nope'"),
    ("shop.orders", "name: shop.orders\nsource: {schema: public}\n", r"source.table is required"),
    ("shop.orders", "name: shop.orders\nsource: {schema: public, table: 'x; DROP TABLE y'}\n",
     r"not a plain identifier"),
    ("shop.other", "name: shop.orders\nsource: {schema: public, table: orders}\n",
     r"must be named shop.orders.yaml"),
    ("shop.orders", "name: shop.orders\nsource: {schema: public, table: orders}\nsink: delta\nsink: iceberg\n",
     r"key 'sink' is given twice \(lines 3 and 4\)"),
    ("shop.orders", "name: shop.orders\nsource: {schema: public, table: orders, table: customers}\n",
     r"key 'table' is given twice"),
], ids=["unknown-key", "unknown-source", "missing-table", "identifier", "file-name", "key-twice", "nested-key-twice"])
def test_bad_registrations_are_refused_by_name(project, file, body, error):
    write_table(project, file, body)
    with pytest.raises(ConfigError, match=error):
        load_tables(load_settings(project / "cdc.yaml"))


def test_unknown_table_selection(project):
    with pytest.raises(ConfigError, match=r"no registered table named 'a.b'"):
        load_tables(load_settings(project / "cdc.yaml"), "a.b")


def test_tables_are_selected_by_names_and_patterns(project):
    for name in ("shop.orders", "shop.lines", "crm.people"):
        write_table(project, name, f"name: {name}\nsource: {{schema: public, table: {name.split('.')[1]}}}\n")
    settings = load_settings(project / "cdc.yaml")

    def names(only):
        return [t.name for t in load_tables(settings, only)]

    assert names(None) == ["crm.people", "shop.lines", "shop.orders"]
    assert names("shop.orders") == names(["shop.orders"]) == ["shop.orders"]
    assert names(["shop.*"]) == ["shop.lines", "shop.orders"]
    assert names(["shop.orders", "crm.people", "shop.orders"]) == ["crm.people", "shop.orders"]
    assert names(["*.?eople", "shop.l[i]nes"]) == ["crm.people", "shop.lines"]
    with pytest.raises(ConfigError, match=r"(?s)no registered table matches 'sales\.\*'.*pick one of: crm.people, "):
        load_tables(settings, ["shop.*", "sales.*"])
    with pytest.raises(ConfigError, match=r"no registered table named 'Shop.orders'"):  # names match exactly
        load_tables(settings, ["Shop.orders"])


def test_several_sources_need_a_name(project):
    (project / "cdc.yaml").write_text(BASE.replace("tables_dir", "  pg2: {database: b, user: u}\ntables_dir"))
    write_table(project, "shop.orders", "name: shop.orders\nsource: {schema: public, table: orders}\n")
    with pytest.raises(ConfigError, match=r"source.name is required"):
        load_tables(load_settings(project / "cdc.yaml"))


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.yaml")


def test_unsupported_type_is_a_registration_error():
    with pytest.raises(ConfigError, match=r"column 'shape' has type 'point'"):
        postgres_column("shape", "point", True, None, None, None, table="s.t")
    with pytest.raises(ConfigError, match=r"column 'big' has type 'numeric\(50,5\)'"):
        postgres_column("big", "numeric", True, 50, 5, None, table="s.t")
    with pytest.raises(ConfigError, match=r"column 'boxes' has type 'array _box'"):
        postgres_column("boxes", "ARRAY", True, None, None, None, table="s.t", udt_name="_box")
    with pytest.raises(ConfigError, match=r"column 'c' has type 'user-defined complex'"):
        postgres_column("c", "USER-DEFINED", True, None, None, None, table="s.t", udt_name="complex", type_kind="c")


def test_column_names_debezium_spark_or_delta_would_refuse_are_found_first():
    from cdc.sources.types import check_columns

    def cols(*names):
        return tuple(postgres_column(n, "text", True, None, None, None, table="s.t") for n in names)

    with pytest.raises(ConfigError, match=r"s.t: columns that differ only by case: 'id', 'Id'") as e:
        check_columns(cols("id", "Id", "v"), "s.t", "iceberg")
    assert "Debezium refuses such a table" in e.value.hint
    with pytest.raises(ConfigError, match=r"column\(s\) '_CDC_OP' use the prefix '_cdc_' \(in any case\)") as e:
        check_columns(cols("id", "_CDC_OP"), "s.t", "iceberg", where="tables/s.t.yaml")
    assert "`exclude:` in tables/s.t.yaml" in e.value.hint
    check_columns(cols("id", "_CDC_OP"), "s.t", "iceberg", exclude=("_CDC_OP",))  # left out: accepted
    check_columns(cols("id", "a b", "x=y"), "s.t", "iceberg")  # Iceberg takes any name
    with pytest.raises(ConfigError, match=r"'a b', 'x=y' hold characters a Delta table refuses"):
        check_columns(cols("id", "a b", "x=y"), "s.t", "delta")
    check_columns(cols("id", "a b"), "s.t", "delta", exclude=("a b",))


def test_type_kinds():
    assert postgres_column("a", "numeric", True, 10, 2, None, "t").spark_type == "DECIMAL(10,2)"
    assert postgres_column("a", "timestamp without time zone", True, None, None, 3, "t").kind == "timestamp_ms"
    assert postgres_column("a", "timestamp without time zone", True, None, None, 6, "t").kind == "timestamp_us"
    assert postgres_column("a", "numeric", True, None, None, None, "t").spark_type == "DECIMAL(38,18)"
    assert postgres_column("a", "money", True, None, None, None, "t").spark_type == "DECIMAL(19,2)"
    assert postgres_column("a", "time without time zone", True, None, None, 3, "t").kind == "time_ms"
    assert postgres_column("a", "interval", True, None, None, 6, "t").spark_type == "STRING"
    arr = postgres_column("a", "ARRAY", True, None, None, None, "t", udt_name="_int8")
    assert (arr.kind, arr.element, arr.spark_type) == ("array", "long", "ARRAY<BIGINT>")
    assert postgres_column("a", "USER-DEFINED", True, None, None, None, "t", udt_name="mood",
                           type_kind="e").kind == "string"


def test_errors_never_echo_a_password(project):
    (project / "cdc.yaml").write_text(BASE.replace("pg:", "'bad name':"))
    with pytest.raises(ConfigError) as e:
        load_settings(project / "cdc.yaml")
    assert "s3cret" not in str(e.value)


def test_a_file_that_is_not_utf8_is_named(project):
    (project / "cdc.yaml").write_bytes(BASE.encode() + b"# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"cdc.yaml is not UTF-8 text: byte 0xe9 at offset \d+"):
        load_settings(project / "cdc.yaml")
    (project / "cdc.yaml").write_text(BASE)
    write_table(project, "shop.a", "name: shop.a\nsource: {schema: public, table: a}\n")
    (project / "tables" / "shop.bad.yaml").write_bytes(b"name: caf\xe9\n")
    s = load_settings(project / "cdc.yaml")
    with pytest.raises(ConfigError, match=r"shop.bad.yaml is not UTF-8 text"):
        load_tables(s)


def test_one_bad_registration_is_left_out_when_asked_and_reported_when_selected(project):
    write_table(project, "shop.a", "name: shop.a\nsource: {schema: public, table: a}\n")
    write_table(project, "shop.bad", "name: shop.bad\nsource: {schema: public, table: b}\nno_such_key: 1\n")
    s = load_settings(project / "cdc.yaml")
    bad: list = []
    assert [t.name for t in load_tables(s, "shop.a", invalid=bad)] == ["shop.a"] and bad == []
    assert [t.name for t in load_tables(s, "shop.*", invalid=bad)] == ["shop.a"]
    (found,) = bad
    assert found.name == "shop.bad" and "unknown key 'no_such_key'" in str(found.error)
    bad.clear()
    assert load_tables(s, "shop.bad", invalid=bad) == [] and [b.name for b in bad] == ["shop.bad"]
    with pytest.raises(ConfigError, match="no_such_key"):
        load_tables(s, "shop.a")  # without `invalid`: every file must load


@pytest.mark.parametrize("section, error", [
    ("kafka: {bootstrap_servers: 'not a host'}", "is not host:port"),
    ("kafka: {bootstrap_servers: 'kafka:9092,kafka 2:9092'}", "broker host 'kafka 2' is not a host name"),
    ("kafka: {bootstrap_servers: 'kafka:99999'}", "is not host:port"),
    ("connect: {url: 'ftp://x'}", "is not an http(s) URL"),
    ("schema_registry: {url: 'registry:8081'}", "is not an http(s) URL"),
    ("spark: {driver_memory: lots}", "is not a JVM memory size"),
])
def test_hosts_urls_and_sizes_are_checked_for_form_at_load(project, section, error):
    (project / "cdc.yaml").write_text(BASE + section + "\n")
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_settings(project / "cdc.yaml")


def test_well_formed_hosts_urls_and_sizes_load(project):
    (project / "cdc.yaml").write_text(BASE.replace("127.0.0.1", "'::1'") + "kafka: {bootstrap_servers: "
                                      "'k1.example.com:9092,[::1]:9093,SASL_SSL://kafka_2:9094,10.0.0.1:9092,'}\n"
                                      "connect: {url: 'https://connect.example.com:8083/'}\n"
                                      "spark: {driver_memory: 512m}\n")
    s = load_settings(project / "cdc.yaml")
    assert s.spark.driver_memory == "512m" and s.connect.url.startswith("https://")
