"""`cdc maintain`: keep a replicated table cheap to read while its job runs.

Per table (the target, its delete memory and its dead letters):
1. compaction: small data files and files carrying position deletes are rewritten, so a
   reader no longer merges deletes at read time (`rewrite_data_files`);
   delete files left behind are rewritten or dropped (`rewrite_position_delete_files`);
2. snapshot expiry: snapshots older than the retention go, but never the newest one that
   records cdc offsets, nor anything after it, so the job always finds where to resume;
3. orphan cleanup: files no snapshot references, older than the orphan age (never the
   files of a commit in flight).
Every step commits through Iceberg's optimistic concurrency: a step that loses a race with
the job's MERGE is retried or left for the next run; the job recomputes a batch whose
commit meets a compaction (`jobs/apply.py`), so nothing is lost or applied twice.

A Delta target (and its tables) gets the same through Delta's own commands: `OPTIMIZE`
compacts small files, dropping the rows deletion vectors mark, and `VACUUM` removes the
files no version within the retention references. Delta keeps its log (and so the commits
carrying cdc offsets) for `delta.logRetentionDuration`, 30 days by default.
"""
from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import dataclass

from cdc.control.commits import OFFSETS
from cdc.errors import ApplyError
from cdc.jobs.apply import run_with_conflict_retries
from cdc.log import log
from cdc.planning.bootstrap import DONE, Bootstrap
from cdc.planning.bootstrap import PROPERTY as BOOTSTRAP
from cdc.sinks import delta, iceberg_spark
from cdc.sinks.formats import DeltaTarget

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
ORPHAN_AGE_HOURS = 72  # files younger than this are never taken for orphans (writes in flight; Iceberg wants >= 24)


@dataclass(frozen=True)
class Retention:
    snapshot_hours: int
    orphan_hours: int = ORPHAN_AGE_HOURS


def _literal(ident: str) -> str:
    """`namespace.table` as a procedure's string argument (identifiers are validated plain)."""
    if not all(part.replace("_", "").isalnum() for part in ident.split(".")):
        raise ValueError(f"not a plain table identifier: {ident!r}")
    return f"'{ident}'"


def _timestamp(when: dt.datetime) -> str:
    return f"TIMESTAMP '{when.astimezone(dt.timezone.utc):%Y-%m-%d %H:%M:%S.%f}'"


def expire_before(snapshots: list[tuple[int, bool]], retention_hours: int, now_ms: int) -> int:
    """The time (epoch ms) before which snapshots may go: the retention, but never past
    the newest snapshot that records cdc offsets. `snapshots`: (timestamp ms, has offsets)."""
    horizon = now_ms - retention_hours * 3_600_000
    with_offsets = [ts for ts, has in snapshots if has]
    return min(horizon, max(with_offsets)) if with_offsets else horizon


def table_files(spark, catalog: str, ident: str) -> dict[str, int]:
    """Live data files, delete files and snapshots of a table (metadata tables only)."""
    ref = f"{catalog}.{ident}"
    row = spark.sql(f"SELECT count_if(content = 0) AS data, count_if(content <> 0) AS deletes FROM {ref}.files").first()
    snaps = spark.sql(f"SELECT count(*) AS n FROM {ref}.snapshots").first()["n"]
    return {"data_files": int(row["data"] or 0), "delete_files": int(row["deletes"] or 0), "snapshots": int(snaps)}


def maintain_table(spark, catalog: str, ident: str, retention: Retention, now: dt.datetime | None = None) -> dict:
    """Compact, expire and clean one table; returns its files before and after."""
    now = now or dt.datetime.now(dt.timezone.utc)
    # The table named with its catalog: a bare namespace would first be tried as a catalog.
    name, call = _literal(f"{catalog}.{ident}"), f"CALL {catalog}.system"
    before = table_files(spark, catalog, ident)
    run_with_conflict_retries(lambda: spark.sql(
        f"{call}.rewrite_data_files(table => {name}, options => map('min-input-files', '2', "
        f"'delete-file-threshold', '1', "
        # new files newer than every delete, so the deletes they absorbed are dropped as dangling
        f"'use-starting-sequence-number', 'false', 'remove-dangling-deletes', 'true'))").collect())
    run_with_conflict_retries(lambda: spark.sql(
        f"{call}.rewrite_position_delete_files(table => {name}, options => map('rewrite-all', 'true'))").collect())
    table = iceberg_spark.load_table(spark, f"{catalog}.{ident}")
    expired_files = 0
    boot = iceberg_spark.properties(table).get(BOOTSTRAP)
    if boot and Bootstrap.from_json(boot).state != DONE:
        # An unfinished bootstrap finds its committed chunks in the snapshot history.
        log("a bootstrap is unfinished: no snapshot expires until it is done", table=ident, level="warning",
            event="expiry-skipped")
    else:
        snapshots = [(s.timestampMillis(), s.summary().get(OFFSETS) is not None) for s in table.snapshots()]
        cutoff = EPOCH + dt.timedelta(milliseconds=expire_before(snapshots, retention.snapshot_hours,
                                                                 int(now.timestamp() * 1000)))
        expired_files = int(spark.sql(f"{call}.expire_snapshots(table => {name}, older_than => {_timestamp(cutoff)}, "
                                      f"retain_last => 1)").first()["deleted_data_files_count"] or 0)
    orphans = spark.sql(f"{call}.remove_orphan_files(table => {name}, older_than => "
                        f"{_timestamp(now - dt.timedelta(hours=retention.orphan_hours))})").count()
    after = table_files(spark, catalog, ident)
    return {"table": ident, "before": before, "after": after, "orphans_removed": orphans,
            "expired_data_files": expired_files}


