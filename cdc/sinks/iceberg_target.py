"""An Iceberg target (or delete memory, or dead-letter table) as a job sees it: the
`SinkTable` interface (table.py) through Iceberg's Java API, reached from PySpark. Its
commits carry a batch's cdc keys in the snapshot summary."""
from __future__ import annotations

import datetime as dt
import time
import uuid
from contextlib import contextmanager

from cdc.control.commits import OFFSETS
from cdc.planning.sql import q
from cdc.sinks import direct, iceberg_spark
from cdc.sinks.session import conf_for_block, jvm_class

SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."
ITERABLES = "org.apache.iceberg.relocated.com.google.common.collect.Iterables"


class IcebergTarget:
    """An Iceberg table of a catalog (`ref`: catalog.namespace.table, quoted)."""

    has_direct_path = True

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

    def file_counts(self) -> dict[str, int]:
        """Live data files, delete files and snapshots (from the current snapshot's summary)."""
        self.refresh()
        return {"data_files": self.data_files(), "delete_files": self._total("total-delete-files"),
                "snapshots": self.snapshot_count()}

    def expiry_due(self, keep: int) -> bool:
        """Whether it holds a tenth more than `keep` snapshots: every commit writes each one
        kept into the table's metadata file again."""
        return self.snapshot_count() > keep + max(1, keep // 10)

    def compact(self) -> None:
        """Every small data file and every one carrying deletes rewritten into few, the
        deletes they absorbed dropped (new files newer than every delete: dangling ones go),
        then the delete files left rewritten or dropped (Iceberg's Spark actions, as the
        `rewrite_data_files` and `rewrite_position_delete_files` procedures)."""
        action = iceberg_spark.actions(self.spark).rewriteDataFiles(self.table)
        for k, v in {"min-input-files": "2", "delete-file-threshold": "1", "use-starting-sequence-number": "false",
                     "remove-dangling-deletes": "true"}.items():
            action = action.option(k, v)
        action.execute()
        iceberg_spark.actions(self.spark).rewritePositionDeletes(self.table).option("rewrite-all", "true").execute()
        self.refresh()

    def snapshot_times(self) -> list[tuple[int, bool]]:
        """(epoch ms, records cdc offsets) of each snapshot it keeps."""
        self.refresh()
        return [(s.timestampMillis(), s.summary().get(OFFSETS) is not None) for s in self.table.snapshots()]

    def expire_snapshots(self, before_ms: int) -> int:
        """Expire the snapshots older than `before_ms` (never the current one), deleting the
        files no snapshot kept reaches; returns the data files deleted."""
        expiry = iceberg_spark.actions(self.spark).expireSnapshots(self.table)
        result = expiry.expireOlderThan(before_ms).retainLast(1).execute()
        self.refresh()
        return int(result.deletedDataFilesCount())

    def remove_unreferenced(self, retention_hours: int, orphan_hours: int, now: dt.datetime) -> int:
        """Delete the files under the table's location that no snapshot references and that
        are older than `orphan_hours` (never a commit in flight: snapshots past
        `retention_hours` went with `expire_snapshots`); returns how many."""
        older_than = int((now - dt.timedelta(hours=orphan_hours)).timestamp() * 1000)
        result = iceberg_spark.actions(self.spark).deleteOrphanFiles(self.table).olderThan(older_than).execute()
        return int(jvm_class(self.spark, ITERABLES).size(result.orphanFileLocations()))

    @contextmanager
    def undistributed(self):
        """The writes in this block keep each task's rows where they are, without first
        shuffling them by partition: a small batch's MERGE is spared the shuffle's stages.
        Two tasks may then each write a deletion vector for one data file, which a commit
        merges from Iceberg 1.10.2 on; an older runtime keeps the table's distribution."""
        if iceberg_spark.version(self.spark) < iceberg_spark.MERGES_DUPLICATE_DVS:
            yield
            return
        with conf_for_block(self.spark, {iceberg_spark.DISTRIBUTION_MODE: "none"}, restore=True):
            yield

    @contextmanager
    def stamped(self, props: dict[str, str], txn: tuple[str, int] | None):
        """The commits in this block carry `props` in their snapshot summary (which holds the
        batch id: `txn` is Delta's)."""
        with conf_for_block(self.spark, {SNAPSHOT_PROPERTY + k: v for k, v in props.items()}):
            yield

    def commit_summary_only(self, props: dict[str, str], txn: tuple[str, int]) -> None:
        """A commit with no data change carrying `props` (a batch whose changes were no-ops)."""
        iceberg_spark.commit_summary_only(self.spark, self.table, props)

    def commit_statement(self, statement: str, props: dict[str, str], txn: tuple[str, int]) -> None:
        """Run a batch's SQL statement (a MERGE, an append) as its commit carrying `props`: its
        snapshot staged (write-audit-publish), then made the table's current one only while the
        table's last offsets are those the batch started from, in one metadata commit that
        fails if the table moved meanwhile (iceberg_spark.publish_staged). Spark's statements
        take no check of their own; staged, nobody reads a commit that is then refused."""
        if self.properties().get(iceberg_spark.WAP_ENABLED) != "true":
            self.set_properties({iceberg_spark.WAP_ENABLED: "true"})
        wap_id = uuid.uuid4().hex
        with self.stamped(props, txn), conf_for_block(self.spark, {iceberg_spark.WAP_ID: wap_id}):
            self.spark.sql(statement)
        iceberg_spark.publish_staged(self.spark, self.table, wap_id)
        self.refresh()

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
