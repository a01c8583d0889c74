"""`reconcile --deep`'s two sides, read by Spark: the source's rows held at the log
position its count reflects, and the target at the snapshot (Delta: version) that reached
that position; report/deep.py compares them.

A PostgreSQL source is held in an exported snapshot that parallel JDBC readers import. A
MariaDB source shares no snapshot between connections: it is read whole on one connection
in a consistent-snapshot transaction that also gives the snapshot's binary log position,
and checkpointed, so the rows compared are the rows counted. Its FLOAT columns are compared
at six significant digits: rows of Debezium's snapshots carry them so (docs/types.md)."""
from __future__ import annotations

import datetime as dt
import time
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc.config.models import Settings, TableRegistration
from cdc.errors import SourceError
from cdc.log import log
from cdc.planning.counted import CountPoint
from cdc.planning.drift import differences
from cdc.planning.protect import mask_columns, target_mask_key
from cdc.planning.sql import q
from cdc.sources import mariadb, module_of, postgres
from cdc.sources.types import Column


@dataclass(frozen=True)
class Compared:
    """What is compared of one table: the target's columns the source still has (columns
    dropped at the source stay in the target), its key, types and masking key."""

    ref: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    types: dict
    mask_key: str | None
    six_digits: frozenset[str] = frozenset()  # MariaDB FLOAT: a snapshot carries what MariaDB prints

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def values(self, frame: DataFrame) -> DataFrame:
        """The frame's compared columns, each as it is compared."""
        return frame.select(*[F.format_string("%.5e", q(n)).alias(n) if n in self.six_digits else F.col(q(n))
                              for n in self.names])


class DeepReads:
    """`deep` for `reconcile_table`: `held` reads the source, `compare` the target against it."""

    def __init__(self, settings: Settings, catalog, limit: int):
        from cdc.sinks.session import get_session

        self.settings, self.catalog, self.limit = settings, catalog, limit
        self.spark = get_session(settings).newSession()
        self.target_snapshots: dict[str, int | None] = {}  # by table: the target snapshot compared last

    def _compared(self, reg: TableRegistration) -> Compared | None:
        from cdc.jobs.targets import load_target
        from cdc.sinks.found import found_target
        from cdc.sinks.targets import table_columns

        if found_target(self.settings, self.catalog, reg) is None:
            return None
        ref, table = load_target(self.spark, self.settings, reg)
        columns, key, _ = table_columns(table.properties())
        source = module_of(self.settings, reg.source.name)
        with source.connect(self.settings, reg.source.name) as conn:
            present = {c.name for c in source.describe_table(conn, reg).columns}
        columns = tuple(c for c in columns if c.name in present)
        types = {f.name: f.dataType for f in self.spark.table(ref).schema.fields}
        six_digits = frozenset(c.name for c in columns if c.kind == "float"
                               and self.settings.sources[reg.source.name].kind == "mariadb")
        return Compared(ref, columns, key, types, target_mask_key(self.settings, reg, table.properties()), six_digits)

    def _in_target_form(self, reg: TableRegistration, wire: DataFrame, compared: Compared, taken_at) -> DataFrame:
        """Source rows in their wire form as the target holds them: converted as streaming
        converts them, masked columns as their hashes (they never leave the source in clear)."""
        from cdc.bootstrap import jdbc

        rows = jdbc.as_target_rows(wire, compared.columns, taken_at, strict=False)
        rows = mask_columns(rows, reg.mask, compared.mask_key)
        return compared.values(rows.select(*[F.col(q(n)).cast(compared.types[n]).alias(n) for n in compared.names]))

    @contextmanager
    def held(self, reg: TableRegistration):
        """The source's rows at one log position while the block runs. Yields (rows, where
        they were counted (planning/counted.py), that position as text, (the rows as a
        DataFrame, what is compared) or None when the table has no target yet: then only the
        count is read)."""
        compared, source = self._compared(reg), module_of(self.settings, reg.source.name)
        if compared is None:
            with source.connect(self.settings, reg.source.name) as conn:
                rows, position, shown, horizon = source.count_at_position(conn, reg)
                yield rows, CountPoint.of(position, horizon, shown), shown, None
        elif source is mariadb:
            with self._held_mariadb(reg, compared) as held:
                yield held
        else:
            with postgres.counted_snapshot(self.settings, reg) as (rows, position, shown, snapshot):
                yield (rows, CountPoint.of(position, snapshot.horizon, shown), shown,
                       (self._postgres_rows(reg, compared, snapshot), compared))

    def _postgres_rows(self, reg: TableRegistration, compared: Compared, snapshot) -> DataFrame:
        from cdc.bootstrap import jdbc
        from cdc.planning.bootstrap import Chunk

        partitions = max(2, self.spark.sparkContext.defaultParallelism * 2)
        wire = jdbc.read_chunk(self.spark, self.settings, reg, compared.columns, compared.key, None, Chunk(),
                               snapshot.name, partitions)
        return self._in_target_form(reg, wire, compared, snapshot.taken_at)

    @contextmanager
    def _held_mariadb(self, reg: TableRegistration, compared: Compared):
        from cdc.bootstrap import jdbc

        taken_at = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        # Checkpointed: a lost block fails the compare rather than being read again at another position.
        wire = jdbc.read_mariadb_snapshot(self.spark, self.settings, reg, compared.columns).localCheckpoint(eager=True)
        try:
            file_name, pos, rows = wire.agg(F.first("_cdc_binlog_file"), F.first("_cdc_binlog_position"),
                                            F.count("_cdc_row")).first()
            if not file_name:
                raise SourceError(f"source {reg.source.name!r} gave no binary log position for its snapshot of "
                                  f"{reg.source.schema_}.{reg.source.table}",
                                  hint="Debezium needs the binary log: start mariadbd with --log-bin")
            position = (mariadb.binlog_index(file_name), int(pos))
            rows_frame = self._in_target_form(reg, wire.where(F.col("_cdc_row").isNotNull()), compared, taken_at)
            yield int(rows), CountPoint(position), f"{file_name}:{int(pos)}", (rows_frame, compared)
        finally:
            wire.unpersist()

    def compare(self, reg: TableRegistration, source, target_snapshot_id: int | None) -> dict:
        """The held source rows against the target at `target_snapshot_id`."""
        from cdc.report import deep
        from cdc.sinks.targets import LIVE_ROWS

        rows, compared = source
        self.target_snapshots[reg.name] = target_snapshot_id
        at = f" VERSION AS OF {int(target_snapshot_id)}" if target_snapshot_id is not None else ""
        target = compared.values(self.spark.sql(f"SELECT * FROM {compared.ref}{at} WHERE {LIVE_ROWS[reg.mode]}"))
        started = time.monotonic()
        found = deep.compare(rows, target, compared.names, compared.key, self.limit)
        log(f"deep compare of {found['rows']['source']:,} source and {found['rows']['target']:,} "
            f"target rows in {time.monotonic() - started:.1f}s, {len(found['levels'])} level(s): "
            f"{differences(found)} key(s) differ", table=reg.name, event="deep-compared",
            rows=found["rows"], differences=differences(found))
        return found
