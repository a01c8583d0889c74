"""A pure reference model of what one micro-batch does to a target: no Spark, no JVM.

It is the test oracle of the apply step (jobs/apply.py's TableApplier): the MERGE path
(planning/merge.py, dedupe.py, history.py, unchanged.py) and the direct path (jvm/direct's
DirectDelta) must both leave a target equal to `Target` after the same batches, row for row
(tests/spark/test_batch_properties.py). It is written from the code's rules, one function per
rule, and says where each comes from; what it leaves out: bad records (other than the
unchanged values nobody has), schema changes, snapshot reads (`r`) being told from streamed
ones by anything but their position, the delete memory's horizon (nothing is forgotten), a
bootstrap's held rows, masking, Kafka key and row disagreeing, keys of several columns, a key's
records in more than one partition (a repartitioned topic), transactions.

The table is fixed: key `id`, a text column `v` whose unchanged TOASTed value may arrive as
Debezium's placeholder, a number `n`.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

PLACEHOLDER = "__debezium_unavailable_value"
TOMBSTONE = "tombstone"  # planning/sql.py's TOMBSTONE: the `_op` of a record without a value
UPSERTS = ("c", "u", "r")
DATA = ("v", "n")  # the non-key columns
TOAST = ("v",)  # those whose unchanged value may be the placeholder
MOVED_ROW_UNKNOWN = "moved-row-unknown"  # planning/unchanged.py's error classes
VALUE_UNKNOWN = "unchanged-value-unknown"
PLACE = 33  # a position's source part (planning/position.py's source_part): no Kafka tie-break
# What a candidate says of an unchanged value (planning/unchanged.py; its third state, "ask the
# key this row moved from", is the answer found for that key's own create, which comes first here)
KNOWN, UNKNOWN = "known", "unknown"


def position(commit: int, lsn: int, phase: int, partition: int, offset: int) -> str:
    """planning/position.py's encoding: plain string order is the change order."""
    return f"{commit:016x}{lsn:016x}{phase:1d}{partition:08x}{offset:016x}"


@dataclass(frozen=True)
class Record:
    """One Kafka record of the table's topic: a change (`op` c, u, r, d), a tombstone or a
    truncate (`t`, no key). `v` may be PLACEHOLDER. A key change is a delete with
    `moved_to` (header `__debezium.newkey`) and a create with `moved_from` (`oldkey`)."""

    partition: int
    offset: int
    op: str
    key: int | None
    v: object = None
    n: int | None = None
    commit: int = 0
    lsn: int = 0
    ts_ms: int = 0
    moved_to: int | None = None
    moved_from: int | None = None

    @property
    def position(self) -> str | None:
        if self.op == TOMBSTONE:
            return None
        return position(self.commit, self.lsn, 0 if self.op == "r" else 1, self.partition, self.offset)


@dataclass
class Event:
    """A decoded record (spark_decode): toast columns holding the placeholder are None and
    flagged in `lacking`; a key change's create knows its old key."""

    record: Record
    op: str
    key: int | None
    values: dict
    lacking: frozenset
    error: str | None = None

    @property
    def position(self) -> str | None:
        return self.record.position

    @property
    def place(self) -> str:
        return (self.position or "")[:PLACE]

    @property
    def moved_from(self) -> int | None:
        return self.record.moved_from if self.op == "c" else None

    @property
    def key_moved(self) -> bool:
        return self.op == "d" and self.record.moved_to is not None


def decode(r: Record) -> Event:
    values = {"v": None if r.v == PLACEHOLDER else r.v, "n": r.n}
    lacking = frozenset(c for c in TOAST if r.op in UPSERTS and getattr(r, c) == PLACEHOLDER)
    return Event(r, r.op, r.key, values, lacking)


