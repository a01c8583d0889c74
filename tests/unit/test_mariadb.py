"""MariaDB pieces that need no server: column kinds, positions, markers, settings and the
connector config."""
import pytest

from cdc.config.models import Settings, SourceSettings, TableRegistration
from cdc.decoding.envelope import decode
from cdc.errors import ConfigError
from cdc.planning.position import after_count, mariadb_position
from cdc.register.connector import connector_config
from cdc.sources.mariadb import GtidMarker, binlog_index
from cdc.sources.types import debezium_column, mariadb_column


def kind(data_type, column_type=None, precision=None, scale=None, datetime_precision=None):
    c = mariadb_column("c", data_type, column_type or data_type, True, precision, scale, datetime_precision, "t")
    return c.kind, c.spark_type


def test_column_kinds_follow_the_type_table():
    assert kind("tinyint", "tinyint(1)") == ("int", "INT")
    assert kind("int", "int(10) unsigned") == ("long", "BIGINT")
    assert kind("bigint", "bigint(20) unsigned") == ("decimal", "DECIMAL(20,0)")
    assert kind("decimal", "decimal(12,2)", 12, 2) == ("decimal", "DECIMAL(12,2)")
    assert kind("float") == ("float", "FLOAT") and kind("double") == ("double", "DOUBLE")
    assert kind("bit", "bit(1)", 1) == ("boolean", "BOOLEAN") and kind("bit", "bit(12)", 12) == ("bits", "BINARY")
    assert kind("datetime", datetime_precision=3) == ("timestamp_ms", "TIMESTAMP_NTZ")
    assert kind("datetime", datetime_precision=6) == ("timestamp_us", "TIMESTAMP_NTZ")
    assert kind("timestamp") == ("timestamptz", "TIMESTAMP") and kind("time") == ("duration_us", "STRING")
    assert kind("set", "set('a','b')") == ("string", "STRING") and kind("longblob") == ("binary", "BINARY")


@pytest.mark.parametrize("data_type", ["uuid", "inet6", "geometry"])
def test_unsupported_types_are_refused_with_the_column_named(data_type):
    with pytest.raises(ConfigError, match=f"column 'c' has type {data_type}|column 'c' has type '{data_type}'"):
        kind(data_type)


def test_event_schemas_name_the_same_kinds():
    def params(t, length=None, scale=None):
        p = {"__debezium.source.column.type": t}
        if length is not None:
            p["__debezium.source.column.length"] = str(length)
        if scale is not None:
            p["__debezium.source.column.scale"] = str(scale)
        return p

    assert debezium_column("x", "int64", None, params("BIGINT", 20), "t", "mariadb").kind == "long"
    assert debezium_column("x", "int64", None, params("INT UNSIGNED", 10), "t", "mariadb").kind == "long"
    assert debezium_column("x", "string", None, params("NUMERIC", 12, 2), "t", "mariadb").spark_type == "DECIMAL(12,2)"
    assert debezium_column("x", "boolean", None, params("BIT", 1), "t", "mariadb").kind == "boolean"
    assert debezium_column("x", "int64", "io.debezium.time.Timestamp", params("DATETIME"), "t", "mariadb").kind == \
        "timestamp_ms"
    assert debezium_column("x", "int64", "io.debezium.time.MicroTimestamp", params("DATETIME", 6), "t",
                           "mariadb").kind == "timestamp_us"


def test_positions_compare_file_number_then_offset_then_row_as_numbers():
    def p(file, pos, row=0, op="u", offset=0):
        return mariadb_position({"file": file, "pos": pos, "row": row}, op, 0, offset)

    assert p("binlog.000009", 99999) < p("binlog.000010", 4)  # by number, not text
    assert p("binlog.000001", 900) < p("binlog.000001", 1000)  # 900 < 1000 though "900" > "1000"
    assert p("binlog.000001", 500, row=1) < p("binlog.000001", 500, row=2)
    assert p("binlog.000001", 500, op="r", offset=9) < p("binlog.000001", 500, offset=1)  # snapshot first
    assert binlog_index("mariadb-bin.000042") == 42


