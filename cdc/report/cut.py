"""A source's consistent cut, advanced and published (control/cut.py decides it): the
transactions read from Debezium's transaction topic since the last cut, each target's
commits since then, the next cut, and a tag per Iceberg table (`cdc_consistent`) moved to
that cut's snapshot, so that every engine reads the tables at one point of the source:
`... VERSION AS OF 'cdc_consistent'`; a Delta table has no tags, and is read at the version
the cut names (`VERSION AS OF <n>`). The cut is kept under the state directory
(`cuts/<source>.json`): where the next window starts, and each table's state there."""
from __future__ import annotations

import fcntl
import functools
import json
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.exceptions import NoSuchTableError

from cdc.config import load_tables
from cdc.config.clients import kafka_access
from cdc.config.models import Settings, TableRegistration
from cdc.control.commits import OFFSETS, parse_offsets, parse_transaction
from cdc.control.cut import (At, Mark, Outcome, TableCut, Transaction, cut_age_s, next_cut, still_standing,
                             transaction_end)
from cdc.control.kafka import end_offsets, existing_topics, read_records, watermarks
from cdc.decoding.avro import SchemaRegistry, record_value
from cdc.errors import CdcError
from cdc.jobs import metrics
from cdc.log import log
from cdc.planning.merge import table_ref
from cdc.register.connector import topic_for, transaction_topic
from cdc.sinks import delta
from cdc.sinks.catalog import load_catalog
from cdc.sinks.unreadable import unreadable_target

TAG = "cdc_consistent"
MAX_READ = 200_000  # records of the transaction topic read at one advance


@dataclass(frozen=True)
class Commit:
    """A commit in a target's line of history: its id (an Iceberg snapshot, a Delta version)
    and cdc's keys on it (offsets, transaction)."""

    id: int
    props: dict


@dataclass(frozen=True)
class Published:
    """One advance of a source's cut: the outcome, the cut it stands at (the new one, or the
    one kept), the tables whose tag moved, and those read at a Delta version."""

    source: str
    outcome: Outcome
    standing: dict | None
    moved: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()  # the tables whose cut is a Delta version (no tag)
    pending: tuple[Transaction, ...] = ()  # the transactions read that the cut does not hold, oldest first
    read_all: bool = True  # the transaction topic was read to its end
    unreadable: tuple[CdcError, ...] = ()  # the tables whose target could not be read, each its error


def state_file(settings: Settings, source: str) -> Path:
    return settings.state_dir / "cuts" / f"{source}.json"


def read_state(settings: Settings, source: str) -> dict | None:
    """The source's last cut: {transaction, offset, ts_ms, tables: {name: snapshot or null},
    held and left_out: {name: why}, as the last advance found them}."""
    try:
        return json.loads(state_file(settings, source).read_text())
    except FileNotFoundError:
        return None


def write_state(settings: Settings, source: str, state: dict) -> None:
    path = state_file(settings, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, path)


@contextmanager
def one_at_a_time(settings: Settings, source: str):
    """The source's cut advanced by one process at a time (a job, `cdc cut`)."""
    path = state_file(settings, source).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def advance(settings: Settings, source: str, tables: list[TableRegistration], catalog) -> Published:
    """Read what happened since the source's last cut, decide the next one and, when there is
    a new one, keep it and move each table's tag to its snapshot."""
    with one_at_a_time(settings, source):
        return _advance(settings, source, tables, catalog)