@dataclass
class Target:
    """What a target holds after some batches: its rows (history: every version), its delete
    memory, its truncate floor (`cdc.truncated-at`), its committed offsets and dead letters."""

    mode: str = "upsert"
    rows: dict = field(default_factory=dict)  # upsert, soft_delete: key -> row
    versions: list = field(default_factory=list)  # history: every version
    memory: list = field(default_factory=list)  # (key, position, moved values or None)
    truncated_at: str | None = None
    committed: dict = field(default_factory=dict)  # partition -> next offset
    dead: set = field(default_factory=set)  # (partition, offset, error class)

    def table(self) -> list[dict]:
        """Every row of the target, as a reader sees it, sorted."""
        rows = self.versions if self.mode == "history" else self.rows.values()
        return sorted((dict(r) for r in rows), key=lambda r: (r["id"], r["_cdc_position"] or ""))


def apply(target: Target, records: list[Record], skip_committed: bool = True) -> None:
    """One batch of `records` (jobs/apply.py's TableApplier.__call__ and _apply): those below
    the committed offsets left out (unless a replay: `skip_committed` false); the batch's
    truncates and changes in the plan's steps (jobs/plan.py); the offsets committed."""
    if skip_committed and target.committed:
        records = [r for r in records if r.offset >= target.committed.get(r.partition, 0)
                   or r.partition not in target.committed]
    if not records:
        return
    for r in records:
        target.committed[r.partition] = max(target.committed.get(r.partition, 0), r.offset + 1)
    events = [decode(r) for r in records]
    truncates = sorted({(e.position, e.record.ts_ms) for e in events if e.op == "t"})
    data = [e for e in events if e.op != "t"]
    for step in steps(truncates, target.mode):
        if step[0] == "truncate":
            truncate(target, step[1], step[2])
        else:
            _, after, before, final = step
            apply_changes(target, [e for e in data if in_step(e, after, before, final)])


def steps(truncates: list[tuple[str, int]], mode: str) -> list[tuple]:
    """jobs/plan.py's truncate_steps: upsert applies the changes after its last truncate only;
    the other modes apply the changes between truncates before each."""
    if not truncates:
        return [("changes", None, None, True)]
    if mode == "upsert":
        return [("truncate", *truncates[-1]), ("changes", truncates[-1][0], None, True)]
    out, lower = [], None
    for pos, ms in truncates:
        out += [("changes", lower, pos, False), ("truncate", pos, ms)]
        lower = pos
    return out + [("changes", lower, None, True)]


def in_step(e: Event, after: str | None, before: str | None, final: bool) -> bool:
    """jobs/apply.py's changes_of: a tombstone (no position) passes a lower bound only in the
    final step, and never an upper one."""
    p = e.position
    if before is not None and (p is None or not p < before):
        return False
    if after is not None and not ((p is not None and p > after) or (final and e.op == TOMBSTONE)):
        return False
    return True


def truncate(target: Target, at: str, ms: int) -> None:
    """planning/merge.py's truncate_sql, and the floor that only rises."""
    before = (lambda r: r["_cdc_position"] is None or r["_cdc_position"] < at)
    if target.mode == "upsert":
        target.rows = {k: r for k, r in target.rows.items() if not before(r)}
    elif target.mode == "soft_delete":
        for r in target.rows.values():
            if not r["_cdc_deleted"] and before(r):
                r.update(_cdc_deleted=True, _cdc_op="t", _cdc_position=at)
    else:
        for r in target.versions:
            if r["_cdc_current"] and before(r):
                r.update(_cdc_valid_to=ms, _cdc_current=False)
    if at > (target.truncated_at or ""):
        target.truncated_at = at


def remembered(target: Target) -> dict:
    """The newest remembered delete position per key (merge.py's remembered_deletes_sql)."""
    out: dict = {}
    for key, pos, _ in target.memory:
        if pos is not None and (key not in out or pos > out[key]):
            out[key] = pos
    return out


