"""Reading a source table with Spark's JDBC reader: a PostgreSQL table in parallel, inside
an exported snapshot every reader connection imports before its first query; a MariaDB
table on one connection, in one consistent snapshot (MariaDB shares none between
connections)."""
from __future__ import annotations

import re

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc.config.models import Settings, TableRegistration
from cdc.errors import SourceError
from cdc.planning.bootstrap import ROW_POSITION, Chunk
from cdc.planning.sql import q
from cdc.sources import mariadb, password, postgres
from cdc.sources.types import Column

SNAPSHOT_NAME = re.compile(r"^[0-9A-Fa-f-]+$")
FETCH_SIZE = 10_000


def reader_options(settings: Settings, reg: TableRegistration, snapshot_name: str) -> dict[str, str]:
    if not SNAPSHOT_NAME.match(snapshot_name):
        raise SourceError(f"unexpected snapshot name {snapshot_name!r} from source {reg.source.name!r}")
    src = settings.sources[reg.source.name]
    return {
        "url": f"jdbc:postgresql://{src.host}:{src.port}/{src.database}",
        "driver": "org.postgresql.Driver",
        "user": src.user,
        "password": postgres.password(settings, src, reg.source.name),
        "fetchsize": str(FETCH_SIZE),  # stream rows instead of holding a chunk in memory
        "preferTimestampNTZ": "true",  # timestamp without time zone stays a wall-clock value
        # Runs on each reader connection before its query; the reader then keeps the
        # transaction open (autocommit off), so the whole read sees the exported snapshot.
        "sessionInitStatement": f"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
                                f"SET TRANSACTION SNAPSHOT '{snapshot_name}'",
    }


def read_chunk(spark, settings: Settings, reg: TableRegistration, columns: tuple[Column, ...],
               key: tuple[str, ...], key_column: str | None, chunk: Chunk, snapshot_name: str,
               partitions: int) -> DataFrame:
    """One chunk of the source table, read in parallel: one read per key range of the chunk
    when the first key column is an integer, else `partitions` reads split on a hash of the key."""
    opts = reader_options(settings, reg, snapshot_name)
    url = opts.pop("url")
    select = ", ".join(f"{c.jdbc_select(postgres.ident(c.name))} AS {postgres.ident(c.name)}" for c in columns)
    if key_column:
        query = (f"(SELECT {select} FROM {postgres.qualified(reg)} "
                 f"WHERE {chunk.where_sql(key_column, quote=postgres.ident)}) AS cdc_chunk")
        predicates = chunk.parts_sql(key_column, quote=postgres.ident)
    else:
        query = f"(SELECT {select} FROM {postgres.qualified(reg)}) AS cdc_chunk"
        row = f"ROW({', '.join(postgres.ident(k) for k in key)})::text"
        predicates = [f"(hashtext({row}) & 2147483647) % {partitions} = {i}" for i in range(partitions)]
    return spark.read.jdbc(url, query, predicates=predicates, properties=opts)


def read_mariadb_snapshot(spark, settings: Settings, reg: TableRegistration,
                          columns: tuple[Column, ...]) -> DataFrame:
    """A MariaDB table's rows in their wire form, read in one consistent-snapshot
    transaction, with the binary log position it reflects (sources/mariadb.py:
    snapshot_query). Spark may read it again: checkpoint it before reading it twice."""
    src = settings.sources[reg.source.name]
    opts = {
        "driver": "org.mariadb.jdbc.Driver",
        "user": src.user,
        "password": password(settings, src, reg.source.name),
        "fetchsize": str(FETCH_SIZE),
        "sessionInitStatement": "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
    }
    # The jdbc:mysql scheme gives Spark's MySQL dialect (backquoted names); the MariaDB driver takes it.
    url = f"jdbc:mysql://{src.host}:{src.port}/{src.database}?permitMysqlScheme"
    return spark.read.jdbc(url, f"({mariadb.snapshot_query(reg, columns)}) AS cdc_snapshot", properties=opts)


def as_target_rows(df: DataFrame, columns: tuple[Column, ...], taken_at, strict: bool = True,
                   mode: str = "upsert") -> DataFrame:
    """Source rows (in Debezium's wire form) in the target's types, with the metadata of a
    snapshot read. A value without an exact target value fails the read, naming it
    (`strict`), or becomes null (a comparison then finds the row differs)."""
    wire = df.select(*[F.col(q(c.name)).cast(c.wire_type).alias(c.name) for c in columns])

    def value(c: Column):
        converted = F.expr(c.convert(q(c.name)))
        if strict and c.does_not_fit("x"):
            converted = F.when(F.expr(c.does_not_fit(q(c.name))), F.raise_error(F.concat(
                F.lit(f"bootstrap: a value of column {c.name} does not fit its type {c.spark_type}: "),
                F.col(q(c.name))))).otherwise(converted)
        return converted.alias(c.name)

    return wire.select(
        *[value(c) for c in columns],
        F.lit("r").alias("_cdc_op"),
        F.lit(ROW_POSITION).alias("_cdc_position"),
        F.lit(taken_at).cast("timestamp").alias("_cdc_source_ts"),
        F.lit(None).cast("int").alias("_cdc_kafka_partition"),
        F.lit(None).cast("bigint").alias("_cdc_kafka_offset"),
        *MODE_COLUMNS[mode](taken_at),
    )


MODE_COLUMNS = {  # a snapshot row's mode columns: a live row, its version valid from the snapshot
    "upsert": lambda taken_at: [],
    "soft_delete": lambda taken_at: [F.lit(False).alias("_cdc_deleted")],
    "history": lambda taken_at: [F.lit(taken_at).cast("timestamp").alias("_cdc_valid_from"),
                                 F.lit(None).cast("timestamp").alias("_cdc_valid_to"),
                                 F.lit(True).alias("_cdc_current")],
}
