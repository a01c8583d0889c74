"""MariaDB sources: connection from settings, table introspection, the signal table, and
markers that tell when the connector has captured everything written before them.

In MariaDB a registration's `source.schema` is the database the table lives in."""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, replace

import pymysql

from cdc.config.models import Settings, TableRegistration
from cdc.errors import ConfigError, SourceError, SourceUnreachable
from cdc.sources import no_key, password
from cdc.sources.postgres import SourceTable
from cdc.sources.types import Column, check_columns, mariadb_column

_BINLOG_INDEX = re.compile(r"\.(\d+)$")
_BIT_WIDTH = re.compile(r"bit\((\d+)\)")

REFUSED_LOGIN = (1044, 1045, 1049)  # access denied to the database, to the user; unknown database


def connect(settings: Settings, name: str) -> pymysql.Connection:
    src = settings.sources[name]
    try:
        return pymysql.connect(host=src.host, port=src.port, database=src.database, user=src.user,
                               password=password(settings, src, name), connect_timeout=10, autocommit=True,
                               charset="utf8mb4")
    except pymysql.MySQLError as e:
        refused = bool(e.args) and e.args[0] in REFUSED_LOGIN
        raise (SourceError if refused else SourceUnreachable)(
            f"cannot connect to source {name!r} at {src.host}:{src.port}/{src.database}: {e}",
            hint="check the source's user, password and database in cdc.yaml" if refused
            else "check the source in cdc.yaml and that the database runs") from None


def _rows(conn: pymysql.Connection, sql: str, params=()) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def ident(name: str) -> str:
    """A MariaDB identifier, quoted."""
    return "`" + name.replace("`", "``") + "`"


def qualified(reg: TableRegistration) -> str:
    return f"{ident(reg.source.schema_)}.{ident(reg.source.table)}"