def apply_changes(target: Target, events: list[Event]) -> None:
    """One step's changes (TableApplier._merge_changes): key changes' unchanged values looked
    up, changes whose values nobody has set aside, then the last change per key merged (or,
    in history mode, every change made a version)."""
    if not events:
        return
    deleted = remembered(target)
    events, moved = resolve_moves(target, events)
    events = set_aside_unknown(target, events, deleted)
    if target.mode == "history":
        history_merge(target, events)
        return
    # The memory takes the step's delete events, each at its own position, before the MERGE.
    for e in events:
        if e.op == "d":
            target.memory.append((e.key, e.position, moved.get((e.record.partition, e.record.offset))))
    for key, s in last_per_key(events, target.mode == "soft_delete").items():
        merge_one(target, key, s, deleted.get(key))


# ---- key changes and unchanged values (planning/unchanged.py) ----

def _stored(target: Target) -> list[tuple]:
    """The target's rows as candidates: (key, position, state of v, v)."""
    if target.mode == "history":
        return [(r["id"], r["_cdc_position"] or "", KNOWN, r["v"]) for r in target.versions]
    gone = target.mode == "soft_delete"
    return [(k, r["_cdc_position"] or "", UNKNOWN if gone and r["_cdc_deleted"] else KNOWN, r["v"])
            for k, r in target.rows.items()]


def resolve_moves(target: Target, events: list[Event]) -> tuple[list[Event], dict]:
    """(events with the unchanged values of key-changing creates filled in, and for each
    key-changing delete whose create is not in the step, the moved row's values, by Kafka place,
    for the delete memory: not in history mode). A create's value is the newest candidate of
    its old key before its place that says something: the step's changes (a delete: unknown;
    a change carrying it: known; a key-changing create lacking it: what that create found; an
    update lacking it says nothing), the target's rows (a soft-deleted one: unknown), the
    delete memory's copies of moved rows (at the same place too)."""
    remember = target.mode != "history"
    memory = [] if not remember else [(k, p, m) for k, p, m in target.memory if m is not None]
    stored = _stored(target)
    creates = sorted((e for e in events if e.moved_from is not None and e.lacking and e.error is None),
                     key=lambda e: e.position)
    paired = {e.place for e in events if e.moved_from is not None}
    requests = [("create", e) for e in creates]
    if remember:
        requests += [("delete", e) for e in events if e.key_moved and e.place not in paired]
    answers: dict = {}  # (partition, offset) of a create -> {column: (state, value)}

    def batch_state(e: Event, c: str):
        if e.op == "d":
            return UNKNOWN, None
        if e.op in UPSERTS and c not in e.lacking:
            return KNOWN, e.values[c]
        if e.moved_from is not None:
            return answers.get((e.record.partition, e.record.offset), {}).get(c, (UNKNOWN, None))
        return None, None

    def find(old: int, at: str, c: str) -> tuple:
        found = []  # (position, state, value)
        for e in events:
            if e.key == old and e.op in ("c", "u", "r", "d") and e.error is None and e.place < at:
                state, value = batch_state(e, c)
                if state is not None:
                    found.append((e.position, state, value))
        found += [(p, s, v) for k, p, s, v in stored if k == old and p[:PLACE] < at]
        found += [(p, KNOWN if c in m else UNKNOWN, m.get(c)) for k, p, m in memory
                  if k == old and p[:PLACE] <= at]
        if not found:
            return UNKNOWN, None
        _, state, value = max(found, key=lambda f: f[0])
        return state, value

    # Creates in place order: a chain's earlier link is settled before a later one asks it.
    # Requests of one place never ask each other (a candidate is strictly before its place).
    moved = {}
    for kind, e in sorted(requests, key=lambda r: r[1].position):
        if kind == "create":
            answers[(e.record.partition, e.record.offset)] = {c: find(e.moved_from, e.place, c) for c in TOAST}
        else:
            moved[(e.record.partition, e.record.offset)] = {
                c: value for c in TOAST for state, value in [find(e.key, e.place, c)] if state == KNOWN}
    out = []
    for e in events:
        got = answers.get((e.record.partition, e.record.offset))
        if got:
            known = {c for c in e.lacking if got[c][0] == KNOWN}
            e = replace(e, values={**e.values, **{c: got[c][1] for c in known}}, lacking=e.lacking - known)
        out.append(e)
    return out, moved


