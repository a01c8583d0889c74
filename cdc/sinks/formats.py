"""Which format a registration's target is in, and the target as a job sees it, whatever
its format: its properties and columns, the cdc keys of its last commit with offsets, and
how its next commit is stamped with a batch's identity. Iceberg stamps the snapshot
summary; Delta stamps the commit's userMetadata and its idempotent-write marker
(application id and version), so Delta itself refuses a batch it already holds. This
module sits above the format modules (iceberg_spark.py, delta.py), which do not import
each other."""
from __future__ import annotations

import json
import time
from contextlib import contextmanager, nullcontext

from pyspark.sql import functions as F

from cdc.config.models import Settings, TableRegistration
from cdc.planning.dead_letters import SUFFIX as DEAD_LETTERS_SUFFIX
from cdc.planning.merge import DELETES_SUFFIX, table_ref
from cdc.planning.sql import q
from cdc.sinks import delta, direct, iceberg_spark
from cdc.sinks.session import jvm_class

SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."
DELTA_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
DELTA_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
DELTA_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
DELTA_PREFIX = "delta.`"
HISTORY_PAGE = 20  # Delta commits read at a time while looking for the last one with offsets

# How a format's auxiliary tables (delete memory, dead letters) are created.
TABLE_CLAUSES = {
    "iceberg": f"USING iceberg TBLPROPERTIES ({delta.properties_sql(iceberg_spark.TABLE_PROPERTIES)})",
    "delta": f"USING delta TBLPROPERTIES ({delta.properties_sql(delta.TABLE_PROPERTIES)})",
}


def target_refs(settings: Settings, reg: TableRegistration) -> tuple[str, str, str]:
    """Spark SQL names of a registration's target, delete memory and dead-letter table."""
    suffixes = ("", DELETES_SUFFIX, DEAD_LETTERS_SUFFIX)
    if reg.sink == "delta":
        return tuple(delta.ref(delta.location(settings, reg.target, s)) for s in suffixes)
    return tuple(table_ref(settings.catalog.name, reg.target + s) for s in suffixes)


def shown_name(settings: Settings, reg: TableRegistration) -> str:
    """How messages name a registration's target: catalog.namespace.table, or the Delta path."""
    if reg.sink == "delta":
        return str(delta.location(settings, reg.target))
    return f"{settings.catalog.name}.{reg.target}"


def format_of(ref: str) -> str:
    return "delta" if ref.startswith(DELTA_PREFIX) else "iceberg"


def open_table(spark, ref: str):
    """The target `ref` names: an Iceberg table of a catalog or a Delta table's path
    (`delta.<quoted path>`), with fresh metadata."""
    return DeltaTarget(spark, ref) if format_of(ref) == "delta" else IcebergTarget(spark, ref)


def add_missing_columns(spark, ref: str, table, columns, masked: tuple[str, ...] = ()) -> list[str]:
    """The source columns (`columns`, in order) the target lacks, added after its last
    source column, before the `_cdc_` ones (a masked one as the string of its hash);
    returns their names."""
    missing = [c for c in columns if not table.has_column(c.name)]
    present = [c.name for c in columns if table.has_column(c.name)]
    last = present[-1] if present else None
    for c in missing:
        kind = "STRING" if c.name in masked else c.spark_type
        spark.sql(f"ALTER TABLE {ref} ADD COLUMN {q(c.name)} {kind}" + (f" AFTER {q(last)}" if last else " FIRST"))
        last = c.name
    if missing:
        table.refresh()
    return [c.name for c in missing]


