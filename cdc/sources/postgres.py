"""PostgreSQL sources: connection from settings, and table introspection."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace

import psycopg
import psycopg.sql

from cdc.config.models import Settings, TableRegistration
from cdc.errors import ConfigError, SourceError, SourceUnreachable
from cdc.sources import no_key, password
from cdc.sources.types import Column, check_columns, parse_lsn, postgres_column
from cdc.waiting import poll_until


def slot_name(settings: Settings, source: str) -> str:
    """A PostgreSQL source's replication slot."""
    return settings.sources[source].slot_name or f"cdc_{source}"


def publication_name(settings: Settings, source: str) -> str:
    """A PostgreSQL source's publication."""
    return settings.sources[source].publication_name or f"cdc_{source}"


def connect(settings: Settings, name: str) -> psycopg.Connection:
    src = settings.sources[name]
    try:
        return psycopg.connect(host=src.host, port=src.port, dbname=src.database, user=src.user,
                               password=password(settings, src, name), connect_timeout=10, autocommit=True)
    except psycopg.OperationalError as e:
        text = str(e).strip()
        refused = "authentication failed" in text or "does not exist" in text or "no password" in text
        raise (SourceError if refused else SourceUnreachable)(
            f"cannot connect to source {name!r} at {src.host}:{src.port}/{src.database}: {text}",
            hint="check the source's user, password and database in cdc.yaml" if refused
            else "check the source in cdc.yaml and that the database runs") from None


@dataclass(frozen=True)
class SourceTable:
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    partitions: int | None = None  # a partitioned table's partitions (PostgreSQL): captured through it
    nullable_key: tuple[str, ...] = ()  # key columns the source allows NULL in (`sources.check_key_not_null`)


RELATION_KINDS = {"v": "a view", "m": "a materialized view", "f": "a foreign table", "S": "a sequence",
                  "c": "a composite type", "i": "an index", "I": "a partitioned index", "t": "a TOAST table"}


def partitions_sql(conn: psycopg.Connection) -> str:
    """SQL over pg_class c: a partition's root ("schema.table") and a partitioned table's
    partitions (null and 0 before PostgreSQL 12, which has no pg_partition_root)."""
    if conn.info.server_version < 120000:
        return "NULL::text, 0"
    return ("(SELECT format('%%s.%%s', rn.nspname, r.relname) FROM pg_class r JOIN pg_namespace rn "
            "ON rn.oid = r.relnamespace WHERE r.oid = pg_partition_root(c.oid)), "
            "(SELECT count(*) FROM pg_partition_tree(c.oid) WHERE isleaf)")


def publishes_via_root(conn: psycopg.Connection) -> bool:
    """Whether the server publishes a partition's changes as its root's (13 and later)."""
    return conn.info.server_version >= 130000


def not_a_table(where: str, relkind: str) -> ConfigError:
    """A relation logical replication does not publish (a view, a foreign table ...)."""
    return ConfigError(f"{where} is {RELATION_KINDS.get(relkind, f'a relation of kind {relkind!r}')}, not a table: "
                       f"logical replication publishes the changes of tables only",
                       hint="register the table(s) it reads from instead")


def a_partition(where: str, root: str) -> ConfigError:
    """A partition of a partitioned table: its changes are published as the root's."""
    return ConfigError(f"{where} is a partition of {root}: cdc captures a partitioned table through its root, so the "
                       f"changes of {where} are published as changes of {root}, and a registration of the partition "
                       f"alone would receive none of them",
                       hint=f"register {root} instead (`cdc tables add {root}`): its target holds the rows of every "
                            f"partition, those attached later too")


