"""`cdc maintain`: keep a replicated table cheap to read while its job runs.

Per table (the target, its delete memory and its dead letters), each step through the
table's own format (sinks/table.py):
1. compaction: small data files and files carrying deletes are rewritten, so a reader no
   longer merges deletes at read time (Iceberg's `rewrite_data_files` and
   `rewrite_position_delete_files`; Delta's OPTIMIZE and REORG ... APPLY (PURGE));
2. snapshot expiry: snapshots older than the retention go, but never the newest one that
   records cdc offsets, nor anything after it, so the job always finds where to resume
   (Delta keeps its log, and so the commits carrying cdc offsets, for
   `delta.logRetentionDuration`, 30 days by default);
3. cleanup: files no snapshot references (Iceberg's orphans older than the orphan age,
   never the files of a commit in flight; Delta's VACUUM past the retention).
A table a continuous job runs is handed over for its maintenance (control/jobstate.py):
the job stops applying it, and takes it back once its three tables are done, so a rewrite
of a table that changes every second does not lose the race with the job's commits. Every
step still commits through the format's optimistic concurrency (a step that loses a race
with another writer is retried, or left for the next run); the job recomputes a batch
whose commit meets a compaction (`jobs/apply.py`), so nothing is lost or applied twice.
"""
from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import dataclass

from cdc.control import jobstate
from cdc.errors import ApplyError, Busy
from cdc.jobs.apply import run_with_conflict_retries
from cdc.jobs.failures import cause_of
from cdc.log import log
from cdc.planning.bootstrap import DONE, Bootstrap
from cdc.planning.bootstrap import PROPERTY as BOOTSTRAP
from cdc.sinks.formats import missing_table, open_table, table_names, target_refs
from cdc.sinks.table import SinkTable

ORPHAN_AGE_HOURS = 72  # files younger than this are never taken for orphans (writes in flight; Iceberg wants >= 24)


@dataclass(frozen=True)
class Retention:
    snapshot_hours: int
    orphan_hours: int = ORPHAN_AGE_HOURS


def expire_before(snapshots: list[tuple[int, bool]], retention_hours: int, now_ms: int) -> int:
    """The time (epoch ms) before which snapshots may go: the retention, but never past
    the newest snapshot that records cdc offsets. `snapshots`: (timestamp ms, has offsets)."""
    horizon = now_ms - retention_hours * 3_600_000
    with_offsets = [ts for ts, has in snapshots if has]
    return min(horizon, max(with_offsets)) if with_offsets else horizon


def maintain_table(table: SinkTable, retention: Retention, now: dt.datetime | None = None) -> dict:
    """Compact, expire and clean one table (sinks/table.py); returns its files before and after."""
    now = now or dt.datetime.now(dt.timezone.utc)
    before = table.file_counts()
    run_with_conflict_retries(table.compact)
    expired_files = 0
    boot = table.properties().get(BOOTSTRAP)
    if boot and Bootstrap.from_json(boot).state != DONE:
        # An unfinished bootstrap finds its committed chunks in the snapshot history.
        log("a bootstrap is unfinished: no snapshot expires until it is done", table=table.ref, level="warning",
            event="expiry-skipped")
    else:
        expired_files = table.expire_snapshots(expire_before(table.snapshot_times(), retention.snapshot_hours,
                                                             int(now.timestamp() * 1000)))
    orphans = table.remove_unreferenced(retention.snapshot_hours, retention.orphan_hours, now)
    return {"table": table.ref, "before": before, "after": table.file_counts(), "orphans_removed": orphans,
            "expired_data_files": expired_files}


def maintain(settings, tables) -> list[dict]:
    """`maintain_table` for each registered table's target, delete memory and dead letters.
    A table that fails is reported and the others go on; an ApplyError at the end names them."""
    from cdc.sinks.session import get_session

    spark = get_session(settings, app_name="cdc-maintain").newSession()
    out, failed = [], []
    for reg in tables:
        retention = Retention(reg.options.snapshot_retention_hours)
        try:
            with jobstate.exclusive(settings.state_dir, [reg.name]):  # a continuous job hands the table over
                for ref, name in zip(target_refs(settings, reg), table_names(settings, reg)):
                    result = _maintained(spark, ref, name, retention)
                    if result is None:
                        failed.append(name)
                    elif result:
                        out.append(result)
        except Busy as e:
            log(f"maintenance skipped: {e.message}", table=reg.name, level="error", event="maintenance-failed")
            failed.append(reg.name)
    if failed:
        raise ApplyError(f"maintenance failed for {', '.join(failed)} (see above)",
                         hint="run `cdc maintain` again once what the error names is mended")
    return out


def _maintained(spark, ref: str, name: str, retention: Retention) -> dict | None:
    """One table's maintenance, logged: its result, {} when the table does not exist, None
    when it failed (its cause logged: the Java exception's, not py4j's)."""
    try:
        table = open_table(spark, ref)
    except Exception as e:  # noqa: BLE001 - py4j wraps Iceberg's NoSuchTableException
        if missing_table(e):
            return {}
        raise
    started = time.monotonic()
    try:
        result = {**maintain_table(table, retention), "table": name}
    except Exception as e:  # noqa: BLE001 - py4j wraps Iceberg's errors; the next run tries again
        log(f"maintenance failed: {cause_of(e)[:500]}", table=name, level="error", event="maintenance-failed")
        return None
    b, a = result["before"], result["after"]
    log(f"data files {b['data_files']} -> {a['data_files']}, delete files {b['delete_files']} -> "
        f"{a['delete_files']}, snapshots {b['snapshots']} -> {a['snapshots']}, "
        f"{result['orphans_removed']} orphan file(s) removed ({time.monotonic() - started:.1f}s)",
        table=name, event="maintained", stream=sys.stdout, before=b, after=a,
        orphans_removed=result["orphans_removed"], seconds=round(time.monotonic() - started, 3))
    return result
