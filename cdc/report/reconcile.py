"""`cdc reconcile`: per table, the source's row count (read in one snapshot) against the
target's at the commit that ends exactly where the count was taken: one in its history, or
one its running job is asked to make (control/barrier.py), so a table that never stops
changing is compared too. OK, DRIFT, IN-FLIGHT when no such commit came within the wait,
or CAPTURE-STOPPED when the source's capture does not run (then nothing can be said of the
changes it holds)."""
from __future__ import annotations

import datetime as dt
import time
import uuid
from contextlib import contextmanager

from pyiceberg.exceptions import NoSuchTableError

from cdc import errors
from cdc.config.loader import InvalidRegistration
from cdc.config.models import Settings, TableRegistration
from cdc.control import barrier, jobstate
from cdc.log import log
from cdc.planning.counted import CountPoint
from cdc.planning.protect import target_mask_key
from cdc.register.capture import source_capture
from cdc.register.connector import ConnectClient, connector_name
from cdc.report import document, history
from cdc.report.boundary import boundary
from cdc.report.deep_reads import DeepReads
from cdc.planning.drift import differences
from cdc.report.status import table_status
from cdc.sinks import delta
from cdc.sinks.catalog import load_catalog
from cdc.sinks.found import commit_at, found_target
from cdc.sinks.iceberg import live_rows_filter
from cdc.sinks.unreadable import unreadable_target
from cdc.sources import module_of

OK, DRIFT, IN_FLIGHT, CAPTURE_STOPPED, INVALID = "OK", "DRIFT", "IN-FLIGHT", "CAPTURE-STOPPED", "INVALID"
UNREADABLE = "UNREADABLE"  # its target cannot be read (sinks/unreadable.py)
PROGRESS_EVERY_S = 10  # how often a table still in flight logs what it waits for
POLL_S = 0.25  # how often the target's commits are looked at while waiting for one at the count


def verdict(source_rows: int, target_rows: int | None, at_count: bool) -> str:
    """Compared at a target commit that ends exactly at the source's count (`at_count`): OK
    when the counts agree, else DRIFT; not compared: IN-FLIGHT."""
    if not at_count:
        return IN_FLIGHT
    return OK if target_rows == source_rows else DRIFT


def not_compared(captured: bool, registered: bool, job_state: str, lag: int | None) -> str:
    """Why a table was not compared within the wait, and what to do about it."""
    if not registered:
        return "its target does not exist yet: run `cdc register`, then its job"
    if not captured:
        return ("Debezium had not captured the changes the count holds within the wait: check the source's "
                "connector (`cdc status`), or run again with a longer --wait")
    if job_state != jobstate.RUNNING:
        return (f"no job applies the table (its job is {job_state}) and its target has no commit at the count: "
                f"run its job (`cdc run`, or `cdc run --available-now` once), then reconcile again")
    return (f"its running job made no commit at the count within the wait (lag {lag if lag is not None else '?'}): "
            f"it is behind, or a batch holds more than the wait allows; run again with a longer --wait, or see "
            f"`cdc status`")


@contextmanager
def _source_count(settings: Settings, reg: TableRegistration, deep):
    """Rows of the source table and where they were counted (planning/counted.py), in one
    snapshot (held while the block runs with `deep`, its rows to be compared); then a
    marker transaction (Debezium's `log` signal): once the connector has captured it, every
    change the count reflects is in Kafka. Yields (rows, count point, position text,
    marker, held rows or None)."""
    kind = module_of(settings, reg.source.name)
    if deep is not None:
        with deep.held(reg) as (rows, point, shown, held):
            with kind.connect(settings, reg.source.name) as conn:
                marker = kind.write_marker(conn, settings.sources[reg.source.name].signal_table)
            yield rows, point, shown, marker, held
        return
    with kind.connect(settings, reg.source.name) as conn:
        rows, position, shown, horizon = kind.count_at_position(conn, reg)
        marker = kind.write_marker(conn, settings.sources[reg.source.name].signal_table)
    yield rows, CountPoint.of(position, horizon, shown), shown, marker, None


def _target_count(settings: Settings, catalog, reg: TableRegistration, snapshot_id: int | None) -> int | None:
    """The target's live rows at the snapshot (Delta: version) the status read."""
    if reg.sink == "delta":
        table = delta.open_table(delta.location(settings, reg.target))
        if table is None:
            return None
        table.load_as_version(snapshot_id)
        return delta.live_rows(table, reg.mode)
    try:
        table = catalog.load_table(reg.target)
    except NoSuchTableError:
        return None
    if snapshot_id is None:
        return 0
    return table.scan(snapshot_id=snapshot_id, row_filter=live_rows_filter(reg.mode)).count()