def set_aside_unknown(target: Target, events: list[Event], deleted: dict) -> list[Event]:
    """unknown_values and set_aside: the keys whose changes would write a row without a value
    nobody has (not held by the target, newer than what it holds, its remembered delete and
    the floor) have all their upserts set aside as dead letters."""
    floor = target.truncated_at
    by_key: dict = {}
    for e in events:
        if e.error is None and e.op in ("c", "u", "r", "d"):
            by_key.setdefault(e.key, []).append(e)
    unknown = {}
    for key, evs in by_key.items():
        ups = [e for e in evs if e.op in UPSERTS]
        if target.mode == "history":
            if not ups:
                continue
            first = min(ups, key=lambda e: e.position)
            if not first.lacking:
                continue
            mine = [r for r in target.versions if r["id"] == key]
            if any(r["_cdc_current"] for r in mine):
                continue
            p, known = first.position, max((r["_cdc_position"] or "" for r in mine), default="")
        else:
            last = max(evs, key=lambda e: e.position)
            written = bool(ups) if target.mode == "soft_delete" else last.op != "d"
            if not written or all(any(c not in e.lacking for e in ups) for c in TOAST):
                continue
            if key in target.rows:
                continue
            p, known = last.position, ""
        if not p > known or (floor and not p > floor) or (deleted.get(key) and not p > deleted[key]):
            continue
        unknown[key] = MOVED_ROW_UNKNOWN if any(e.moved_from is not None for e in evs) else VALUE_UNKNOWN
    out = []
    for e in events:
        if e.key in unknown and e.op in UPSERTS and e.error is None:
            target.dead.add((e.record.partition, e.record.offset, unknown[e.key]))
            continue
        out.append(e)
    return out


# ---- upsert and soft_delete: the last change per key, then the MERGE ----

@dataclass
class Last:
    """planning/dedupe.py's row of one key."""

    op: str
    position: str | None
    ts: int | None
    partition: int
    offset: int
    values: dict
    has: dict  # toast column -> whether a change of the batch carries it
    values_at: str | None  # soft_delete: the newest upsert's position


def last_per_key(events: list[Event], keep_values: bool) -> dict:
    """The change with the highest position; a tombstone later in its partition makes it a
    delete; a key of tombstones alone keeps the latest (a lone tombstone). A toast column takes
    the newest value any upsert of the batch carries; `keep_values` (soft_delete): the other
    columns come from the newest upsert, and `values_at` is its position."""
    out = {}
    keys = []
    for e in events:
        if e.key not in keys:
            keys.append(e.key)
    for key in keys:
        evs = [e for e in events if e.key == key]
        changes = [e for e in evs if e.op != TOMBSTONE and e.position is not None]
        tombs = [e for e in evs if e.op == TOMBSTONE]
        w = max(changes, key=lambda e: e.position) if changes else None
        t = max(tombs, key=lambda e: e.record.offset) if tombs else None
        ups = [e for e in changes if e.op in UPSERTS]
        u = max(ups, key=lambda e: e.position) if ups else None
        kept = u if keep_values else w
        values = {c: (kept.values[c] if kept else None) for c in DATA if c not in TOAST}
        has = {}
        for c in TOAST:
            carrying = [e for e in ups if c not in e.lacking]
            has[c] = bool(carrying)
            values[c] = max(carrying, key=lambda e: e.position).values[c] if carrying else None
        if w is None:
            out[key] = Last(TOMBSTONE, None, None, t.record.partition, t.record.offset, values, has, None)
            continue
        op = w.op
        if t is not None and t.record.partition == w.record.partition and t.record.offset > w.record.offset:
            op = "d"
        out[key] = Last(op, w.position, w.record.ts_ms, w.record.partition, w.record.offset, values, has,
                        u.position if (keep_values and u) else None)
    return out


