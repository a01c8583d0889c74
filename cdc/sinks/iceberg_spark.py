"""The Iceberg Java API reached from PySpark, for metadata only: table properties, the
committed offsets in snapshot summaries, and commits that carry only a summary."""
from __future__ import annotations

import json
import re
from itertools import chain

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JJavaError

from cdc.control import commits
from cdc.control.commits import OFFSETS
from cdc.sinks.session import jvm_class


def load_table(spark, ref: str):
    """org.apache.iceberg.Table for `catalog.namespace.table` (fresh metadata)."""
    return jvm_class(spark, "org.apache.iceberg.spark.Spark3Util").loadIcebergTable(spark._jsparkSession, ref)


# Every commit writes the table's metadata file anew, holding every snapshot kept; without
# these properties each of those files stays on disk, and their total grows with the square
# of the commits (a small table's first 500 MERGEs left 502 of them, 245 MB).
METADATA_FILES = {"write.metadata.delete-after-commit.enabled": "true",
                  "write.metadata.previous-versions-max": "10"}
# The properties of every Iceberg table cdc creates (a target adds its own).
TABLE_PROPERTIES = {"format-version": "2", "write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read",
                    "write.merge.mode": "merge-on-read", **METADATA_FILES}
DISTRIBUTION_MODE = "spark.sql.iceberg.distribution-mode"  # a session's, over the table's write.*.distribution-mode
OFFSETS_CHECK = "cdc.direct.OffsetsCheck"
WAP_ENABLED = "write.wap.enabled"  # a table's statements stage their snapshot when the session names a wap id
WAP_ID = "spark.wap.id"
MERGES_DUPLICATE_DVS = (1, 10, 2)  # from this Iceberg release on, a commit merges two deletion vectors of one file


def version(spark) -> tuple[int, ...]:
    """The Iceberg runtime's release, as numbers ((0,) when it does not say)."""
    text = str(jvm_class(spark, "org.apache.iceberg.IcebergBuild").version())
    parts = [int(p) for p in text.split("-")[0].split(".") if p.isdigit()]
    return tuple(parts) or (0,)


def format_version(table) -> int:
    return table.operations().current().formatVersion()


def raise_format_version(table, version: int) -> bool:
    """Raise the table's Iceberg format to `version` (never lowered); True when it changed."""
    if format_version(table) >= version:
        return False
    table.updateProperties().set("format-version", str(version)).commit()
    return True


def actions(spark):
    """Iceberg's Spark actions (rewrites, expiry, orphan cleanup) of the session."""
    return jvm_class(spark, "org.apache.iceberg.spark.actions.SparkActions").get(spark._jsparkSession)


def rewrite_small_files(spark, table, below_bytes: int) -> int:
    """Iceberg's bin-packing rewrite of the table's data files smaller than `below_bytes`,
    two or more in a partition, with their deletion vectors applied (the vectors then left
    dangling are dropped); returns how many files it rewrote."""
    action = actions(spark).rewriteDataFiles(table)
    for k, v in {"min-input-files": "2", "min-file-size-bytes": str(below_bytes),
                 "use-starting-sequence-number": "false", "remove-dangling-deletes": "true"}.items():
        action = action.option(k, v)
    return int(action.execute().rewrittenDataFilesCount())


def partitions(table) -> int:
    """The most partitions the table's spec can hold: the product of its bucket transforms'
    counts (1 unpartitioned; a transform of another kind counts as one)."""
    count = 1
    for spec_field in table.spec().fields():
        found = re.fullmatch(r"bucket\[(\d+)\]", spec_field.transform().toString())
        count *= int(found.group(1)) if found else 1
    return count


def properties(table) -> dict[str, str]:
    return {k: table.properties().get(k) for k in table.properties().keySet().toArray()}


def set_properties(table, props: dict[str, str]) -> None:
    update = table.updateProperties()
    for k, v in props.items():
        update = update.set(k, v)
    update.commit()


def set_tag(table, name: str, snapshot_id: int) -> None:
    """Point tag `name` at snapshot `snapshot_id`, creating it the first time (pyiceberg
    cannot write format version 3 metadata)."""
    refs = table.refs()
    snapshots = table.manageSnapshots()
    if refs.containsKey(name):
        snapshots.replaceTag(name, snapshot_id)
    else:
        snapshots.createTag(name, snapshot_id)
    snapshots.commit()


def current_snapshot_id(table) -> int | None:
    snap = table.currentSnapshot()
    return None if snap is None else snap.snapshotId()


def holds_no_rows(table) -> bool:
    """Whether the table has no rows: no snapshot yet, or none in the data files of its
    current one (Spark writes no equality deletes, so position deletes never add rows)."""
    snap = table.currentSnapshot()
    if snap is None:
        return True
    total = snap.summary().get("total-records")
    return total is not None and int(total) == 0


def last_committed_summary(table) -> dict[str, str] | None:
    """The summary of the newest snapshot in the current ancestry that carries cdc offsets
    (maintenance commits carry none, so walk back past them), found in the table's previous
    metadata files when an expiry from outside removed it (commits.newest_with_offsets)."""
    table.refresh()
    snap = table.currentSnapshot()
    if snap is None:
        return None
    parser = JavaClass("org.apache.iceberg.SnapshotParser", table._gateway_client)
    def current(sid: int):
        return _summary_and_parent(parser, table.snapshot(sid))
    return commits.newest_with_offsets(snap.snapshotId(), chain([current], _previous_metadata(table, parser)))


