"""`cdc reconcile`: per table, the source's row count (read in one snapshot, with the WAL
position it reflects) against the target's, once the target has caught up with that
position; OK, DRIFT, or IN-FLIGHT when changes are still in transit."""
from __future__ import annotations

import json
import time

from pyiceberg.exceptions import NoSuchTableError

from cdc.config.models import Settings, TableRegistration
from cdc.planning.position import after_count
from cdc.register.connector import ConnectClient, connector_name
from cdc.report.status import table_status
from cdc.sinks.catalog import load_catalog
from cdc.sources import module_of

OK, DRIFT, IN_FLIGHT = "OK", "DRIFT", "IN-FLIGHT"


def verdict(source_rows: int, target_rows: int | None, caught_up: bool, target_past_source: bool) -> str:
    """OK when the counts agree; a difference is DRIFT only once the target has applied
    everything up to the source's count and nothing after it, else IN-FLIGHT."""
    if target_rows == source_rows:
        return OK
    return DRIFT if caught_up and not target_past_source else IN_FLIGHT


def _source_count(settings: Settings, reg: TableRegistration):
    """Rows of the source table and the log position they reflect, in one snapshot; then a
    marker transaction (Debezium's `log` signal): once the connector has captured it, every
    change the count reflects is in Kafka. Returns (rows, position, position text, marker)."""
    kind = module_of(settings, reg.source.name)
    with kind.connect(settings, reg.source.name) as conn:
        rows, position, shown = kind.count_at_position(conn, reg)
        marker = kind.write_marker(conn, settings.sources[reg.source.name].signal_table)
    return rows, position, shown, marker


def _target_count(catalog, reg: TableRegistration) -> int | None:
    try:
        return catalog.load_table(reg.target).scan().count()
    except NoSuchTableError:
        return None


def reconcile_table(settings: Settings, catalog, client: ConnectClient, reg: TableRegistration,
                    wait_s: float, clock=time.monotonic, sleep=time.sleep) -> dict:
    source_rows, source_position, shown, marker = _source_count(settings, reg)
    deadline = clock() + wait_s
    while True:
        status = table_status(settings, catalog, reg)
        target_rows = _target_count(catalog, reg)
        caught_up = status.get("registered", False) and status["lag"] == 0 and \
            marker.captured_by(client.offsets(connector_name(reg.source.name)))
        if target_rows == source_rows or caught_up or clock() >= deadline:
            break
        sleep(1.0)
    position = status.get("position")
    past = bool(position) and after_count(position, source_position)
    return {
        "table": reg.name, "target": status["target"], "status": verdict(source_rows, target_rows, caught_up, past),
        "source_rows": source_rows, "target_rows": target_rows, "difference": (target_rows or 0) - source_rows,
        "source_position": shown,
        "target_position": position, "source_commit_time": status.get("source_commit_time"),
        "lag": status.get("lag"), "dead_letters": status.get("dead_letters", 0),
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def reconcile(settings: Settings, tables: list[TableRegistration], wait_s: float = 60.0) -> list[dict]:
    catalog = load_catalog(settings)
    client = ConnectClient(settings.connect_url)
    return [reconcile_table(settings, catalog, client, reg, wait_s) for reg in tables]


def exit_code(rows: list[dict]) -> int:
    """0 when every table is OK, 1 otherwise (fit for cron and CI)."""
    return 0 if all(r["status"] == OK for r in rows) else 1


def format_json(rows: list[dict]) -> str:
    return json.dumps({"tables": rows, "ok": exit_code(rows) == 0}, indent=2)


def format_text(rows: list[dict]) -> str:
    head = f"{'table':28} {'status':9} {'source rows':>12} {'target rows':>12} {'diff':>7} {'lag':>6} {'dead':>5}  " \
           f"source commit time"
    lines = [head]
    for r in rows:
        lines.append(f"{r['table']:28} {r['status']:9} {r['source_rows']:>12} "
                     f"{r['target_rows'] if r['target_rows'] is not None else '-':>12} {r['difference']:>7} "
                     f"{r['lag'] if r['lag'] is not None else '-':>6} {r['dead_letters']:>5}  "
                     f"{r['source_commit_time'] or '-'}")
    ok = sum(r["status"] == OK for r in rows)
    lines.append(f"{ok} of {len(rows)} table(s) OK")
    return "\n".join(lines)
