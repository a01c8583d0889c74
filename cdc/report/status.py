"""`cdc status`: per table, Kafka end offsets against the offsets committed in the
target's history (lag), the committed source position and commit time, the last
snapshot (Delta: version), dead letters and the job state; and each source's capture (its
connector, tasks and replication slot). Reads metadata only (pyiceberg or delta-rs, Kafka,
Kafka Connect, the slot's row)."""
from __future__ import annotations

import datetime as dt
from collections import Counter

from cdc import errors
from cdc.config.clients import kafka_access
from cdc.config.loader import InvalidRegistration
from cdc.config.models import Settings, TableRegistration
from cdc.control import commits, jobstate
from cdc.planning.bootstrap import PROPERTY, Bootstrap
from cdc.register.capture import CAPTURE_STOPPED, CAPTURE_UNKNOWN, slot_warning, source_capture
from cdc.register.capture import format_text as capture_lines
from cdc.register.connector import ConnectClient
from cdc.report.cut import read_state as read_cut
from cdc.control.kafka import record_times, watermarks
from cdc.sinks.catalog import load_catalog
from cdc.sinks.formats import shown_name
from cdc.sinks.found import found_target
from cdc.sinks.unreadable import unreadable_target
from cdc.sinks.targets import PROP_TOPIC


def _iso_ms(ms) -> str | None:
    return dt.datetime.fromtimestamp(int(ms) / 1000, dt.timezone.utc).isoformat() if ms is not None else None


def table_status(settings: Settings, catalog, reg: TableRegistration) -> dict:
    out = {"table": reg.name, "sink": reg.sink, "target": shown_name(settings, reg),
           "mode": reg.mode, "location": None, "job": jobstate.read(settings.state_dir, reg.name)}
    found = found_target(settings, catalog, reg)
    if found is None:
        return {**out, "registered": False}
    topic = found["properties"].get(PROP_TOPIC)
    summary = found["summary"] or {}
    committed = commits.parse_offsets(summary).get(topic, {})
    ends = {p: hi for p, (_, hi) in watermarks(kafka_access(settings), topic).items()} if topic else {}
    return {
        **out, "registered": True, "location": found["location"], "topic": topic,
        "kafka_end_offsets": {str(p): o for p, o in sorted(ends.items())},
        "committed_offsets": {str(p): o for p, o in sorted(committed.items())},
        "lag": sum(max(0, o - committed.get(p, 0)) for p, o in ends.items()),
        "position": summary.get(commits.POSITION),
        "source_commit_time": _iso_ms(summary.get(commits.SOURCE_TS)),
        "snapshot_id": found["snapshot_id"],
        "snapshot_time": _iso_ms(found["snapshot_ms"]),
        "dead_letters": found["dead_letters"],
        "bootstrap": _bootstrap(found["properties"]),
        "cut": cut_of(settings, reg),
    }


def cut_of(settings: Settings, reg: TableRegistration) -> dict | None:
    """The table's place in its source's consistent cut (`cdc cut`): its snapshot or version there, and
    why it holds the cut back or is not in it, as the last advance found; None without a cut."""
    state = read_cut(settings, reg.source.name)
    if state is None:
        return None
    return {"snapshot_id": state["tables"].get(reg.name), "transaction": state.get("transaction"),
            "holds": state.get("held", {}).get(reg.name), "left_out": state.get("left_out", {}).get(reg.name)}


def _bootstrap(properties: dict) -> dict | None:
    text = properties.get(PROPERTY)
    if not text:
        return None
    boot = Bootstrap.from_json(text)
    return {"id": boot.id, "method": boot.method, "state": boot.state}


INVALID = "invalid"  # the state of a table whose registration file does not load
UNREADABLE = "unreadable"  # the state of a table whose target cannot be read


def status(settings: Settings, tables: list[TableRegistration],
           invalid: list[InvalidRegistration] = ()) -> tuple[list[dict], list[dict]]:
    """Each table's row, and each of their sources' capture (register/capture.py). A table
    whose source does not capture is in state `capture-stopped`, whatever its job does; one
    whose registration does not load (`invalid`) is in state `invalid`, one whose target cannot
    be read (its metadata file gone, say) in state `unreadable` with its error and what to
    do, and the others are read as usual."""
    catalog = load_catalog(settings)
    client = ConnectClient.of(settings)
    captures = {s: source_capture(settings, s, client) for s in sorted({t.source.name for t in tables})}
    rows = []
    for reg in tables:
        cap = captures[reg.source.name]
        try:
            row = table_status(settings, catalog, reg)
        except Exception as e:  # noqa: BLE001 - one table's unreadable target is its own problem
            rows.append(unreadable_row(settings, reg, unreadable_target(settings, reg, e)))
            continue
        row["capture"] = {"source": cap["source"], "state": cap["state"], "capturing": cap["capturing"],
                          "reason": cap["reason"]}
        row["state"] = (row["job"]["state"] if cap["capturing"] else
                        CAPTURE_UNKNOWN if cap["state"] == "UNKNOWN" else CAPTURE_STOPPED)
        row["age_s"] = age_s(settings, row)
        rows.append(row)
    rows += [{"table": bad.name, "state": INVALID, "registered": False, "file": str(bad.file),
              "invalid": str(bad.error), "job": jobstate.read(settings.state_dir, bad.name)} for bad in invalid]
    return rows, list(captures.values())