def reconcile_table(settings: Settings, catalog, client: ConnectClient, reg: TableRegistration,
                    wait_s: float, deep=None, clock=time.monotonic, sleep=time.sleep,
                    capture: dict | None = None) -> dict:
    """One table's row: the source counted, and the target at the commit that ends exactly
    at the count, which a running job is asked to make (control/barrier.py) when none does;
    counted again when the job went past the count first, until `wait_s` has passed. `deep`
    (report/deep_reads.py), when given, compares the rows themselves there. `capture`
    (register/capture.py): its source's; a source that does not capture is reported at
    once, without waiting. A drift is confirmed at a second count: the changes a
    PostgreSQL count holds are the start of each partition but for a transaction whose
    commit was written and not yet visible when the count's snapshot was taken, a window
    of microseconds that a second count does not meet again."""
    stopped = capture is not None and not capture["capturing"]
    deadline, first = clock() + wait_s, None
    while True:
        row = _counted_once(settings, catalog, client, reg, deadline, deep, clock, sleep, stopped)
        if row is None:
            log("the table's job went past the count before a commit at it: counting again", table=reg.name,
                event="recount")
            continue
        if first is not None and row["status"] not in (OK, DRIFT):
            row = first  # no second compare within the wait: the first one stands
        if first is not None or row["status"] != DRIFT or stopped:
            break
        first = row
        log(f"{row['difference']:+,} row(s) at the count: confirming at a second count", table=reg.name,
            event="drift-confirming")
    if stopped:
        row["status"], row["reason"] = CAPTURE_STOPPED, capture["reason"]
    return row


def _counted_once(settings: Settings, catalog, client: ConnectClient, reg: TableRegistration, deadline: float,
                  deep, clock, sleep, stopped: bool) -> dict | None:
    """One count and the compare at it; None when the target went past the count with no
    commit at it (and time is left to count again)."""
    request = None if stopped else barrier.hold(settings.state_dir, reg.name, max(1.0, deadline - clock()))
    try:
        with _source_count(settings, reg, deep) as (source_rows, point, shown, marker, held):
            at, found, shown_at = None, None, clock()
            while True:
                # The marker first: once it is captured, every change the count holds is in Kafka.
                captured = marker.captured_by(client.offsets(connector_name(reg.source.name)))
                status = table_status(settings, catalog, reg)
                registered = status.get("registered", False) and bool(status.get("topic"))
                if captured and registered and at is None:
                    at = boundary(settings, status["topic"], point, settings.sources[reg.source.name].format == "avro")
                    if request is not None:
                        request = barrier.place(settings.state_dir, reg.name, request, at)
                if at is not None:
                    found = commit_at(settings, catalog, reg, status["topic"], at)
                if found is not None or stopped or clock() >= deadline:
                    break
                committed = {int(p): o for p, o in status.get("committed_offsets", {}).items()}
                if at is not None and barrier.missed(committed, at):
                    return None
                if clock() - shown_at >= PROGRESS_EVERY_S:
                    shown_at = clock()
                    log(f"waiting for a commit at the count: marker {'captured' if captured else 'not captured yet'}, "
                        f"lag {status.get('lag')}, {max(0, deadline - clock()):.0f}s left", table=reg.name,
                        event="progress", marker_captured=captured, lag=status.get("lag"), source_rows=source_rows)
                sleep(POLL_S)
            snapshot_id = found["snapshot_id"] if found else status.get("snapshot_id")
            target_rows = _target_count(settings, catalog, reg, snapshot_id)
            row = {
                "table": reg.name, "target": status["target"], "status": verdict(source_rows, target_rows, bool(found)),
                "source_rows": source_rows, "target_rows": target_rows, "difference": (target_rows or 0) - source_rows,
                "source_position": shown,
                "target_position": status.get("position"), "source_commit_time": status.get("source_commit_time"),
                "lag": status.get("lag"), "dead_letters": status.get("dead_letters", 0),
                "compared_snapshot": found["snapshot_id"] if found else None,
                "checked_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            }
            if not found and not stopped:
                row["reason"] = not_compared(captured, registered, status["job"]["state"], status.get("lag"))
            if deep is not None and not stopped:
                if found and held is not None:
                    compared = deep.compare(reg, held, found["snapshot_id"])
                    row["deep"] = {"compared": True, **compared}
                    if differences(compared):
                        row["status"] = DRIFT
                else:
                    row["deep"] = {"compared": False, "reason": row.get("reason") or "the target has no rows yet"}
            return row
    finally:
        if request is not None:
            barrier.withdraw(settings.state_dir, reg.name, request)


def reconcile(settings: Settings, tables: list[TableRegistration], wait_s: float = 60.0, deep: bool = False,
              limit: int = 100) -> list[dict]:
    """Every table's row (one whose target cannot be read: UNREADABLE, with its error and what to
    do); the run is appended to the history table."""
    catalog = load_catalog(settings)
    client = ConnectClient.of(settings)
    compare_rows = DeepReads(settings, catalog, limit) if deep else None
    unreadable: dict[str, errors.CdcError] = {}
    for reg in tables if deep else []:  # another masking key than the target's: refused before any wait
        try:
            found = found_target(settings, catalog, reg) if reg.mask else None
        except Exception as e:  # noqa: BLE001 - one table's unreadable target is its own problem
            unreadable[reg.name] = unreadable_target(settings, reg, e)
            continue
        if found is not None:
            target_mask_key(settings, reg, found["properties"])
    captures = {s: source_capture(settings, s, client) for s in sorted({t.source.name for t in tables})}
    rows = []
    for reg in tables:
        if reg.name in unreadable:
            rows.append(unreadable_row(reg.name, unreadable[reg.name]))
            continue
        try:
            rows.append(reconcile_table(settings, catalog, client, reg, wait_s, compare_rows,
                                        capture=captures[reg.source.name]))
        except Exception as e:  # noqa: BLE001 - one table's unreadable target is its own problem
            rows.append(unreadable_row(reg.name, unreadable_target(settings, reg, e)))
    try:
        history.record(catalog, uuid.uuid4().hex[:12], rows)
    except Exception as e:  # noqa: BLE001 - the check stands without its history (a read-only catalog role)
        log(f"this run was not appended to {history.HISTORY}: {str(e).splitlines()[0][:300]}",
            level="warning", event="history-not-written")
    return rows


def invalid_row(bad: InvalidRegistration) -> dict:
    """The row of a table whose registration file does not load: nothing can be compared."""
    return {"table": bad.name, "target": None, "status": INVALID, "source_rows": None, "target_rows": None,
            "difference": None, "source_position": None, "target_position": None, "source_commit_time": None,
            "lag": None, "dead_letters": None, "reason": f"its registration does not load: {bad.error}"}


def unreadable_row(name: str, error: errors.CdcError) -> dict:
    """The row of a table whose target cannot be read: its error and what to do."""
    checked = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"table": name, "target": None, "status": UNREADABLE, "source_rows": None, "target_rows": None,
            "difference": None, "source_position": None, "target_position": None, "source_commit_time": None,
            "lag": None, "dead_letters": None, "reason": f"{error.message}\n  -> {error.hint}", "checked_at": checked}


