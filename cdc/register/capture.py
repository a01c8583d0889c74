"""Capture health of a source: its Debezium connector's and tasks' state in Kafka Connect,
a failed task's error in words (a record larger than `kafka.max_record_bytes` is named with
that setting), and for PostgreSQL the replication slot's activity and the WAL it holds.
A table whose source is not capturing is never reported caught up."""
from __future__ import annotations

import re

from cdc.config.loader import load_tables
from cdc.config.models import MIB, Settings
from cdc.errors import CdcError
from cdc.register.connector import ConnectClient, connector_name, topic_for
from cdc.sources import module_of
from cdc.sources.postgres import slot_name

RUNNING = "RUNNING"
CAPTURE_STOPPED = "capture-stopped"  # a table's state while its source does not capture
CAPTURE_UNKNOWN = "capture-unknown"  # ... while Kafka Connect cannot tell
TOO_LARGE = re.compile(r"RecordTooLargeException: The message is (\d+) bytes")


def task_error(trace: str | None) -> tuple[str | None, str | None]:
    """(first line, root cause) of a task's Java stack trace."""
    lines = [line.strip() for line in (trace or "").splitlines() if line.strip()]
    if not lines:
        return None, None
    causes = [line[len("Caused by:"):].strip() for line in lines if line.startswith("Caused by:")]
    return lines[0], causes[-1] if causes else lines[0]


def explain(settings: Settings, source: str, trace: str | None, task: int | None = None) -> str | None:
    """What a failed task's trace means and what to do, when cdc knows."""
    too_large = TOO_LARGE.search(trace or "")
    if too_large:
        limit = settings.kafka.max_record_bytes
        table = refused_table(settings, source, task)
        return (f"a change record of source {source}" + (f" (table {table})" if table else "")
                + f" is {int(too_large[1]):,} bytes, larger than "
                f"kafka.max_record_bytes ({limit:,}): raise it in cdc.yaml (and the broker's message.max.bytes "
                f"when the broker is not the local stack's), then run `cdc register` (it applies the new limit "
                f"and restarts capture)")
    named = tables_named(settings, source, trace)
    if len(named) == 1:  # one table's change stops them all
        return (f"{task_error(trace)[1][:300]}; a change of table {named[0]} stops the capture of every table of "
                f"source {source}. When the cause can be fixed at the source, fix it and run `cdc capture restart`; "
                f"when the change can never be captured (it is in the log for good: columns that differ only by "
                f"case, a type Debezium refuses), take the table out of capture with `cdc tables remove "
                f"{named[0]}` (the other tables capture again, from where they stopped), fix it at the source, "
                f"then `cdc tables add`, `cdc register` and `cdc bootstrap` it again")
    return None


def tables_named(settings: Settings, source: str, trace: str | None) -> list[str]:
    """The registrations of the source whose table a task's trace names ("schema"."table",
    or schema.table standing alone)."""
    if not trace:
        return []
    try:
        regs = [t for t in load_tables(settings) if t.source.name == source]
    except CdcError:
        return []
    named = []
    for reg in regs:
        schema, table = reg.source.schema_, reg.source.table
        quoted = (f'"{schema}"."{table}"', f"`{schema}`.`{table}`")
        if any(q in trace for q in quoted) or re.search(rf"(?<![\w.,=]){re.escape(schema)}\.{re.escape(table)}(?![\w,])", trace):
            named.append(reg.name)
    return named


WORKER_LOG_TAIL = 4 * 1024 * 1024  # how much of the local Connect worker's log is searched


def refused_table(settings: Settings, source: str, task: int | None) -> str | None:
    """The table whose record the source's task could not send, when the Connect worker is
    the local stack's (its log names the topic; the task's trace does not), else None."""
    tail = _worker_log(settings) if task is not None else None
    if tail is None:
        return None
    task_id = re.escape(f"{connector_name(source)}-{task}")
    sent = re.findall(rf"WorkerSourceTask\{{id={task_id}\}} failed to send record to (\S+?):", tail)
    if not sent:
        return None
    try:
        names = {topic_for(source, t): t.name for t in load_tables(settings) if t.source.name == source}
    except CdcError:
        names = {}
    return names.get(sent[-1], f"topic {sent[-1]}")


def retrying_cause(settings: Settings, source: str) -> str | None:
    """Why the source's tasks last failed to poll and are retrying (they stay RUNNING
    meanwhile, capturing nothing), when the Connect worker is the local stack's: the
    root cause and its detail from the worker's log, else None."""
    tail = _worker_log(settings)
    if tail is None:
        return None
    task_id = re.escape(connector_name(source)) + r"-\d+"
    failures = list(re.finditer(rf"WorkerSourceTask\{{id={task_id}\}} failed to poll records.*?\n(?=\[)", tail,
                                re.DOTALL))
    if not failures:
        return None
    lines = failures[-1].group(0).splitlines()
    causes = [i for i, line in enumerate(lines) if line.startswith("Caused by:")]
    if not causes:
        return None
    detail = [line.strip() for line in lines[causes[-1] + 1:] if line.strip().startswith("Detail:")][:1]
    return " ".join([lines[causes[-1]][len("Caused by:"):].strip(), *detail])