def _advance(settings: Settings, source: str, tables: list[TableRegistration], catalog) -> Published:
    kafka = kafka_access(settings)
    state = read_state(settings, source)
    existing = existing_topics(kafka)
    avro = settings.sources[source].format == "avro"
    read = functools.partial(record_value, registry=SchemaRegistry.of(settings)) if avro else None
    transactions, read_all = read_transactions(kafka, transaction_topic(source), existing,
                                               None if state is None else state["offset"] + 1,
                                               settings.sources[source].kind, read)
    known = (state or {}).get("tables", {})
    remembered = (state or {}).get("targets", {})  # each target's identity at the last advance
    left_out, loaded, lines, identities, unreadable, recreated = {}, {}, {}, {}, {}, set()
    for r in tables:
        try:
            found = load_target(settings, r, catalog)
            if found is None:
                left_out[r.name] = "its target does not exist yet: `cdc register` creates it"
                continue
            identities[r.name] = identity(r, found)
            if remembered.get(r.name, identities[r.name]) != identities[r.name]:  # its history starts again
                recreated.add(r.name)
                known = {n: at for n, at in known.items() if n != r.name}
            lines[r.name] = commits(r, found, known.get(r.name) if state else None)
        except Exception as e:  # noqa: BLE001 - one table's unreadable target is its own problem
            unreadable[r.name] = unreadable_target(settings, r, e)
            left_out[r.name] = f"{unreadable[r.name].message}; it rejoins the cut once it can be read"
            continue
        loaded[r.name] = found
    present = [r for r in tables if r.name in loaded]
    ends = end_offsets(kafka, [t for t in (topic_for(source, r) for r in present) if t in existing])
    views = [table_view(r, lines[r.name], ends.get(topic_for(source, r), {}), known, state is not None)
             for r in present]
    outcome = next_cut(transactions, views)
    cut, standing = outcome.cut, state
    if cut is not None and (cut.transaction is not None or state is None):
        standing = {"transaction": cut.transaction.id if cut.transaction else None,
                    "offset": cut.transaction.offset if cut.transaction else -1,
                    "ts_ms": cut.transaction.ts_ms if cut.transaction else None,
                    "tables": {name: at.snapshot for name, at in cut.tables.items()},
                    "published_ms": int(time.time() * 1000)}
    if standing is not None:  # only what each target still holds: never a snapshot its table does not have
        kept = still_standing({n: at for n, at in standing["tables"].items()
                               if standing is not state or n not in recreated},  # the old target's, gone
                              {n: [c.id for c in line] for n, line in lines.items()})
        for name in sorted((set(standing["tables"]) | recreated) - set(kept) - set(left_out)):
            if name in recreated:
                left_out[name] = "its target was re-created: its history starts again, and it rejoins the cut " \
                                 "at its first commit that ends a transaction"
            elif name in lines:
                left_out[name] = f"its state at the cut, {standing['tables'][name]}, is no longer in its target's " \
                                 f"history (rolled back, or expired): it rejoins the cut at its next transaction"
    outcome = Outcome(outcome.cut, outcome.held, {**outcome.left_out, **left_out})
    if standing is not None:  # the cut's one record, written at once, with what holds it (`cdc status`)
        standing = {**standing, "tables": kept, "targets": identities, "held": outcome.held,
                    "left_out": outcome.left_out}
        write_state(settings, source, standing)  # the tags follow it
    tags = (standing or {}).get("tables", {})
    by_name = {r.name: r for r in present if r.sink == "iceberg"}
    moved = tuple(n for n, snapshot in tags.items()
                  if n in by_name and move_tag(settings, by_name[n], loaded[n], At(snapshot)))
    pending = tuple(t for t in transactions if standing is not None and t.offset > standing["offset"])
    return Published(source, outcome, standing, moved, tuple(r.name for r in present if r.sink != "iceberg"),
                     pending, read_all, tuple(unreadable.values()))


def identity(reg: TableRegistration, table) -> str:
    """What tells a target from one re-created under its name: an Iceberg table's uuid, a
    Delta table's id (its versions start at 0 again)."""
    return str(table.metadata.table_uuid) if reg.sink == "iceberg" else str(table.metadata().id)


def load_target(settings: Settings, reg: TableRegistration, catalog):
    """The table's target as pyiceberg or delta-rs reads it; None when it does not exist."""
    if reg.sink == "iceberg":
        try:
            return catalog.load_table(reg.target)
        except NoSuchTableError:
            return None
    return delta.open_table(delta.location(settings, reg.target))


def commits(reg: TableRegistration, table, since: int | None) -> list[Commit]:
    """The target's line of history, oldest first: a Delta target's from version `since` (its
    state at the last cut) when given, instead of its whole log; whole when a RESTORE undid
    `since`."""
    if reg.sink == "iceberg":
        return iceberg_commits(table)
    newest = table.version()
    if since is not None and 0 <= since <= newest:
        line = delta_commits(table.history(newest - since + 1))
        if line and line[0].id == since:
            return line
    return delta_commits(table.history())