def exit_code(rows: list[dict]) -> int:
    """For cron and CI (errors.EXIT_CODES): 0 when every table is OK; else 3 when a source
    does not capture, a registration does not load or a target cannot be read, 1 when a
    table drifted, 5 when changes are only still in transit."""
    found = {r["status"] for r in rows}
    for status, code in ((CAPTURE_STOPPED, errors.FAILED), (INVALID, errors.FAILED), (UNREADABLE, errors.FAILED),
                         (DRIFT, errors.DIFFERENCE),
                         (IN_FLIGHT, errors.IN_FLIGHT)):
        if status in found:
            return code
    return errors.OK


def format_json(rows: list[dict]) -> str:
    return document.dumps(ok=exit_code(rows) == 0, tables=rows)


def format_text(rows: list[dict]) -> str:
    head = f"{'table':28} {'status':9} {'source rows':>12} {'target rows':>12} {'diff':>7} {'lag':>6} {'dead':>5}  " \
           f"source commit time"
    lines = [head]
    def shown(value) -> str:
        return "-" if value is None else str(value)

    for r in rows:
        lines.append(f"{r['table']:28} {r['status']:9} {shown(r['source_rows']):>12} {shown(r['target_rows']):>12} "
                     f"{shown(r['difference']):>7} {shown(r['lag']):>6} {shown(r['dead_letters']):>5}  "
                     f"{r['source_commit_time'] or '-'}")
        if r.get("reason"):
            lines.append(f"  {r['reason']}")
        if "deep" in r:
            lines.extend("  " + line for line in deep_lines(r["deep"]))
    ok = sum(r["status"] == OK for r in rows)
    lines.append(f"{ok} of {len(rows)} table(s) OK")
    return "\n".join(lines)


def deep_lines(found: dict) -> list[str]:
    """A table's --deep result in words: what was compared, and the keys that differ."""
    if not found["compared"]:
        return [f"deep: not compared: {found['reason']}"]
    levels = ", ".join(f"{s['differing']} of {s['ranges']}" for s in found["levels"])
    lines = [f"deep: {found['rows']['source']:,} source and {found['rows']['target']:,} target rows compared; "
             f"ranges differing by level: {levels}; {found['missing']} missing in the target, "
             f"{found['extra']} extra, {found['different']} different, {found['duplicate']} duplicate"]
    for k in found["keys"]:
        lines.append(f"  {k['kind']:9} " + ", ".join(f"{c}={v}" for c, v in k["key"].items()))
    total = differences(found)
    if total > len(found["keys"]):
        lines.append(f"  ... {total - len(found['keys'])} more (raise --limit to list them)")
    return lines