def describe_table(conn: psycopg.Connection, reg: TableRegistration) -> SourceTable:
    """Columns and key of a registered table; the key is the primary key unless given."""
    schema, table = reg.source.schema_, reg.source.table
    where = f"{schema}.{table} (registration {reg.name})"
    rows = conn.execute(
        "SELECT column_name, data_type, is_nullable = 'YES', numeric_precision, numeric_scale, "
        "datetime_precision, udt_name, (SELECT t.typtype FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
        "WHERE t.typname = c.udt_name AND n.nspname = c.udt_schema) FROM information_schema.columns c "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, table)).fetchall()
    if not rows:
        raise ConfigError(f"source table {schema}.{table} does not exist in source {reg.source.name!r} "
                          f"(registration {reg.file})", hint="create the table or fix source.schema/source.table")
    relation = conn.execute(
        "SELECT c.relkind, c.relpersistence, c.relispartition, " + partitions_sql(conn) +
        " FROM pg_class c WHERE c.oid = to_regclass(format('%%I.%%I', %s::text, %s::text))", (schema, table)).fetchone()
    relkind, persistence, is_partition, root, leaves = relation or ("r", "p", False, None, 0)
    if relkind not in ("r", "p"):
        raise not_a_table(f"{schema}.{table}", relkind)
    if is_partition:
        raise a_partition(f"{schema}.{table}", root or "its partitioned table")
    if relkind == "p" and not publishes_via_root(conn):
        raise ConfigError(f"{schema}.{table} is partitioned, and PostgreSQL {conn.info.server_version // 10000} "
                          f"publishes the changes of its partitions under their own names only",
                          hint="capture of a partitioned table through its root needs PostgreSQL 13 or later "
                               "(publish_via_partition_root)")
    if persistence != "p":  # PostgreSQL publishes no change of these
        unlogged = persistence == "u"
        raise ConfigError(f"{schema}.{table} is {'an unlogged' if unlogged else 'a temporary'} table: PostgreSQL's "
                          f"logical decoding publishes none of its changes, and Debezium's publication refuses it",
                          hint=f"run ALTER TABLE {ident(schema)}.{ident(table)} SET LOGGED at the source"
                          if unlogged else "register a permanent table")
    columns = tuple(postgres_column(*r[:6], table=where, udt_name=r[6], type_kind=r[7]) for r in rows)
    names = [c.name for c in columns]
    if reg.key is not None:
        missing = [k for k in reg.key if k not in names]
        if missing:
            raise ConfigError(f"{reg.file}: key column(s) {missing} are not columns of {schema}.{table}",
                              hint="columns are: " + ", ".join(names))
    primary_key = tuple(r[0] for r in conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = to_regclass(format('%%I.%%I', %s::text, %s::text)) AND i.indisprimary "
        "ORDER BY array_position(i.indkey, a.attnum)", (schema, table)).fetchall())
    if reg.key is not None:
        key = reg.key
        identity = conn.execute("SELECT relreplident FROM pg_class WHERE oid = to_regclass(format('%%I.%%I', "
                                "%s::text, %s::text))", (schema, table)).fetchone()[0]
        if not primary_key and identity in ("d", "n"):
            raise ConfigError(f"{schema}.{table} has no primary key, so PostgreSQL publishes no old row for "
                              f"updates and deletes (replica identity {'default' if identity == 'd' else 'nothing'})",
                              hint=f'run ALTER TABLE "{schema}"."{table}" REPLICA IDENTITY FULL at the source')
        published = {"f": set(names), "d": set(primary_key), "n": set(), "i": {r[0] for r in conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(format('%%I.%%I', %s::text, %s::text)) "
            "AND i.indisreplident", (schema, table)).fetchall()}}[identity]
        if not set(key) <= published:
            raise ConfigError(f"{reg.file}: key {', '.join(key)} of {schema}.{table} is not in its replica identity "
                              f"({', '.join(sorted(published)) or 'none'}), so PostgreSQL publishes no old value of "
                              f"it for updates and deletes, which would miss their rows",
                              hint=f'run ALTER TABLE "{schema}"."{table}" REPLICA IDENTITY FULL at the source, or '
                                   f"key the registration by {', '.join(primary_key) or 'a replica identity index'}")
    else:
        key = primary_key
        if not key:
            raise no_key(schema, table, reg)
    # Key columns are never null in the target.
    check_columns(columns, where, reg.sink, reg.exclude, str(reg.file or "its registration"))
    nullable_key = tuple(k for k in key if any(c.name == k and c.nullable for c in columns))
    columns = tuple(replace(c, nullable=c.nullable and c.name not in key) for c in columns)
    return SourceTable(columns, key, partitions=int(leaves) if relkind == "p" else None, nullable_key=nullable_key)


def not_null_sql(reg: TableRegistration, column: Column) -> str:
    """The statement that declares a column of the registered table NOT NULL."""
    return f"ALTER TABLE {qualified(reg)} ALTER COLUMN {ident(column.name)} SET NOT NULL"


def ensure_publication(conn: psycopg.Connection, settings: Settings, source: str, dry_run: bool = False) -> str | None:
    """The source's publication, where it exists, publishes the changes of a partition as
    changes of its partitioned table (`publish_via_partition_root`, which the connector
    sets only on a publication it creates): the connector captures a partitioned table
    through its root. Returns what was (with `dry_run`: would be) changed, in words."""
    name = publication_name(settings, source)
    if not publishes_via_root(conn):
        return None
    row = conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    if row is None or row[0]:
        return None
    done = f"publication {name}: the changes of partitions published through their partitioned table"
    if dry_run:
        return done.replace("published", "would be published")
    try:
        conn.execute(psycopg.sql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = true)")
                     .format(psycopg.sql.Identifier(name)))
    except psycopg.errors.InsufficientPrivilege as e:
        raise SourceError(f"source {source!r}: cannot set publish_via_partition_root on publication {name}: "
                          f"{str(e).strip()}", hint=f"run ALTER PUBLICATION {ident(name)} SET "
                                                    f"(publish_via_partition_root = true) as its owner") from None
    return done