def test_reconcile_tells_changes_after_the_count():
    position = mariadb_position({"file": "binlog.000003", "pos": 1200, "row": 4}, "u", 0, 0)
    assert after_count(position, (3, 1200)) and after_count(position, (2, 99999))
    assert not after_count(position, (3, 1201)) and not after_count(position, (4, 0))


def test_envelope_without_binlog_file_has_no_position():
    key = b'{"schema": {}, "payload": {"id": 1}}'
    value = b'{"schema": {}, "payload": {"op": "c", "after": {"id": 1}, "source": {"pos": 5}}}'
    with pytest.raises(Exception, match="no source position"):
        decode(key, value, 0, 0, ("id",), "mariadb")
    ok = value.replace(b'"pos": 5', b'"file": "binlog.000002", "pos": 5')
    assert decode(key, ok, 0, 0, ("id",), "mariadb").position[:16] == f"{2:016x}"


def test_marker_is_captured_once_the_offset_completes_its_transaction():
    marker = GtidMarker(0, 1, 40)
    assert not marker.captured_by([{"gtids": "0-1-39", "event": 2}])
    assert marker.captured_by([{"gtids": "0-1-40"}]) and marker.captured_by([{"gtids": "1-2-7,0-1-41"}])
    assert not marker.captured_by([{"gtids": "1-1-99"}])  # another domain


def test_source_defaults_and_connector_config(tmp_path):
    src = SourceSettings(kind="mariadb", database="shop", user="cdc", password="x")
    assert src.signal_table == "shop.cdc_signal"
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    settings = Settings(root=root, sources={"maria": src})
    reg = TableRegistration(name="shop.orders", source={"name": "maria", "schema": "shop", "table": "orders"})
    config = connector_config(settings, "maria", [reg], "secret-ref")
    assert config["connector.class"] == "io.debezium.connector.mariadb.MariaDbConnector"
    assert config["table.include.list"] == "shop.cdc_signal,shop.orders"
    assert config["database.include.list"] == "shop" and config["topic.prefix"] == "maria"
    assert 5400 <= int(config["database.server.id"]) < 6400 and config["database.password"] == "secret-ref"
    assert not any("{" in v for v in config.values() if isinstance(v, str) and "${" not in v)
    assert config["heartbeat.action.query"] == ("INSERT INTO `shop`.`cdc_heartbeat` (id, beat) VALUES (1, NOW(6)) "
                                                "ON DUPLICATE KEY UPDATE beat = NOW(6)")


def test_the_heartbeat_table_is_quoted_in_the_signal_tables_database():
    from cdc.sources.mariadb import heartbeat_query, heartbeat_table
    assert heartbeat_table("sh`op.cdc_signal") == "`sh``op`.`cdc_heartbeat`"
    assert heartbeat_query("sh`op.sig").startswith("INSERT INTO `sh``op`.`cdc_heartbeat` ")


def test_the_snapshot_read_quotes_names_and_reads_each_kind_in_its_wire_form():
    from cdc.sources.mariadb import snapshot_query, wire_select
    reg = TableRegistration(name="sh.t", source={"name": "maria", "schema": "shop", "table": "orders"})
    columns = (mariadb_column("we`ird", "varchar", "varchar(10)", True, None, None, None, "t"),
               mariadb_column("b", "bit", "bit(12)", True, 12, None, None, "t"))
    sql = snapshot_query(reg, columns)
    assert "CAST(`we``ird` AS CHAR) AS `we``ird`" in sql and "FROM `shop`.`orders`" in sql
    assert "LPAD(HEX(`b`), 4, '0')" in sql  # two bytes for twelve bits
    assert "BINLOG_SNAPSHOT_POSITION" in sql and sql.startswith("SELECT s.f AS _cdc_binlog_file")
    every = ("tinyint", "int", "bigint", "float", "double", "decimal", "char", "blob", "date", "datetime",
             "timestamp", "time", "year", "json", "enum")
    assert all(wire_select(mariadb_column("c", t, t, True, 10, 2, 6, "t")) for t in every)