DELTA_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"  # VACUUM's listing tasks


def maintain_delta_table(spark, path, retention: Retention) -> dict:
    """OPTIMIZE, then VACUUM past the snapshot retention, of the Delta table at `path`."""
    ref = delta.ref(path)
    table = DeltaTarget(spark, ref)
    before = table.file_counts()
    run_with_conflict_retries(lambda: spark.sql(f"OPTIMIZE {ref}").collect())
    run_with_conflict_retries(lambda: spark.sql(f"REORG TABLE {ref} APPLY (PURGE)").collect())
    # cdc's retention may be shorter than Delta's safety check wants (7 days): it is the operator's
    # choice. The listing runs in as many tasks as the cores (Spark's default: 10,000).
    conf = {DELTA_RETENTION_CHECK: "false", LISTING_PARALLELISM: str(spark.sparkContext.defaultParallelism * 2)}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        hours = int(retention.snapshot_hours)
        removed = spark.sql(f"VACUUM {ref} RETAIN {hours} HOURS DRY RUN").count()
        spark.sql(f"VACUUM {ref} RETAIN {hours} HOURS").collect()
    finally:
        for k in conf:
            spark.conf.unset(k)
    return {"table": str(path), "before": before, "after": table.file_counts(), "orphans_removed": removed,
            "expired_data_files": removed}


def maintain(settings, tables) -> list[dict]:
    """`maintain_table` for each registered table's target, delete memory and dead letters.
    A table that fails is reported and the others go on; an ApplyError at the end names them."""
    from pyiceberg.exceptions import NoSuchTableError

    from cdc.sinks.session import get_session
    from cdc.planning.dead_letters import SUFFIX as DEAD_LETTERS
    from cdc.planning.merge import DELETES_SUFFIX
    from cdc.sinks.catalog import load_catalog

    spark = get_session(settings, app_name="cdc-maintain").newSession()
    catalog = load_catalog(settings)
    out, failed = [], []
    for reg in tables:
        retention = Retention(reg.options.snapshot_retention_hours)
        for suffix in ("", DELETES_SUFFIX, DEAD_LETTERS):
            ident = reg.target + suffix
            if reg.sink == "delta":
                path = delta.location(settings, reg.target, suffix)
                if delta.open_table(path) is None:
                    continue
                ident = str(path)
            else:
                try:
                    catalog.load_table(ident)
                except NoSuchTableError:
                    continue
            started = time.monotonic()
            try:
                result = (maintain_delta_table(spark, path, retention) if reg.sink == "delta"
                          else maintain_table(spark, settings.catalog.name, ident, retention))
            except Exception as e:  # noqa: BLE001 - py4j wraps Iceberg's errors; the next run tries again
                log(f"maintenance failed: {str(e).splitlines()[0][:300]}", table=ident, level="error",
                    event="maintenance-failed")
                failed.append(ident)
                continue
            b, a = result["before"], result["after"]
            log(f"data files {b['data_files']} -> {a['data_files']}, delete files {b['delete_files']} -> "
                f"{a['delete_files']}, snapshots {b['snapshots']} -> {a['snapshots']}, "
                f"{result['orphans_removed']} orphan file(s) removed ({time.monotonic() - started:.1f}s)",
                table=ident, event="maintained", stream=sys.stdout, before=b, after=a,
                orphans_removed=result["orphans_removed"], seconds=round(time.monotonic() - started, 3))
            out.append(result)
    if failed:
        raise ApplyError(f"maintenance failed for {', '.join(failed)} (see above)",
                         hint="run `cdc maintain` again; a step that lost a race with the job usually passes next time")
    return out