class IcebergTarget:
    def __init__(self, spark, ref: str):
        self.spark, self.ref = spark, ref
        self.table = iceberg_spark.load_table(spark, ref)  # org.apache.iceberg.Table

    def refresh(self) -> None:
        self.table.refresh()

    def properties(self) -> dict[str, str]:
        return iceberg_spark.properties(self.table)

    def set_properties(self, props: dict[str, str]) -> None:
        iceberg_spark.set_properties(self.table, props)

    def has_column(self, name: str) -> bool:
        return self.table.schema().findField(name) is not None

    def raise_format_version(self, version: int) -> bool:
        return iceberg_spark.raise_format_version(self.table, version)

    def version(self):
        """The current snapshot id (None before the first)."""
        return iceberg_spark.current_snapshot_id(self.table)

    def written(self) -> bool:
        """Whether anything was ever committed to the table after its creation."""
        return self.version() is not None

    def holds_no_rows(self) -> bool:
        return iceberg_spark.holds_no_rows(self.table)

    def direct_refusal(self, key: tuple[str, ...], columns: tuple[str, ...]) -> str | None:
        """Why a batch of `columns` keyed by `key` cannot be written without a MERGE (None: it can)."""
        return direct.refusal(self.spark, self.table, key, columns)

    def _total(self, key: str) -> int:
        """A total of the current snapshot's summary (0 before the first snapshot)."""
        snap = self.table.currentSnapshot()
        return int((snap.summary().get(key) if snap is not None else None) or 0)

    def stored_bytes(self) -> int:
        """The size of the current snapshot's data files (from its summary)."""
        return self._total("total-files-size")

    def last_committed_summary(self) -> dict | None:
        return iceberg_spark.last_committed_summary(self.table)

    def data_files(self) -> int:
        """The current snapshot's data files (from its summary)."""
        return self._total("total-data-files")

    def partitions(self) -> int:
        """The most partitions the table's spec can hold (1 unpartitioned)."""
        return iceberg_spark.partitions(self.table)

    def limit_metadata_files(self) -> bool:
        """Have the table's commits delete its older metadata files (METADATA_FILES);
        True when it did not yet."""
        if all(self.table.properties().get(k) == v for k, v in iceberg_spark.METADATA_FILES.items()):
            return False
        self.set_properties(iceberg_spark.METADATA_FILES)
        return True

    def snapshot_count(self) -> int:
        return iceberg_spark.snapshot_count(self.table)

    def keep_snapshots(self, keep: int, resume: bool = False) -> int:
        """Expire all but the newest `keep` snapshots and, with `resume`, never the newest
        one that records cdc offsets (where the job resumes); returns how many went."""
        if self.snapshot_count() <= keep:
            return 0
        newest = (iceberg_spark.newest_with_offsets(self.table) or 0) if resume else 0
        return iceberg_spark.expire_all_but(self.spark, self.table, max(keep, newest + 1), int(time.time() * 1000))

    def compact_small_files(self, below_bytes: int) -> int:
        """Rewrite the data files smaller than `below_bytes` into few; returns how many it rewrote."""
        rewritten = iceberg_spark.rewrite_small_files(self.spark, self.table, below_bytes)
        self.refresh()
        return rewritten

    @contextmanager
    def undistributed(self):
        """The writes in this block keep each task's rows where they are, without first
        shuffling them by partition: a small batch's MERGE is spared the shuffle's stages.
        Two tasks may then each write a deletion vector for one data file, which a commit
        merges from Iceberg 1.10.2 on; an older runtime keeps the table's distribution."""
        if iceberg_spark.version(self.spark) < iceberg_spark.MERGES_DUPLICATE_DVS:
            yield
            return
        given = self.spark.conf.get(iceberg_spark.DISTRIBUTION_MODE, None)  # the session's own, if any
        self.spark.conf.set(iceberg_spark.DISTRIBUTION_MODE, "none")
        try:
            yield
        finally:
            if given is None:
                self.spark.conf.unset(iceberg_spark.DISTRIBUTION_MODE)
            else:
                self.spark.conf.set(iceberg_spark.DISTRIBUTION_MODE, given)

    @contextmanager
    def stamped(self, props: dict[str, str], txn: tuple[str, int] | None):
        """The commits in this block carry `props` in their snapshot summary (which holds the
        batch id: `txn` is Delta's)."""
        for k, v in props.items():
            self.spark.conf.set(SNAPSHOT_PROPERTY + k, v)
        try:
            yield
        finally:
            for k in props:
                self.spark.conf.unset(SNAPSHOT_PROPERTY + k)

    def commit_summary_only(self, props: dict[str, str], txn: tuple[str, int]) -> None:
        """A commit with no data change carrying `props` (a batch whose changes were no-ops)."""
        iceberg_spark.commit_summary_only(self.table, props)

    def widen(self, types: dict[str, str]) -> None:
        """Columns to wider Spark SQL types, in place (Iceberg's type promotion)."""
        for name, spark_type in types.items():
            self.spark.sql(f"ALTER TABLE {self.ref} ALTER COLUMN {q(name)} TYPE {spark_type}")

    # What `cdc bootstrap` needs besides.

    def summaries(self):
        """The cdc keys of the current commit and its ancestors, newest first."""
        return iceberg_spark.ancestry_summaries(self.table)

    def empty(self, summary: dict[str, str], props: dict[str, str]) -> None:
        """Every row deleted and `props` set, in a commit carrying `summary`."""
        iceberg_spark.empty_table(self.spark, self.table, summary, props)

    def append(self, rows, summary: dict[str, str]) -> int:
        """`rows` appended in one commit carrying `summary`; returns the rows added."""
        writer = rows.writeTo(self.ref)
        for k, v in summary.items():
            writer = writer.option(f"snapshot-property.{k}", v)
        writer.append()
        self.refresh()
        return int(self.table.currentSnapshot().summary().get("added-records") or 0)

    def row_count(self) -> int:
        self.refresh()
        return int(next(iceberg_spark.ancestry_summaries(self.table), {}).get("total-records") or 0)  # none: empty

    def commit_summary_and_properties(self, summary: dict[str, str], props: dict[str, str]) -> None:
        """One commit without data change carrying `summary`, with `props` set."""
        iceberg_spark.commit_summary_and_properties(self.table, summary, props)