def unreadable_row(settings: Settings, reg: TableRegistration, error: errors.CdcError) -> dict:
    """The row of a table whose target cannot be read: its error and what to do."""
    return {"table": reg.name, "sink": reg.sink, "target": shown_name(settings, reg), "mode": reg.mode,
            "location": None, "state": UNREADABLE, "registered": None, "unreadable": error.message,
            "remedy": error.hint, "job": jobstate.read(settings.state_dir, reg.name)}


def age_s(settings: Settings, row: dict, now_ms: int | None = None) -> float | None:
    """How far behind a table's target is, in seconds: the age of the oldest change Kafka
    holds that it has not applied (0 when it has applied all; None when not registered or
    that change could not be read)."""
    if not row.get("registered"):
        return None
    committed = row["committed_offsets"]
    pending = {int(p): committed.get(p, 0) for p, end in row["kafka_end_offsets"].items() if end > committed.get(p, 0)}
    if not pending:
        return 0.0
    times = [t for t in record_times(kafka_access(settings), row["topic"], pending).values() if t is not None]
    now_ms = dt.datetime.now(dt.timezone.utc).timestamp() * 1000 if now_ms is None else now_ms
    return round(max(0.0, now_ms - min(times)) / 1000, 1) if times else None


def problems(rows: list[dict], captures: list[dict], max_lag: int | None = None,
             max_age_s: float | None = None) -> tuple[int, list[str]]:
    """`cdc status --check`: its exit code (errors.EXIT_CODES) and each problem in a line:
    3 when a source does not capture (or its slot, inactive, holds WAL over its threshold),
    a table's job failed or died, its registration does not load or its target cannot be
    read; else 1 when a table's lag or age is over its bound; else 0."""
    failed = [f"source {c['source']} is not capturing: {c['reason']}" for c in captures if not c["capturing"]]
    failed += [slot_warning(c) for c in captures if slot_warning(c)]
    failed += [f"table {r['table']}: its registration does not load: {r['invalid'].splitlines()[0][:300]}"
               for r in rows if r.get("invalid")]
    failed += [f"table {r['table']}: {r['unreadable']}" for r in rows if r.get("unreadable")]
    failed += [f"table {r['table']}: job {r['job']['state']}" + (f": {r['job']['error'].splitlines()[0][:200]}"
                                                                  if r["job"].get("error") else "")
               for r in rows if r["job"]["state"] in (jobstate.FAILED, jobstate.DEAD, jobstate.NOT_RUNNING)]
    behind = [f"table {r['table']}: lag {r['lag']:,} record(s) is over --max-lag {max_lag:,}"
              for r in rows if max_lag is not None and (r.get("lag") or 0) > max_lag]
    behind += [f"table {r['table']}: " + (f"{r['age_s']:,.0f} s behind is over --max-age {max_age_s:,.0f}"
                                          if r.get("age_s") is not None else "its age could not be read from Kafka")
               for r in rows if max_age_s is not None and r.get("registered")
               and (r.get("age_s") is None or r["age_s"] > max_age_s)]
    code = errors.FAILED if failed else errors.DIFFERENCE if behind else errors.OK
    return code, failed + behind


def format_text(rows: list[dict], captures: list[dict] = ()) -> str:
    head = f"{'table':28} {'state':15} {'lag':>8} {'age s':>7} {'dead':>5}  {'source commit time':32} snapshot"
    lines = [head]
    for r in rows:
        state = r.get("state", r["job"]["state"])
        if r.get("invalid"):
            lines.append(f"{r['table']:28} {state:15} {'-':>8} {'-':>7} {'-':>5}  registration does not load: "
                         f"{r['invalid'].splitlines()[0][:200]}")
            continue
        if r.get("unreadable"):
            lines.append(f"{r['table']:28} {state:15} {'-':>8} {'-':>7} {'-':>5}  {r['unreadable']}")
            lines.append(f"  to do: {r['remedy']}")
            continue
        if not r.get("registered"):
            lines.append(f"{r['table']:28} {state:15} {'-':>8} {'-':>7} {'-':>5}  not registered (cdc register)")
            continue
        age = r.get("age_s")
        lines.append(f"{r['table']:28} {state:15} {r['lag']:>8} {'-' if age is None else f'{age:.0f}':>7} "
                     f"{r['dead_letters']:>5}  "
                     f"{(r['source_commit_time'] or '-'):32} {r['snapshot_id'] or '-'}")
        if r.get("bootstrap") and r["bootstrap"]["state"] != "done":
            lines.append(f"  {r['bootstrap']['method']} bootstrap {r['bootstrap']['id']} unfinished: "
                         f"run `cdc bootstrap --table {r['table']}` to resume it")
        if (r.get("cut") or {}).get("holds"):
            lines.append(f"  holds its source's consistent cut (cdc cut): {r['cut']['holds']}")
        if r["job"].get("error"):
            lines.append(f"  last error: {r['job']['error'].splitlines()[0][:200]}")
        if r["job"].get("remedy") and r["job"]["state"] in (jobstate.FAILED, jobstate.DEAD, jobstate.NOT_RUNNING):
            lines.append(f"  to do: {r['job']['remedy'].splitlines()[0][:300]}")
    return "\n".join(lines + shared_lines(rows) + capture_lines(list(captures)))


def shared_lines(rows: list[dict]) -> list[str]:
    """A line for each shared query that reads running tables: its name and how many."""
    shared = Counter(r["job"]["query"] for r in rows if r["job"]["state"] == jobstate.RUNNING and r["job"].get("query"))
    return [f"shared query {name}: reads {n} of these tables" for name, n in sorted(shared.items())]