def read_transactions(kafka, topic: str, existing: set[str], start: int | None, kind: str,
                      read=None) -> tuple[list[Transaction], bool]:
    """The ENDs of the transaction topic from offset `start` (None: its first record kept),
    and whether they reach its end (at most MAX_READ records are read); `read(value,
    offset)` reads a record that is not JSON (an Avro source's)."""
    if topic not in existing:
        return [], True
    lo, hi = watermarks(kafka, topic).get(0, (0, 0))
    start = lo if start is None else max(start, lo)
    if hi <= start:
        return [], True
    records = read_records(kafka, topic, {0: start}, min(hi - start, MAX_READ))[0]
    values = ((m.value() if read is None or m.value() is None else read(m.value(), m.offset()), m.offset())
              for m in records)
    ends = [t for t in (transaction_end(value, offset, kind) for value, offset in values) if t]
    return ends, hi - start <= MAX_READ


def table_view(reg: TableRegistration, line: list[Commit], end: dict[int, int], known: dict,
               kept: bool) -> TableCut:
    """What the cut knows of one target, from its `line` of history: its data commits since
    its state at the last cut, and that state; the first time (or when that commit is gone),
    all of them and the state `first_base` knows."""
    ids = [c.id for c in line]
    since = known.get(reg.name) if kept else None
    held = kept and reg.name in known and (since is None or since in ids)  # its state at the last cut, still there
    if held and since is not None:
        line = line[ids.index(since) + 1:]
    data = [c for c in line if OFFSETS in c.props]
    marks = tuple(Mark(c.id, parse_transaction(c.props)) for c in data)
    base = At(since) if held else first_base(data, end)
    return TableCut(reg.name, f"{reg.source.schema_}.{reg.source.table}", marks, base, max(len(end), 1))


def first_base(data: list[Commit], end: dict[int, int]) -> At | None:
    """A table's state before the transactions read, when it is known: a table none of whose
    commits holds a transaction's change (only snapshot reads) and that has read its topic to
    the end holds its last commit's state; one that never committed and whose topic holds
    nothing is empty. Otherwise None: the table's first transaction read tells its state."""
    if not data:
        return At(None) if not any(end.values()) else None
    committed = next(iter(parse_offsets(data[-1].props).values()), {})
    if all(parse_transaction(c.props) is None for c in data) and all(committed.get(p, 0) >= o for p, o in end.items()):
        return At(data[-1].id)
    return None


def iceberg_commits(table) -> list[Commit]:
    """An Iceberg target's current snapshot and its ancestors, oldest first."""
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    out, current = [], table.current_snapshot()
    while current is not None:
        out.append(Commit(current.snapshot_id, current.summary.additional_properties if current.summary else {}))
        current = by_id.get(current.parent_snapshot_id) if current.parent_snapshot_id is not None else None
    return out[::-1]


def delta_commits(history: list[dict]) -> list[Commit]:
    """A Delta target's versions, oldest first, from delta-rs's history (newest first), with
    cdc's keys (the commits' userMetadata). The versions a RESTORE undid are left out, as a
    rolled-back Iceberg snapshot is no ancestor; after a restore to a timestamp, only the
    versions after it count."""
    out: list[Commit] = []
    for c in sorted(history, key=lambda c: int(c["version"])):
        if c.get("operation") == "RESTORE":
            restored = (c.get("operationParameters") or {}).get("version")
            out = [x for x in out if x.id <= int(restored)] if restored not in (None, "", "null") else []
        meta = c.get("userMetadata")
        try:
            props = json.loads(meta) if meta else {}
        except ValueError:  # another writer's metadata
            props = {}
        out.append(Commit(int(c["version"]), props if isinstance(props, dict) else {}))
    return out