def _meta(s: Last) -> dict:
    return {"_cdc_op": s.op, "_cdc_position": s.position, "_cdc_source_ts": s.ts,
            "_cdc_kafka_partition": s.partition, "_cdc_kafka_offset": s.offset}


def merge_one(target: Target, key: int, s: Last, deleted_at: str | None) -> None:
    """planning/merge.py's merge_sql for one key (its WHEN clauses in order; append_sql into
    an empty target inserts what this would)."""
    soft = target.mode == "soft_delete"
    t = target.rows.get(key)
    if t is not None:
        newer = t["_cdc_position"] is None or (s.position is not None and s.position > t["_cdc_position"])
        if s.op == "d" and newer:
            if not soft:
                del target.rows[key]
                return
            fresh = s.values_at is not None and (t["_cdc_position"] is None or s.values_at > t["_cdc_position"])
            for c in DATA:
                if fresh and (c not in TOAST or s.has[c]):
                    t[c] = s.values[c]
            t.update(_meta(s), _cdc_deleted=True, _cdc_op="d")
        elif (s.op == TOMBSTONE and s.partition == t["_cdc_kafka_partition"]
              and s.offset > t["_cdc_kafka_offset"] and not (soft and t["_cdc_deleted"])):
            if not soft:
                del target.rows[key]
                return
            t.update(_cdc_deleted=True, _cdc_op="d", _cdc_kafka_offset=s.offset)
        elif s.op in UPSERTS and newer:
            for c in DATA:
                if c not in TOAST or s.has[c]:
                    t[c] = s.values[c]
            t.update(_meta(s))
            if soft:
                t["_cdc_deleted"] = False
        return
    inserted = s.op in UPSERTS or (soft and s.op == "d" and s.values_at is not None)
    floor = target.truncated_at
    if not inserted or (deleted_at is not None and not s.position > deleted_at) or (floor and not s.position > floor):
        return
    row = {"id": key, **s.values, **_meta(s)}
    if soft:
        row["_cdc_deleted"] = s.op == "d"
    target.rows[key] = row


# ---- history (planning/history.py) ----

def history_merge(target: Target, events: list[Event]) -> None:
    """Every change newer than the key's newest version (and than the floor) becomes a version
    valid until the key's next change of the batch; the key's first new change ends its open
    version; an unchanged value is the newest one carried before it in the batch, else the
    current version's."""
    floor = target.truncated_at
    fresh_by_key: dict = {}
    for e in events:
        if e.op not in ("c", "u", "r", "d") or (floor and not (e.position and e.position > floor)):
            continue
        fresh_by_key.setdefault(e.key, []).append(e)
    closes, added = [], []
    for key, evs in fresh_by_key.items():
        mine = [r for r in target.versions if r["id"] == key]
        known = max((r["_cdc_position"] or "" for r in mine), default="")
        current = [r for r in mine if r["_cdc_current"]]
        stored = {c: max(current, key=lambda r: r["_cdc_position"] or "")[c] if current else None for c in TOAST}
        evs = sorted((e for e in evs if e.position > known), key=lambda e: e.position)
        if not evs:
            continue
        closes.append((key, evs[0].record.ts_ms))
        carried = dict()
        for i, e in enumerate(evs):
            if e.op in UPSERTS:
                for c in TOAST:
                    if c not in e.lacking:
                        carried[c] = e.values[c]
            if e.op not in UPSERTS:
                continue
            last = i == len(evs) - 1
            values = {c: (carried[c] if c in carried else stored[c]) if c in TOAST else e.values[c] for c in DATA}
            added.append({"id": key, **values, "_cdc_op": e.op, "_cdc_position": e.position,
                          "_cdc_source_ts": e.record.ts_ms, "_cdc_kafka_partition": e.record.partition,
                          "_cdc_kafka_offset": e.record.offset, "_cdc_valid_from": e.record.ts_ms,
                          "_cdc_valid_to": None if last else evs[i + 1].record.ts_ms, "_cdc_current": last})
    for key, ms in closes:
        for r in target.versions:
            if r["id"] == key and r["_cdc_current"]:
                r.update(_cdc_valid_to=ms, _cdc_current=False)
    target.versions += added