def _worker_log(settings: Settings) -> str | None:
    """The end of the local Connect worker's log (None for another Connect cluster)."""
    if settings.connect.url is not None:
        return None
    log = settings.state_dir / "run" / "connect.log"
    try:
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - WORKER_LOG_TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def source_capture(settings: Settings, source: str, client: ConnectClient | None = None,
                   slot: bool = True) -> dict:
    """The source's capture: `state` (the connector's, or MISSING, or UNKNOWN when Kafka
    Connect cannot be asked), its tasks, `capturing` and, when it is not, the `reason`; and
    with `slot`, for PostgreSQL, the replication `slot`."""
    client = client or ConnectClient.of(settings)
    name = connector_name(source)
    out = {"source": source, "connector": name, "state": "UNKNOWN", "tasks": [], "capturing": False, "reason": None,
           "slot": _slot(settings, source) if slot else None}
    try:
        found = client.status(name)
    except CdcError as e:
        return {**out, "reason": e.message}
    if found is None:
        return {**out, "state": "MISSING", "reason": f"connector {name} is not in Kafka Connect: run `cdc register`"}
    state = found.get("connector", {}).get("state", "UNKNOWN")
    tasks = []
    for t in found.get("tasks", []):
        first, cause = task_error(t.get("trace"))
        tasks.append({"id": t.get("id"), "state": t.get("state"), "error": first, "cause": cause,
                      "explanation": explain(settings, source, t.get("trace"), t.get("id"))})
    capturing = state == RUNNING and bool(tasks) and all(t["state"] == RUNNING for t in tasks)
    reason = None
    if not capturing:
        failed = next((t for t in tasks if t["state"] != RUNNING), None)
        if state != RUNNING or failed is None:
            reason = f"connector {name} is {state}" + ("" if tasks else " with no task")
        else:
            reason = f"connector {name} task {failed['id']} is {failed['state']}"
        if failed and failed["cause"]:
            reason += f": {failed['explanation'] or failed['cause'][:300]}"
        if state == "PAUSED" or (failed and failed["state"] == "PAUSED"):
            reason += " (resume it with `cdc capture restart`)"
        elif failed and failed["state"] == "FAILED" and not failed["explanation"]:
            reason += " (fix the cause, then run `cdc capture restart`)"
    return {**out, "state": state, "tasks": tasks, "capturing": capturing, "reason": reason}


def _slot(settings: Settings, source: str) -> dict | None:
    """A PostgreSQL source's replication slot (None for other sources, or when unreadable)."""
    if settings.sources[source].kind != "postgresql":
        return None
    kind = module_of(settings, source)
    try:
        with kind.connect(settings, source) as conn:
            state = kind.slot_state(conn, slot_name(settings, source))
    except CdcError:
        return None
    if state is not None:
        limit = settings.sources[source].slot_wal_warn_mb * MIB
        state["wal_warn_bytes"] = limit
        state["over_wal_warn"] = not state["active"] and (state["retained_wal_bytes"] or 0) > limit
    return state


def slot_warning(capture: dict) -> str | None:
    """When the source's slot is inactive and holds more WAL than its threshold, in words."""
    slot = capture.get("slot")
    if not slot or not slot.get("over_wal_warn"):
        return None
    return (f"replication slot {slot['name']} of source {capture['source']} is INACTIVE and holds "
            f"{size(slot['retained_wal_bytes'])} of WAL, over sources.{capture['source']}.slot_wal_warn_mb "
            f"({size(slot['wal_warn_bytes'])}): start its connector (`cdc capture restart`), or drop the slot of a "
            f"source no longer captured (`cdc tables remove` its last table)")


def format_text(captures: list[dict]) -> list[str]:
    """One line per source (and a line per task that does not run)."""
    lines = []
    for c in captures:
        slot = c.get("slot")
        held = (f"; slot {slot['name']} {'active' if slot['active'] else 'INACTIVE'}, "
                f"{size(slot['retained_wal_bytes'])} of WAL held") if slot else ""
        tasks = ", ".join(f"task {t['id']} {t['state']}" for t in c["tasks"])
        lines.append(f"capture {c['source']}: connector {c['state']}{', ' + tasks if tasks else ''}{held}")
        if not c["capturing"] and c["reason"]:
            lines.append(f"  not capturing: {c['reason']}")
        if slot_warning(c):
            lines.append(f"  warning: {slot_warning(c)}")
    return lines


def size(n: int | None) -> str:
    """Bytes in the largest unit that keeps a number of at least one."""
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