def _split(qualified: str) -> tuple[str, str]:
    schema, table = qualified.split(".")
    return schema, table


def ensure_signal_table(conn: psycopg.Connection, signal_table: str) -> None:
    """Debezium's signal table (id, type, data), created when missing."""
    schema, table = _split(signal_table)
    conn.execute(psycopg.sql.SQL(
        "CREATE TABLE IF NOT EXISTS {}.{} (id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, "
        "data varchar(2048))").format(psycopg.sql.Identifier(schema), psycopg.sql.Identifier(table)))


@dataclass(frozen=True)
class TxMarker:
    """A transaction at the source, by its id (the low 32 bits Debezium records as txId)."""

    txid: int

    def captured_by(self, offsets: list[dict]) -> bool:
        """Whether a connector offset is at or past this transaction."""
        return any(int(o.get("txId") or 0) >= self.txid & 0xFFFFFFFF for o in offsets)

    def __str__(self) -> str:
        return str(self.txid)


def request_incremental_snapshot(conn: psycopg.Connection, signal_table: str, tables: list[str]) -> TxMarker:
    """Ask Debezium for an incremental snapshot of `tables` (schema.table); returns the
    signalling transaction."""
    import json

    return send_snapshot_signal(conn, signal_table, json.dumps({"data-collections": tables, "type": "incremental"}))


def send_snapshot_signal(conn: psycopg.Connection, signal_table: str, data: str) -> TxMarker:
    """An `execute-snapshot` signal with its `data` (JSON); returns the signalling transaction."""
    import uuid

    schema, table = _split(signal_table)
    with conn.transaction():
        conn.execute(psycopg.sql.SQL("INSERT INTO {}.{} (id, type, data) VALUES (%s, 'execute-snapshot', %s)")
                     .format(psycopg.sql.Identifier(schema), psycopg.sql.Identifier(table)),
                     (str(uuid.uuid4()), data))
        return TxMarker(conn.execute("SELECT txid_current()").fetchone()[0])


def signal_data_chars(conn: psycopg.Connection, signal_table: str) -> int | None:
    """The most characters the signal table's `data` column holds (None: unbounded)."""
    schema, table = _split(signal_table)
    row = conn.execute("SELECT character_maximum_length FROM information_schema.columns "
                       "WHERE table_schema = %s AND table_name = %s AND column_name = 'data'", (schema, table)).fetchone()
    return row[0] if row else None


def literal(conn: psycopg.Connection, value) -> str:
    """A value as a PostgreSQL literal (for SQL that leaves psycopg, such as Debezium's
    snapshot filter)."""
    return psycopg.sql.Literal(value).as_string(conn)


def write_marker(conn: psycopg.Connection, signal_table: str) -> TxMarker:
    """A transaction Debezium certainly captures (a `log` signal: it only logs a line);
    once the connector's offset passes it, every earlier change is in Kafka."""
    import uuid

    schema, table = _split(signal_table)
    with conn.transaction():
        conn.execute(psycopg.sql.SQL("INSERT INTO {}.{} (id, type, data) VALUES (%s, 'log', %s)")
                     .format(psycopg.sql.Identifier(schema), psycopg.sql.Identifier(table)),
                     (f"cdc-marker-{uuid.uuid4()}", '{"message": "cdc marker"}'))
        return TxMarker(conn.execute("SELECT txid_current()").fetchone()[0])


def check_binlog(conn: psycopg.Connection, name: str) -> None:
    """Nothing to check here: Debezium's own start-up tells a missing wal_level=logical."""