def describe_table(conn: pymysql.Connection, reg: TableRegistration) -> SourceTable:
    """Columns and key of a registered table; the key is the primary key unless given."""
    schema, table = reg.source.schema_, reg.source.table
    where = f"{schema}.{table} (registration {reg.name})"
    rows = _rows(conn, "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE = 'YES', NUMERIC_PRECISION, "
                       "NUMERIC_SCALE, DATETIME_PRECISION FROM information_schema.COLUMNS "
                       "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table))
    if not rows:
        raise ConfigError(f"source table {schema}.{table} does not exist in source {reg.source.name!r} "
                          f"(registration {reg.file})", hint="create the table or fix source.schema/source.table")
    (kind,) = _rows(conn, "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                          "AND TABLE_NAME = %s", (schema, table))[0]
    if kind not in ("BASE TABLE", "SYSTEM VERSIONED"):  # a VIEW, a SYSTEM VIEW or a SEQUENCE
        raise ConfigError(f"{schema}.{table} is a {kind.lower()}, not a table: the binary log carries the row "
                          f"changes of tables only", hint="register the table(s) it reads from instead")
    columns = tuple(mariadb_column(r[0], r[1], r[2], bool(r[3]), r[4], r[5], r[6], where) for r in rows)
    names = [c.name for c in columns]
    primary_key = tuple(r[0] for r in _rows(
        conn, "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
              "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION", (schema, table)))
    if reg.key is not None:
        missing = [k for k in reg.key if k not in names]
        if missing:
            raise ConfigError(f"{reg.file}: key column(s) {missing} are not columns of {schema}.{table}",
                              hint="columns are: " + ", ".join(names))
        key = reg.key
    else:
        key = primary_key
        if not key:
            raise no_key(schema, table, reg)
    check_columns(columns, where, reg.sink, reg.exclude, str(reg.file or "its registration"))
    nullable_key = tuple(k for k in key if any(c.name == k and c.nullable for c in columns))
    columns = tuple(replace(c, nullable=c.nullable and c.name not in key) for c in columns)
    return SourceTable(columns, key, nullable_key=nullable_key)


def not_null_sql(reg: TableRegistration, column: Column) -> str:
    """The statement that declares a column of the registered table NOT NULL (its type as
    the source gives it; its character set, collation and default stay to add by hand)."""
    return f"ALTER TABLE {qualified(reg)} MODIFY {ident(column.name)} {column.source_type} NOT NULL"


# The server settings Debezium needs: a row-based binary log with full row images.
BINLOG_WANTED = (("log_bin", "1"), ("binlog_format", "ROW"), ("binlog_row_image", "FULL"))


def binlog_settings(conn: pymysql.Connection) -> dict:
    """The server's values of the BINLOG_WANTED settings."""
    return dict(_rows(conn, "SELECT 'log_bin', @@log_bin UNION ALL SELECT 'binlog_format', @@binlog_format "
                            "UNION ALL SELECT 'binlog_row_image', @@binlog_row_image"))


def binlog_wrong(values: dict) -> list[str]:
    """The settings of `values` that differ from BINLOG_WANTED, each with the value it needs."""
    return [f"{k}={values.get(k)} (needs {want})" for k, want in BINLOG_WANTED if str(values.get(k)).upper() != want]


def check_binlog(conn: pymysql.Connection, name: str) -> None:
    """The server settings Debezium needs: a row-based binary log with full row images."""
    wrong = binlog_wrong(binlog_settings(conn))
    if wrong:
        raise SourceError(f"source {name!r}: the MariaDB server is not set up for change capture: {', '.join(wrong)}",
                          hint="start mariadbd with --log-bin --binlog-format=ROW --binlog-row-image=FULL")


def ensure_publication(conn: pymysql.Connection, settings: Settings, source: str, dry_run: bool = False) -> str | None:
    """Nothing to do: the binary log has no publication (a partitioned table is one table)."""
    return None


def publishes_via_root(conn: pymysql.Connection) -> bool:
    """A partitioned table is one table to the binary log: nothing is published through a root."""
    return False


def _split(qualified_name: str) -> tuple[str, str]:
    schema, table = qualified_name.split(".")
    return schema, table


def ensure_signal_table(conn: pymysql.Connection, signal_table: str) -> None:
    """Debezium's signal table (id, type, data) and the heartbeat table beside it, created
    when missing."""
    schema, table = _split(signal_table)
    _rows(conn, f"CREATE TABLE IF NOT EXISTS {ident(schema)}.{ident(table)} (id VARCHAR(64) PRIMARY KEY, "
                f"type VARCHAR(32) NOT NULL, data VARCHAR(2048)) ENGINE=InnoDB")
    _rows(conn, f"CREATE TABLE IF NOT EXISTS {heartbeat_table(signal_table)} (id INT PRIMARY KEY, "
                f"beat TIMESTAMP(6) NOT NULL) ENGINE=InnoDB")


HEARTBEAT_TABLE = "cdc_heartbeat"


def heartbeat_table(signal_table: str) -> str:
    """The one-row table the connector's heartbeat writes, in the signal table's database, quoted."""
    return f"{ident(_split(signal_table)[0])}.{ident(HEARTBEAT_TABLE)}"


def heartbeat_query(signal_table: str) -> str:
    """The connector's `heartbeat.action.query`: a transaction of its own at every heartbeat.
    Debezium's MariaDB connector holds a DDL statement's transaction open until the next
    transaction begins and counts each server heartbeat into it; restarted, it skips that
    many events, the changes after the DDL among them. A write at each heartbeat begins
    the next transaction within one heartbeat, so the count stays within the DDL's own events."""
    return (f"INSERT INTO {heartbeat_table(signal_table)} (id, beat) VALUES (1, NOW(6)) "
            f"ON DUPLICATE KEY UPDATE beat = NOW(6)")


@dataclass(frozen=True)
class GtidMarker:
    """A transaction at the source, by its GTID (domain-server-sequence)."""

    domain: int
    server: int
    sequence: int

    def captured_by(self, offsets: list[dict]) -> bool:
        """Whether a connector offset is past this transaction: its GTID position holds a
        later sequence in the same domain (the offset names the transaction last completed)."""
        for o in offsets:
            for gtid in str(o.get("gtids") or "").split(","):
                parts = gtid.strip().split("-")
                if len(parts) == 3 and parts[0].isdigit() and int(parts[0]) == self.domain \
                        and int(parts[2]) >= self.sequence:
                    return True
        return False

    def __str__(self) -> str:
        return f"{self.domain}-{self.server}-{self.sequence}"


def _signal(conn: pymysql.Connection, signal_table: str, id_: str, type_: str, data: str) -> GtidMarker:
    """Insert one signal row in a transaction of its own and return that transaction. A
    second, `log` row follows it: the connector records a transaction as completed in its
    offset only with a later event, and an idle server sends none for a long while."""
    schema, table = _split(signal_table)
    insert = f"INSERT INTO {ident(schema)}.{ident(table)} (id, type, data) VALUES (%s, %s, %s)"
    with conn.cursor() as cur:
        cur.execute(insert, (id_, type_, data))
        cur.execute("SELECT @@last_gtid")
        (gtid,) = cur.fetchone()
        cur.execute(insert, (f"cdc-follow-{uuid.uuid4()}", "log", json.dumps({"message": "cdc marker follow-up"})))
    domain, server, sequence = (int(x) for x in gtid.split("-"))
    return GtidMarker(domain, server, sequence)


def request_incremental_snapshot(conn: pymysql.Connection, signal_table: str, tables: list[str]) -> GtidMarker:
    """Ask Debezium for an incremental snapshot of `tables` (database.table)."""
    return _signal(conn, signal_table, str(uuid.uuid4()), "execute-snapshot",
                   json.dumps({"data-collections": tables, "type": "incremental"}))


def send_snapshot_signal(conn: pymysql.Connection, signal_table: str, data: str) -> GtidMarker:
    """An `execute-snapshot` signal with its `data` (JSON); returns the signalling transaction."""
    return _signal(conn, signal_table, str(uuid.uuid4()), "execute-snapshot", data)


def signal_data_chars(conn: pymysql.Connection, signal_table: str) -> int | None:
    """The most characters the signal table's `data` column holds (None: unbounded)."""
    rows = _rows(conn, "SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                       "AND TABLE_NAME = %s AND COLUMN_NAME = 'data'", _split(signal_table))
    return int(rows[0][0]) if rows and rows[0][0] is not None else None


def literal(conn: pymysql.Connection, value) -> str:
    """A value as a MariaDB literal (for SQL that leaves pymysql, such as Debezium's
    snapshot filter); bytes as a binary string."""
    return conn.escape(value)


def write_marker(conn: pymysql.Connection, signal_table: str) -> GtidMarker:
    """A transaction Debezium certainly captures (a `log` signal: it only logs a line)."""
    return _signal(conn, signal_table, f"cdc-marker-{uuid.uuid4()}", "log", json.dumps({"message": "cdc marker"}))


def binlog_index(file_name: str) -> int:
    """The sequence number of a binary log file (`binlog.000042` -> 42)."""
    m = _BINLOG_INDEX.search(file_name or "")
    if not m:
        raise SourceError(f"binary log file name {file_name!r} has no sequence number")
    return int(m.group(1))


def count_at_position(conn: pymysql.Connection, reg: TableRegistration) -> tuple[int, tuple[int, int], str, None]:
    """The table's rows and the binary log position they reflect, in one consistent snapshot
    (MariaDB reports the position of a consistent-snapshot transaction). Returns (rows,
    (binlog file index, position), the position as text, None: the position says it all)."""
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute(f"SELECT count(*) FROM {qualified(reg)}")
        (rows,) = cur.fetchone()
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {k.lower(): v for k, v in cur.fetchall()}
        cur.execute("COMMIT")
    file_name, pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
    return int(rows), (binlog_index(file_name), pos), f"{file_name}:{pos}", None


def has_rows(conn: pymysql.Connection, reg: TableRegistration) -> bool:
    """Whether the table holds a row."""
    return bool(_rows(conn, f"SELECT 1 FROM {qualified(reg)} LIMIT 1"))


def estimate_rows(conn: pymysql.Connection, reg: TableRegistration) -> int:
    """The table's row count: InnoDB's estimate, or a count when it has none."""
    rows = _rows(conn, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                 (reg.source.schema_, reg.source.table))
    if not rows or rows[0][0] is None:
        rows = _rows(conn, f"SELECT count(*) FROM {qualified(reg)}")
    return int(rows[0][0])


def release_capture(conn: pymysql.Connection, settings: Settings, source: str) -> list[str]:
    """Nothing to drop once no table is captured: the binary log is the server's own."""
    return []


def wire_select(column: Column) -> str:
    """MariaDB SQL reading `column` in its Debezium wire form, so a JDBC read converts it
    exactly as streaming does (sources/types.py: KINDS)."""
    x = ident(column.name)
    if column.kind in ("int", "long"):
        return f"CAST({x} AS SIGNED)"  # YEAR and TINYINT(1) too, which a JDBC driver reads as dates and booleans
    if column.kind in ("decimal", "string"):  # CHAR, ENUM and SET too, which Spark would pad as CHAR(n)
        return f"CAST({x} AS CHAR)"
    if column.kind == "float":  # exact: the text protocol gives a FLOAT six digits
        return f"CAST({x} AS DOUBLE)"
    if column.kind == "boolean":
        return f"{x} + 0"
    if column.kind == "bits":  # the bytes least significant first, as many as the width holds
        width = int(_BIT_WIDTH.search(column.source_type).group(1))
        return f"TO_BASE64(REVERSE(UNHEX(LPAD(HEX({x}), {2 * ((width + 7) // 8)}, '0'))))"
    if column.kind == "binary":
        return f"REPLACE(TO_BASE64({x}), CHAR(10 USING ascii), '')"
    if column.kind == "date":
        return f"DATEDIFF({x}, DATE '1970-01-01')"
    if column.kind in ("timestamp_us", "timestamp_ms"):
        micros = f"TIMESTAMPDIFF(MICROSECOND, TIMESTAMP '1970-01-01 00:00:00', {x})"
        return micros if column.kind == "timestamp_us" else f"FLOOR({micros} / 1000)"
    if column.kind == "timestamptz":  # the stored UTC instant, whatever the session's time zone
        return (f"DATE_FORMAT(TIMESTAMP '1970-01-01 00:00:00' + INTERVAL ROUND(UNIX_TIMESTAMP({x}) * 1000000) "
                f"MICROSECOND, '%Y-%m-%dT%H:%i:%s.%fZ')")
    if column.kind == "duration_us":
        return f"CAST(ROUND(TIME_TO_SEC({x}) * 1000000) AS SIGNED)"
    return x


def snapshot_query(reg: TableRegistration, columns: tuple[Column, ...]) -> str:
    """The table's rows in their wire form, each with the binary log position of the
    consistent snapshot it runs in (`_cdc_binlog_file`, `_cdc_binlog_position`) and
    `_cdc_row` = 1; a table without rows gives one row with the position and nulls."""
    select = ", ".join(f"{wire_select(c)} AS {ident(c.name)}" for c in columns)
    position = ("SELECT MAX(CASE WHEN VARIABLE_NAME = 'BINLOG_SNAPSHOT_FILE' THEN VARIABLE_VALUE END) AS f, "
                "MAX(CASE WHEN VARIABLE_NAME = 'BINLOG_SNAPSHOT_POSITION' THEN VARIABLE_VALUE END) AS p "
                "FROM information_schema.SESSION_STATUS")
    return (f"SELECT s.f AS _cdc_binlog_file, CAST(s.p AS UNSIGNED) AS _cdc_binlog_position, t.* "
            f"FROM ({position}) s LEFT JOIN (SELECT 1 AS _cdc_row, {select} FROM {qualified(reg)}) t ON TRUE")
