"""A Delta target (or delete memory, or dead-letter table) as a job sees it: the
`SinkTable` interface (table.py) through delta-spark's public API (`io.delta.tables.DeltaTable`
and Delta's SQL commands). Its commits carry a batch's cdc keys as the commit's
userMetadata, and the batch's identity as Delta's idempotent-write marker (application id
and version), so Delta itself refuses a batch it already holds."""
from __future__ import annotations

import datetime as dt
import json
from contextlib import contextmanager, nullcontext

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc.control.commits import OFFSETS
from cdc.planning.sql import q
from cdc.sinks import delta
from cdc.sinks.session import conf_for_block, jvm_class

DELTA_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
DELTA_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
DELTA_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
DELTA_PREFIX = "delta.`"
HISTORY_PAGE = 20  # Delta commits read at a time while looking for the last one with offsets
MIN_FILE_SIZE = "spark.databricks.delta.optimize.minFileSize"  # OPTIMIZE rewrites the files under it
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"  # VACUUM's listing tasks
DELTA_TABLE = "io.delta.tables.DeltaTable"


class DeltaTarget:
    """A Delta table at a path (`ref`: delta.`<path>`)."""

    has_direct_path = False  # Delta keeps its MERGE (docs/internals.md, the direct path)

    def __init__(self, spark, ref: str):
        self.spark, self.ref = spark, ref
        self.path = ref[len(DELTA_PREFIX):-1].replace("``", "`")
        api = jvm_class(spark, DELTA_TABLE)
        if not api.isDeltaTable(spark._jsparkSession, self.path):
            raise LookupError(f"TABLE_OR_VIEW_NOT_FOUND: no Delta table at {self.path}")
        self._table = api.forPath(spark._jsparkSession, self.path)
        self.refresh()

    def refresh(self) -> None:
        self._detail = self._snapshot = None  # read again when next asked

    def _log_snapshot(self):
        """The log's current snapshot. DeltaTable has no API for the table's version (its
        `history(1)` reads the newest commit file: 0.1 s a call, twice a batch) nor for the
        files carrying deletion vectors: those two are read from it."""
        if self._snapshot is None:
            none = jvm_class(self.spark, "scala.Option").empty()
            self._snapshot = jvm_class(self.spark, "org.apache.spark.sql.delta.DeltaLog").forTable(
                self.spark._jsparkSession, self.path).update(False, none, none)
        return self._snapshot

    def _details(self):
        """DESCRIBE DETAIL of the table's current version (numFiles, sizeInBytes, properties)."""
        if self._detail is None:
            self._detail = DataFrame(self._table.detail(), self.spark).first()
        return self._detail

    def properties(self) -> dict[str, str]:
        return dict(self._details()["properties"] or {})

    def set_properties(self, props: dict[str, str]) -> None:
        self.spark.sql(f"ALTER TABLE {self.ref} SET TBLPROPERTIES ({delta.properties_sql(props)})")
        self.refresh()

    def has_column(self, name: str) -> bool:
        return name in self.spark.read.format("delta").load(self.path).columns

    def undistributed(self):
        """Delta's MERGE has no write distribution to spare."""
        return nullcontext()

    def version(self) -> int:
        return int(self._log_snapshot().version())

    def written(self) -> bool:
        return not self.holds_no_rows()

    def holds_no_rows(self) -> bool:
        """No data file."""
        return self.data_files() == 0

    def direct_refusal(self, key: tuple[str, ...], columns: tuple[str, ...]) -> str | None:
        """Delta keeps its MERGE (docs/internals.md, the direct path)."""
        return "a Delta target"

    def stored_bytes(self) -> int:
        """The size of the table's data files."""
        return int(self._details()["sizeInBytes"] or 0)

    def data_files(self) -> int:
        return int(self._details()["numFiles"] or 0)

    def partitions(self) -> int:
        """Delta targets are unpartitioned."""
        return 1

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
        with conf_for_block(self.spark, conf):  # never stamping another statement
            yield

    def commit_statement(self, statement: str, props: dict[str, str], txn: tuple[str, int]) -> None:
        """Run a batch's SQL statement (a MERGE, an append) as its commit carrying `props`."""
        with self.stamped(props, txn):
            self.spark.sql(statement)

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
        """Live data files, those with deletion vectors (`_log_snapshot`), and versions."""
        self.refresh()
        files = self._log_snapshot().allFiles()
        return {"data_files": self.data_files(), "delete_files": int(files.where("deletionVector IS NOT NULL").count()),
                "snapshots": self.version() + 1}

    # Upkeep.

    def raise_format_version(self, version: int) -> bool:
        """Delta has no Iceberg format version: its table features are set when it is created."""
        return False

    def limit_metadata_files(self) -> bool:
        """Delta checkpoints its log and drops log files past `delta.logRetentionDuration` itself."""
        return False

    def expiry_due(self, keep: int) -> bool:
        """Never: a Delta commit does not rewrite the versions kept (its log is checkpointed
        every ten commits), so their number does not make a commit cost more."""
        return False

    def keep_snapshots(self, keep: int, resume: bool = False) -> int:
        """Nothing expires: Delta drops its log's old versions itself (`expiry_due`)."""
        return 0

    def compact_small_files(self, below_bytes: int) -> int:
        """OPTIMIZE of the data files smaller than `below_bytes` (two or more), dropping the
        rows their deletion vectors mark; returns how many it rewrote."""
        with conf_for_block(self.spark, {MIN_FILE_SIZE: str(below_bytes)}):
            done = DataFrame(self._table.optimize().executeCompaction(), self.spark).first()
        self.refresh()
        return int(done["metrics"]["numFilesRemoved"] or 0)

    def compact(self) -> None:
        """OPTIMIZE, then the rows deletion vectors still mark purged (REORG ... APPLY (PURGE))."""
        DataFrame(self._table.optimize().executeCompaction(), self.spark).collect()
        self.spark.sql(f"REORG TABLE {self.ref} APPLY (PURGE)").collect()
        self.refresh()

    def snapshot_times(self) -> list[tuple[int, bool]]:
        """(epoch ms, records cdc offsets) of each version its log keeps."""
        rows = self.spark.sql(f"DESCRIBE HISTORY {self.ref}").select("timestamp", "userMetadata").collect()
        return [(int(r.timestamp.timestamp() * 1000), bool(r.userMetadata) and OFFSETS in json.loads(r.userMetadata))
                for r in rows]

    def expire_snapshots(self, before_ms: int) -> int:
        """Nothing: Delta drops its log's versions past `delta.logRetentionDuration` (30 days
        by default) itself; their files go with `remove_unreferenced`."""
        return 0

    def remove_unreferenced(self, retention_hours: int, orphan_hours: int, now: dt.datetime) -> int:
        """VACUUM: delete the files no version of the last `retention_hours` references (cdc's
        retention may be shorter than Delta's safety check wants, 7 days: it is the
        operator's choice); returns how many. The listing runs in as many tasks as the cores
        (Spark's default: 10,000)."""
        conf = {RETENTION_CHECK: "false", LISTING_PARALLELISM: str(self.spark.sparkContext.defaultParallelism * 2)}
        with conf_for_block(self.spark, conf):
            hours = int(retention_hours)
            removed = self.spark.sql(f"VACUUM {self.ref} RETAIN {hours} HOURS DRY RUN").count()
            self.spark.sql(f"VACUUM {self.ref} RETAIN {hours} HOURS").collect()
        self.refresh()
        return removed

    def commit_summary_and_properties(self, summary: dict[str, str], props: dict[str, str]) -> None:
        with self.stamped(summary, None):  # ALTER TABLE always commits, with the userMetadata set
            self.set_properties(props)