# ---- a source and its connector, for generated histories ----

@dataclass
class Source:
    """A source table and the Debezium connector that captures it into a topic of
    `partitions` partitions (a key's records in one, `key % partitions`; a truncate in 0):
    each statement makes its records at a new LSN; `redeliver` is a connector restart,
    which sends the records of the last statements again at new offsets."""

    partitions: int = 1
    ts0: int = 1_900_000_000_000
    live: dict = field(default_factory=dict)  # key -> {"v", "n"}: what the source holds
    lsn: int = 100
    offsets: dict = field(default_factory=dict)
    log: list = field(default_factory=list)  # every record, in the order the connector sent them
    statements: list = field(default_factory=list)  # each statement's records

    def _send(self, specs: list[dict]) -> list[Record]:
        out = []
        for spec in specs:
            p = 0 if spec["key"] is None else spec["key"] % self.partitions
            offset = self.offsets.get(p, 0)
            self.offsets[p] = offset + 1
            out.append(Record(partition=p, offset=offset, **spec))
        self.log += out
        return out

    def _statement(self, specs: list[dict]) -> None:
        if specs:
            self.statements.append(specs)
            self._send(specs)

    def _at(self) -> dict:
        self.lsn += 10
        return {"commit": self.lsn, "lsn": self.lsn, "ts_ms": self.ts0 + self.lsn}

    def run(self, op: tuple) -> None:
        """One statement: ("insert", key, v, n), ("update", key, v or PLACEHOLDER, n),
        ("delete", key), ("move", old key, new key, placeholder?), ("truncate",),
        ("redeliver", statements), ("unseen", key, n): an update, its unchanged value left out,
        of a row the topic never had (its value is known nowhere). An update, delete or move of a
        key the table does not hold takes one it holds; one that still does not fit (an insert of
        a key it holds, ...) is made into one that does, or nothing."""
        kind = op[0]
        if kind in ("update", "delete", "move") and op[1] not in self.live and self.live:
            op = (kind, sorted(self.live)[op[1] % len(self.live)], *op[2:])  # a key the source holds
        if kind in ("insert", "update"):
            key, v, n = op[1:]
            old = self.live.get(key)
            if old is None or kind == "insert" and v != PLACEHOLDER:
                v = "a" if v == PLACEHOLDER else v
                self.live[key] = {"v": v, "n": n}
                self._statement([{"op": "c" if old is None else "u", "key": key, "v": v, "n": n, **self._at()}])
                return
            sent = v if v != PLACEHOLDER or old["v"] is not None else None  # a NULL is never TOASTed
            self.live[key] = {"v": old["v"] if v == PLACEHOLDER else v, "n": n}
            self._statement([{"op": "u", "key": key, "v": sent, "n": n, **self._at()}])
        elif kind == "delete":
            key = op[1]
            if key in self.live:
                del self.live[key]
                at = self._at()
                self._statement([{"op": "d", "key": key, **at}, {"op": TOMBSTONE, "key": key}])
        elif kind == "move":
            old, new, toasted = op[1:]
            if old in self.live and new not in self.live:
                row = self.live.pop(old)
                self.live[new] = row
                at = self._at()
                v = PLACEHOLDER if toasted and row["v"] is not None else row["v"]
                self._statement([{"op": "d", "key": old, "moved_to": new, **at},
                                 {"op": TOMBSTONE, "key": old, "moved_to": new},
                                 {"op": "c", "key": new, "v": v, "n": row["n"], "moved_from": old, **at}])
        elif kind == "unseen":  # a row whose earlier changes never reached the topic, updated
            key, n = op[1:]
            if key not in self.live:
                self.live[key] = {"v": "unseen", "n": n}
                self._statement([{"op": "u", "key": key, "v": PLACEHOLDER, "n": n, **self._at()}])
        elif kind == "truncate":
            self.live.clear()
            self._statement([{"op": "t", "key": None, **self._at()}])
        elif kind == "redeliver":
            for specs in self.statements[-op[1]:]:
                self._send(specs)
        else:
            raise ValueError(f"not a statement: {op!r}")