def _summary_and_parent(parser, snap) -> tuple[dict[str, str], int | None] | None:
    """A snapshot's summary (read in one call to the JVM) and its parent's id; None for no snapshot."""
    if snap is None:
        return None
    summary = json.loads(parser.toJson(snap)).get("summary", {})
    summary.pop("operation", None)  # the snapshot's operation, not a key of its summary
    return summary, snap.parentId()


def _previous_metadata(table, parser):
    """Lookups of the snapshots each of the table's previous metadata files holds, newest
    file first, each file read when taken (at most commits.PREVIOUS_METADATA_READ); a file
    that cannot be read is passed over."""
    reader = JavaClass("org.apache.iceberg.TableMetadataParser", table._gateway_client)
    entries = table.operations().current().previousFiles()  # oldest first
    newest = entries.size() - 1
    for i in range(newest, max(newest - commits.PREVIOUS_METADATA_READ, -1), -1):
        try:
            meta = reader.read(table.io(), entries.get(i).file())
        except Py4JJavaError:  # removed by hand: an older file may still hold the snapshot
            continue
        yield lambda sid, meta=meta: _summary_and_parent(parser, meta.snapshot(sid))


def commit_summary_only(spark, table, props: dict[str, str]) -> None:
    """A snapshot with no data change, carrying `props`: records offsets of a batch whose
    changes were all no-ops, so the table's history still says where the job is; it applies
    only while the table's last offsets are those the batch started from (`offsets_check`)."""
    append = table.newAppend()
    for k, v in props.items():
        append = append.set(k, v)
    check = offsets_check(spark, props)
    if check is not None:
        append = append.validateWith(check)
    append.commit()


def offsets_check(spark, props: dict[str, str]):
    """The offsets compare-and-swap of a commit carrying `props` (jvm/direct OffsetsCheck); None
    for a commit without offsets."""
    summary = spark._jvm.java.util.HashMap()
    for k, v in props.items():
        summary.put(k, v)
    return jvm_class(spark, OFFSETS_CHECK).of(summary)


def publish_staged(spark, table, wap_id: str) -> bool:
    """The snapshot a statement staged under `wap_id` made the table's current one, checked as
    `offsets_check` checks a commit (OffsetsCheck.publish); False when it staged none."""
    return bool(jvm_class(spark, OFFSETS_CHECK).publish(table, wap_id))


def ancestry_summaries(table):
    """Snapshot summaries of the current snapshot and its ancestors, newest first, each read
    in one call to the JVM as Iceberg's JSON of the snapshot (not a call per key: a summary
    holds tens)."""
    table.refresh()
    snap = table.currentSnapshot()
    parser = JavaClass("org.apache.iceberg.SnapshotParser", table._gateway_client)
    while snap is not None:
        summary, parent = _summary_and_parent(parser, snap)
        yield summary
        snap = None if parent is None else table.snapshot(parent)


def snapshot_count(table) -> int:
    return int(table.operations().current().snapshots().size())


def newest_with_offsets(table) -> int | None:
    """How many snapshots of the current ancestry come before the newest one that records
    cdc offsets (0: the current one); None when none does."""
    return next((i for i, s in enumerate(ancestry_summaries(table)) if OFFSETS in s), None)


def expire_all_but(spark, table, keep: int, now_ms: int) -> int:
    """Expire every snapshot but the newest `keep` of the current ancestry, deleting the
    files no snapshot kept reaches (Spark's action, as `cdc maintain`'s procedure: Iceberg's
    incremental cleanup deletes a deletion vectors file that a kept snapshot still reads);
    returns how many snapshots went."""
    before = snapshot_count(table)
    actions(spark).expireSnapshots(table).expireOlderThan(now_ms).retainLast(keep).execute()
    table.refresh()
    return before - snapshot_count(table)


def _commit_with_properties(table, operation, summary: dict[str, str], props: dict[str, str]) -> None:
    """One transaction: `operation` (a snapshot producer of it) carrying `summary`, and `props` set."""
    tx = table.newTransaction()
    op = operation(tx)
    for k, v in summary.items():
        op = op.set(k, v)
    op.commit()
    update = tx.updateProperties()
    for k, v in props.items():
        update = update.set(k, v)
    update.commit()
    tx.commitTransaction()


def empty_table(spark, table, summary: dict[str, str], props: dict[str, str]) -> None:
    """One commit that deletes every row and sets `props`, with `summary` on its snapshot."""
    everything = jvm_class(spark, "org.apache.iceberg.expressions.Expressions").alwaysTrue()
    _commit_with_properties(table, lambda tx: tx.newDelete().deleteFromRowFilter(everything), summary, props)


def commit_summary_and_properties(table, summary: dict[str, str], props: dict[str, str]) -> None:
    """One commit: a snapshot with no data change carrying `summary`, and `props` set."""
    _commit_with_properties(table, lambda tx: tx.newAppend(), summary, props)