class DeltaTarget:
    def __init__(self, spark, ref: str):
        self.spark, self.ref = spark, ref
        self.path = ref[len(DELTA_PREFIX):-1].replace("``", "`")
        self._log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, self.path)
        self._none = jvm_class(spark, "scala.Option").empty()
        self.refresh()
        if self._snapshot.version() < 0:
            raise LookupError(f"TABLE_OR_VIEW_NOT_FOUND: no Delta table at {self.path}")

    def refresh(self) -> None:
        self._snapshot = self._log.update(False, self._none, self._none)

    def properties(self) -> dict[str, str]:
        conf = self._snapshot.metadata().configuration()
        return dict(jvm_class(self.spark, "scala.jdk.javaapi.CollectionConverters").asJava(conf))

    def set_properties(self, props: dict[str, str]) -> None:
        self.spark.sql(f"ALTER TABLE {self.ref} SET TBLPROPERTIES ({delta.properties_sql(props)})")
        self.refresh()

    def has_column(self, name: str) -> bool:
        return name in list(self._snapshot.schema().fieldNames())

    def undistributed(self):
        """Delta's MERGE has no write distribution to spare."""
        return nullcontext()

    def version(self) -> int:
        return self._snapshot.version()

    def written(self) -> bool:
        return not self.holds_no_rows()

    def holds_no_rows(self) -> bool:
        """No data file: read from the commit's checksum file when there is one (counting
        the files otherwise takes a Spark job)."""
        checksum = self._snapshot.checksumOpt()
        files = checksum.get().numFiles() if checksum.isDefined() else self._snapshot.numOfFiles()
        return files == 0

    def direct_refusal(self, key: tuple[str, ...], columns: tuple[str, ...]) -> str | None:
        """Delta keeps its MERGE (docs/internals.md, the direct path)."""
        return "a Delta target"

    def stored_bytes(self) -> int:
        """The size of the table's data files (from the commit's checksum file when there is one)."""
        checksum = self._snapshot.checksumOpt()
        return int(checksum.get().tableSizeBytes() if checksum.isDefined() else self._snapshot.sizeInBytes())

    def last_committed_summary(self) -> dict | None:
        """The userMetadata of the newest commit with offsets (delta.committed_summary)."""
        limit = HISTORY_PAGE
        while True:
            commits = [c.asDict() for c in self.spark.sql(f"DESCRIBE HISTORY {self.ref} LIMIT {limit}").select(
                "version", "operation", "operationParameters", "userMetadata").collect()]
            summary = delta.committed_summary(commits)
            if summary is not None or len(commits) < limit:
                return summary
            limit *= 4

    @contextmanager
    def stamped(self, props: dict[str, str], txn: tuple[str, int] | None):
        """The commits in this block carry `props` as userMetadata and the idempotent-write
        marker `txn` (application id, batch id): Delta skips a write whose version for that
        application is not newer than the one its log records."""
        conf = {DELTA_USER_METADATA: json.dumps(props, sort_keys=True)}
        if txn is not None:
            conf.update({DELTA_TXN_APP_ID: txn[0], DELTA_TXN_VERSION: str(txn[1])})
        for k, v in conf.items():
            self.spark.conf.set(k, v)
        try:
            yield
        finally:
            for k in conf:  # session settings outlive the statement: never let them stamp another
                self.spark.conf.unset(k)

    def commit_summary_only(self, props: dict[str, str], txn: tuple[str, int]) -> None:
        """A MERGE of no rows: with an idempotent-write marker Delta commits it, carrying `props`."""
        with self.stamped(props, txn):
            self.spark.sql(f"MERGE INTO {self.ref} t USING (SELECT * FROM {self.ref} LIMIT 0) s ON false "
                           f"WHEN NOT MATCHED THEN INSERT *")
        self.refresh()

    def widen(self, types: dict[str, str]) -> None:
        """Columns to wider types: one commit rewriting the table with the new schema (the
        type-widening table feature would do it in place, but delta-rs cannot read it)."""
        table = self.spark.read.format("delta").load(self.path)
        table = table.select(*[F.col(q(c)).cast(types[c]).alias(c) if c in types else F.col(q(c))
                               for c in table.columns])
        table.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(self.path)
        self.refresh()

    def summaries(self):
        """The userMetadata of every commit, newest first ({} for a commit without)."""
        for c in self.spark.sql(f"DESCRIBE HISTORY {self.ref}").select("userMetadata").collect():
            yield json.loads(c.userMetadata) if c.userMetadata else {}

    def empty(self, summary: dict[str, str], props: dict[str, str]) -> None:
        """Every row deleted, then `props` set in a commit carrying `summary` (Delta commits
        no DELETE of an empty table; a crash in between leaves the old properties, and the
        bootstrap starts over)."""
        self.spark.sql(f"DELETE FROM {self.ref}")
        self.commit_summary_and_properties(summary, props)

    def append(self, rows, summary: dict[str, str]) -> int:
        """`rows` appended (by column name, in the table's types) in one commit carrying `summary`."""
        schema = self.spark.read.format("delta").load(self.path).schema
        rows = rows.select(*[F.col(q(f.name)).cast(f.dataType).alias(f.name) for f in schema.fields])
        with self.stamped(summary, None):
            rows.write.format("delta").mode("append").save(self.path)
        metrics = self.spark.sql(f"DESCRIBE HISTORY {self.ref} LIMIT 1").first()["operationMetrics"]
        self.refresh()
        return int((metrics or {}).get("numOutputRows") or 0)

    def row_count(self) -> int:
        return self.spark.read.format("delta").load(self.path).count()

    def file_counts(self) -> dict[str, int]:
        """Live data files, those with deletion vectors, and versions (from the log)."""
        self.refresh()
        files = self._snapshot.allFiles()
        return {"data_files": int(files.count()),
                "delete_files": int(files.where("deletionVector IS NOT NULL").count()),
                "snapshots": int(self._snapshot.version()) + 1}

    def commit_summary_and_properties(self, summary: dict[str, str], props: dict[str, str]) -> None:
        with self.stamped(summary, None):  # ALTER TABLE always commits, with the userMetadata set
            self.set_properties(props)