def move_tag(settings: Settings, reg: TableRegistration, table, at: At) -> bool:
    """Point the target's tag at its snapshot of the cut (through the Iceberg Java API: pyiceberg
    writes no format version 3 metadata); False when it is there already or the table has no
    snapshot (an empty table: nothing to read before its first commit)."""
    if at.snapshot is None:
        return False
    ref = table.metadata.refs.get(TAG)
    if ref is not None and ref.snapshot_id == at.snapshot:
        return False
    from cdc.sinks import iceberg_spark
    from cdc.sinks.session import get_session, make_active

    spark = get_session(settings)
    make_active(spark)  # on the calling thread, which may not have made the session
    iceberg_spark.set_tag(iceberg_spark.load_table(spark, table_ref(settings.catalog.name, reg.target)), TAG,
                          at.snapshot)
    return True


def report(published: Published, now_ms: int | None = None) -> dict:
    """The cut as `cdc cut --json` prints it."""
    s = published.standing or {}
    return {"source": published.source, "transaction": s.get("transaction"), "source_ts_ms": s.get("ts_ms"),
            "age_s": age_s(published, now_ms),
            "tables": s.get("tables", {}), "moved": list(published.moved), "versions": list(published.versions),
            "held": published.outcome.held, "left_out": published.outcome.left_out}


def age_s(published: Published, now_ms: int | None = None) -> float | None:
    """The cut's age (control/cut.py's `cut_age_s`): 0 when it holds every transaction read
    from the source; None when there is no cut yet."""
    if published.standing is None:
        return None
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    return cut_age_s(published.standing.get("ts_ms"), list(published.pending), published.read_all, now_ms)


def format_text(found: list[dict]) -> str:
    """`cdc cut`'s lines: per source, its cut, each table's snapshot, what holds it back."""
    lines = []
    for r in found:
        if r["tables"]:
            at = f"transaction {r['transaction']}" if r["transaction"] else "the changes before its first transaction"
            age = f", {r['age_s']:.1f} s behind the source" if r["age_s"] is not None else ""
            lines.append(f"{r['source']}: cut at {at}{age}")
        else:
            lines.append(f"{r['source']}: no cut yet")
        lines += [f"  {name:40} {'version' if name in r['versions'] else 'snapshot'} "
                  f"{at if at is not None else '- (empty)'}" for name, at in sorted(r["tables"].items())]
        lines += [f"  {name:40} holds the cut: {why}" for name, why in sorted(r["held"].items())]
        lines += [f"  {name:40} not in the cut: {why}" for name, why in sorted(r["left_out"].items())]
    return "\n".join(lines)


def keep_advancing(settings: Settings, sources: list[str], stop: threading.Event, clock=time.monotonic) -> None:
    """A running job's thread: each of `sources` whose `cut_every_s` is set has its cut
    advanced at that interval until `stop`. A round that fails is logged (once until it
    succeeds again) and tried at the next interval; the job's tables go on either way."""
    every = {s: settings.sources[s].cut_every_s for s in sources if settings.sources[s].cut_every_s}
    if not every:
        return
    due, opened, failing = dict.fromkeys(every, clock()), {}, {}
    while True:
        for source in sorted(every):
            if clock() >= due[source]:
                advance_logged(settings, source, opened, failing)
                due[source] = clock() + every[source]
        if stop.wait(max(0.0, min(due.values()) - clock())):
            return


def advance_logged(settings: Settings, source: str, opened: dict, failing: dict[str, str]) -> Published | None:
    """`advance` over every registered table of the source, its age as the metric
    `cdc_consistent_cut_age_seconds`; None when it failed (`failing`: the error each failing
    source last logged). `opened` keeps the catalog between calls."""
    try:
        if "catalog" not in opened:
            opened["catalog"] = load_catalog(settings)
        # A registration that does not load is left out (`cdc run` logs it): the others' cut moves on.
        tables = [t for t in load_tables(settings, invalid=[]) if t.source.name == source]
        published = advance(settings, source, tables, opened["catalog"])
    except Exception as e:  # noqa: BLE001 - a cut that cannot move now must not stop the job's tables
        message = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
        if failing.get(source) != message:
            log(f"the consistent cut of source {source} could not advance: {message}; tried again at the next "
                f"interval", event="cut-failed", level="warning", source=source, error=message)
        failing[source] = message
        return None
    if failing.pop(source, None) is not None:
        log(f"the consistent cut of source {source} advances again", event="cut-resumed", source=source)
    age = age_s(published)
    if age is not None:
        metrics.CUT_AGE.labels(source).set(age)
    return published