def count_at_position(conn: psycopg.Connection, reg: TableRegistration) -> tuple[int, tuple[int], str, str]:
    """The table's rows and the WAL position they reflect, in one snapshot. Returns
    (rows, (LSN,), the LSN as text, the snapshot's horizon: pg_current_snapshot()::text)."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    rows, lsn, horizon = conn.execute(f"SELECT count(*), pg_current_wal_lsn()::text, pg_current_snapshot()::text "
                                      f"FROM {qualified(reg)}").fetchone()
    conn.execute("COMMIT")
    return int(rows), (parse_lsn(lsn),), lsn, horizon


def ident(name: str) -> str:
    """A PostgreSQL identifier, quoted (for SQL that leaves psycopg, such as Spark's JDBC reader)."""
    return '"' + name.replace('"', '""') + '"'


def qualified(reg: TableRegistration) -> str:
    return f"{ident(reg.source.schema_)}.{ident(reg.source.table)}"


@dataclass(frozen=True)
class ExportedSnapshot:
    """An open REPEATABLE READ transaction whose snapshot other sessions can import."""

    conn: psycopg.Connection
    name: str  # for SET TRANSACTION SNAPSHOT
    horizon: str  # pg_current_snapshot()::text
    wal_lsn: str  # pg_current_wal_lsn()::text, read inside the snapshot
    taken_at: object  # the transaction's start time (datetime, UTC)


@contextmanager
def exported_snapshot(settings: Settings, name: str):
    """A consistent snapshot of source `name`, held open (and importable) until the block ends."""
    conn = connect(settings, name)
    try:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        row = conn.execute("SELECT pg_export_snapshot(), pg_current_snapshot()::text, pg_current_wal_lsn()::text, "
                           "now()").fetchone()
        yield ExportedSnapshot(conn, *row)
        conn.execute("COMMIT")
    finally:
        conn.close()


@contextmanager
def counted_snapshot(settings: Settings, reg: TableRegistration):
    """`count_at_position` inside an exported snapshot held open while the block runs, so
    the rows counted can be read again (in parallel, through JDBC). Yields (rows, (LSN,),
    the LSN as text, the ExportedSnapshot: its `horizon` says which transactions it sees)."""
    with exported_snapshot(settings, reg.source.name) as snap:
        (rows,) = snap.conn.execute(f"SELECT count(*) FROM {qualified(reg)}").fetchone()
        yield int(rows), (parse_lsn(snap.wal_lsn),), snap.wal_lsn, snap


def has_rows(conn: psycopg.Connection, reg: TableRegistration) -> bool:
    """Whether the table holds a row."""
    return conn.execute(f"SELECT 1 FROM {qualified(reg)} LIMIT 1").fetchone() is not None


def estimate_rows(conn: psycopg.Connection, reg: TableRegistration) -> int:
    """The table's row count: the planner's estimate, or a count when it has none."""
    # A partitioned table's own estimate is -1 (its partitions are analyzed, not it): theirs, summed.
    leaves = ("(SELECT sum(l.reltuples)::bigint FROM pg_partition_tree(c.oid) t JOIN pg_class l ON l.oid = t.relid "
              "WHERE t.isleaf AND l.reltuples >= 0)" if publishes_via_root(conn) else "NULL")
    estimate = conn.execute(f"SELECT CASE WHEN c.relkind = 'p' THEN {leaves} ELSE c.reltuples::bigint END "
                            f"FROM pg_class c WHERE c.oid = to_regclass(%s)", (qualified(reg),)).fetchone()[0]
    if estimate is None or estimate < 0:  # never vacuumed or analyzed
        estimate = conn.execute(f"SELECT count(*) FROM {qualified(reg)}").fetchone()[0]
    return int(estimate)


def slot_state(conn: psycopg.Connection, slot: str) -> dict | None:
    """The replication slot's activity and the WAL it holds back (bytes from its restart
    point to the server's current WAL position); None when there is no such slot."""
    row = conn.execute("SELECT active, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status "
                       "FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        return None
    return {"name": slot, "active": row[0], "retained_wal_bytes": row[1], "wal_status": row[2]}


def release_capture(conn: psycopg.Connection, settings: Settings, source: str, timeout_s: float = 60) -> list[str]:
    """Once no table of the source is captured (its connector deleted): its replication
    slot, dropped as soon as no reader holds it (else it keeps WAL for ever), and its
    publication. Returns what was dropped, in words."""
    slot, publication, dropped = slot_name(settings, source), publication_name(settings, source), []
    state = None

    def unread() -> bool:
        nonlocal state
        state = slot_state(conn, slot)
        return state is None or not state["active"]

    if not poll_until(unread, timeout_s):
        raise SourceError(f"replication slot {slot} of source {source!r} is still read by a process after "
                          f"{timeout_s:.0f}s", hint=f"find it in pg_stat_replication, stop it, then run "
                          f"SELECT pg_drop_replication_slot('{slot}')")
    if state is not None:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        dropped.append(f"replication slot {slot}")
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone():
        conn.execute(psycopg.sql.SQL("DROP PUBLICATION {}").format(psycopg.sql.Identifier(publication)))
        dropped.append(f"publication {publication}")
    return dropped
