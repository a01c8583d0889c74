"""`cdc reconcile`: per table, the source's row count (read in one snapshot, with the WAL
position it reflects) against the target's, once the target has caught up with that
position; OK, DRIFT, IN-FLIGHT when changes are still in transit, or CAPTURE-STOPPED when
the source's capture does not run (then nothing can be said of the changes it holds)."""
from __future__ import annotations

import datetime as dt
import time
import uuid
from contextlib import contextmanager

from pyiceberg.exceptions import NoSuchTableError

from cdc import errors
from cdc.config.loader import InvalidRegistration
from cdc.config.models import Settings, TableRegistration
from cdc.log import log
from cdc.planning.position import after_count
from cdc.planning.protect import target_mask_key
from cdc.register.capture import source_capture
from cdc.register.connector import ConnectClient, connector_name
from cdc.report import document, history
from cdc.report.deep_reads import DeepReads
from cdc.planning.drift import differences
from cdc.report.status import table_status
from cdc.sinks import delta
from cdc.sinks.catalog import load_catalog
from cdc.sinks.found import found_target
from cdc.sinks.iceberg import live_rows_filter
from cdc.sources import module_of

OK, DRIFT, IN_FLIGHT, CAPTURE_STOPPED, INVALID = "OK", "DRIFT", "IN-FLIGHT", "CAPTURE-STOPPED", "INVALID"
PROGRESS_EVERY_S = 10  # how often a table still in flight logs what it waits for


def verdict(source_rows: int, target_rows: int | None, caught_up: bool, target_past_source: bool) -> str:
    """OK when the counts agree and the target has applied every change captured up to the
    source's count; a difference is DRIFT only once it has applied everything up to the
    source's count and nothing after it; else IN-FLIGHT."""
    if target_rows == source_rows and caught_up:
        return OK
    return DRIFT if caught_up and not target_past_source else IN_FLIGHT


@contextmanager
def _source_count(settings: Settings, reg: TableRegistration, deep):
    """Rows of the source table and the log position they reflect, in one snapshot (held
    while the block runs with `deep`, its rows to be compared); then a marker transaction
    (Debezium's `log` signal): once the connector has captured it, every change the count
    reflects is in Kafka. Yields (rows, position, position text, marker, held rows or None)."""
    kind = module_of(settings, reg.source.name)
    if deep is not None:
        with deep.held(reg) as (rows, position, shown, held):
            with kind.connect(settings, reg.source.name) as conn:
                marker = kind.write_marker(conn, settings.sources[reg.source.name].signal_table)
            yield rows, position, shown, marker, held
        return
    with kind.connect(settings, reg.source.name) as conn:
        rows, position, shown = kind.count_at_position(conn, reg)
        marker = kind.write_marker(conn, settings.sources[reg.source.name].signal_table)
    yield rows, position, shown, marker, None


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
    """One table's row. `deep` (report/deep_reads.py), when given, compares the rows
    themselves once the target has caught up. `capture` (register/capture.py): its
    source's; a source that does not capture is reported at once, without waiting."""
    stopped = capture is not None and not capture["capturing"]
    with _source_count(settings, reg, deep) as (source_rows, source_position, shown, marker, held):
        deadline, shown_at = clock() + wait_s, clock()
        while True:
            # The marker first: once it is captured, the lag read next covers every change counted.
            captured = marker.captured_by(client.offsets(connector_name(reg.source.name)))
            status = table_status(settings, catalog, reg)
            target_rows = _target_count(settings, catalog, reg, status.get("snapshot_id"))
            caught_up = captured and status.get("registered", False) and status["lag"] == 0
            if caught_up or stopped or clock() >= deadline:
                break
            if clock() - shown_at >= PROGRESS_EVERY_S:
                shown_at = clock()
                log(f"waiting for the target to catch up: marker {'captured' if captured else 'not captured yet'}, "
                    f"lag {status.get('lag')}, {target_rows} of {source_rows} rows, "
                    f"{max(0, deadline - clock()):.0f}s left", table=reg.name, event="progress",
                    marker_captured=captured, lag=status.get("lag"), target_rows=target_rows,
                    source_rows=source_rows)
            sleep(1.0)
        position = status.get("position")
        past = bool(position) and after_count(position, source_position)
        state = verdict(source_rows, target_rows, caught_up, past)
        row = {
            "table": reg.name, "target": status["target"], "status": state,
            "source_rows": source_rows, "target_rows": target_rows, "difference": (target_rows or 0) - source_rows,
            "source_position": shown,
            "target_position": position, "source_commit_time": status.get("source_commit_time"),
            "lag": status.get("lag"), "dead_letters": status.get("dead_letters", 0),
            "checked_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        if stopped:
            row["status"], row["reason"] = CAPTURE_STOPPED, capture["reason"]
            return row
        if deep is not None:
            if caught_up and not past and held is not None:
                found = deep.compare(reg, held, status.get("snapshot_id"))
                row["deep"] = {"compared": True, **found}
                row["status"] = DRIFT if differences(found) else state
            else:
                row["deep"] = {"compared": False, "reason": "the target had not caught up with the source's "
                               "snapshot, or moved past it, within the wait; run again when changes are fewer, "
                               "or with a longer --wait"}
                row["status"] = IN_FLIGHT if state == OK else state
        return row


def reconcile(settings: Settings, tables: list[TableRegistration], wait_s: float = 60.0, deep: bool = False,
              limit: int = 100) -> list[dict]:
    """Every table's row; the run is appended to the history table."""
    catalog = load_catalog(settings)
    client = ConnectClient.of(settings)
    compare_rows = DeepReads(settings, catalog, limit) if deep else None
    for reg in tables if deep else []:  # another masking key than the target's: refused before any wait
        found = found_target(settings, catalog, reg) if reg.mask else None
        if found is not None:
            target_mask_key(settings, reg, found["properties"])
    captures = {s: source_capture(settings, s, client) for s in sorted({t.source.name for t in tables})}
    rows = [reconcile_table(settings, catalog, client, reg, wait_s, compare_rows, capture=captures[reg.source.name])
            for reg in tables]
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


def exit_code(rows: list[dict]) -> int:
    """For cron and CI (errors.EXIT_CODES): 0 when every table is OK; else 3 when a source
    does not capture or a registration does not load, 1 when a table drifted, 5 when
    changes are only still in transit."""
    found = {r["status"] for r in rows}
    for status, code in ((CAPTURE_STOPPED, errors.FAILED), (INVALID, errors.FAILED), (DRIFT, errors.DIFFERENCE),
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