def interleave(log: list[Record], swaps: list[int]) -> list[Record]:
    """The records in the order a consumer may read them: each partition's in order, with the
    records at `swaps` read after the next one of another partition (a partition that lags)."""
    out = list(log)
    for i in swaps:
        if 0 <= i < len(out) - 1 and out[i].partition != out[i + 1].partition:
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


def plan_steps(records: list[Record], actions: list[tuple], most: int = 10) -> list[tuple]:
    """The batches a job applies: the `actions` in turn, then again while records are left:
    ("batch", size) the next records; ("replay", back, size) records applied before, again, from
    `back` records before the last one applied, as `cdc replay` applies a window (nothing
    skipped by the committed offsets); ("restart",) a new applier on the same target. After
    `most` batches, or without a batch among the actions, the rest comes in a last batch.
    Returns ("apply", records, skip_committed) and ("restart",) steps."""
    out, at = [], 0
    again = itertools.cycle(actions) if any(a[0] == "batch" for a in actions) else iter(())
    for n, action in enumerate(itertools.chain(actions, again)):
        if sum(s[0] == "apply" for s in out) >= most - 1 or n >= len(actions) and at >= len(records):
            break
        if action[0] == "batch" and at < len(records):
            out.append(("apply", records[at:at + action[1]], True))
            at += action[1]
        elif action[0] == "replay" and at:
            first = max(0, at - action[1])
            out.append(("apply", records[first:min(at, first + action[2])], False))
        elif action[0] == "restart":
            out.append(("restart",))
    if at < len(records):
        out.append(("apply", records[at:], True))
    return out


def strategies(max_statements: int = 10, max_actions: int = 6, keys: int = 4):
    """Hypothesis strategies: (source statements, partitions, swaps, actions); they shrink
    towards few inserts in one partition applied in one batch."""
    from hypothesis import strategies as st

    key = st.integers(1, keys)
    value = st.sampled_from(["a", "b", None])
    number = st.integers(0, 3)
    insert = st.tuples(st.just("insert"), key, value, number)
    update = st.tuples(st.just("update"), key, value | st.just(PLACEHOLDER), number)
    delete = st.tuples(st.just("delete"), key)
    redeliver = st.tuples(st.just("redeliver"), st.integers(1, 6))
    # Weighted (one_of picks a branch evenly): a truncate empties the table, so it comes rarely.
    statement = st.one_of(
        insert, update, delete, redeliver, insert, update, delete, redeliver,
        st.tuples(st.just("move"), key, key, st.booleans()),
        st.tuples(st.just("unseen"), key, number),
        st.tuples(st.just("truncate")),
    )
    action = st.one_of(st.tuples(st.just("batch"), st.integers(1, 2)),
                       st.tuples(st.just("replay"), st.integers(1, 16), st.integers(1, 4)),
                       st.tuples(st.just("restart")))
    return st.tuples(st.lists(statement, min_size=1, max_size=max_statements), st.integers(1, 2),
                     st.lists(st.integers(0, 30), max_size=4), st.lists(action, max_size=max_actions))


def history(statements: list[tuple], partitions: int, swaps: list[int], actions: list[tuple]):
    """(the source after `statements`, the steps that apply its records)."""
    source = Source(partitions=partitions)
    for s in statements:
        source.run(s)
    return source, plan_steps(interleave(source.log, swaps), actions)
