"""A commit that ends exactly where a source count was taken, asked of a running job.

`cdc reconcile` compares a table's rows at one source position with the target's at the
same position. A table that changes every second has no commit there unless asked: its
batches end wherever Kafka's end was when they were planned. So the reconciler asks, as
a checkpoint barrier does:

1. it files a request for the table (`hold`): the table's job waits before its next batch
   (at most `HOLD_S`), so that nothing after the count is applied while it is taken;
2. it counts the source, waits until Debezium has captured every change the count
   reflects, and finds each Kafka partition's first record the count does not hold (a
   binary search: control/kafka.py `RecordProbe`);
3. it writes those offsets into the request (`place`): the job applies the records before
   them in one commit and the rest in the next (`split_at`), so the table's history has a
   commit that ends exactly at the count;
4. it compares there (time travel) and withdraws the request.

A batch planned too early to hold every counted record, or a job that did not wait, leaves
no such commit: the reconciler sees that (`missed`) and counts again. The request is a
file under the state directory, as a hand-over's is (control/jobstate.py); one that its
process left behind is ignored."""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from cdc.control.jobstate import alive

HOLD_S = 20.0  # the longest a job waits for a reconciler to place its barrier
POLL_S = 0.05


@dataclass(frozen=True)
class Barrier:
    """A reconciler's request for one table: who asked (`pid`, `id`), until when a job may
    wait for it (epoch seconds), and the offsets (partition: offset) a commit is to end at,
    None while it counts."""

    id: str
    pid: int
    hold_until: float
    offsets: dict[int, int] | None = None


def _file(state_dir: Path, table: str) -> Path:
    return state_dir / "barriers" / f"{table}.json"


def _write(state_dir: Path, table: str, barrier: Barrier) -> None:
    f = _file(state_dir, table)
    f.parent.mkdir(parents=True, exist_ok=True)
    doc = {"id": barrier.id, "pid": barrier.pid, "hold_until": barrier.hold_until,
           "offsets": None if barrier.offsets is None else {str(p): o for p, o in barrier.offsets.items()}}
    tmp = f.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(f)


def hold(state_dir: Path, table: str, hold_s: float = HOLD_S, now: float | None = None) -> Barrier:
    """File a request: the table's job waits before its next batch until it is placed,
    withdrawn, or `hold_s` has passed."""
    barrier = Barrier(uuid.uuid4().hex[:12], os.getpid(), (time.time() if now is None else now) + hold_s)
    _write(state_dir, table, barrier)
    return barrier


def place(state_dir: Path, table: str, barrier: Barrier, offsets: dict[int, int]) -> Barrier:
    """The offsets a commit is to end at, given to the job."""
    placed = Barrier(barrier.id, barrier.pid, barrier.hold_until, dict(offsets))
    _write(state_dir, table, placed)
    return placed


def withdraw(state_dir: Path, table: str, barrier: Barrier) -> None:
    """The request gone (only this one: a newer reconciler's stays)."""
    found = read(state_dir, table)
    if found is not None and found.id == barrier.id:
        _file(state_dir, table).unlink(missing_ok=True)


def read(state_dir: Path | None, table: str) -> Barrier | None:
    """The table's request, None when there is none or its process has ended."""
    if state_dir is None:
        return None
    try:
        doc = json.loads(_file(state_dir, table).read_text())
        offsets = doc.get("offsets")
        barrier = Barrier(str(doc["id"]), int(doc["pid"]), float(doc["hold_until"]),
                          None if offsets is None else {int(p): int(o) for p, o in offsets.items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return barrier if alive(barrier.pid) else None


def placed(state_dir: Path | None, table: str, clock=time.time, sleep=time.sleep) -> dict[int, int] | None:
    """For a job about to apply a batch of the table: the offsets a reconciler asks a commit
    to end at. A request still counting is waited for (until placed, withdrawn, or its hold
    ends); None when there is none to honour."""
    while True:
        barrier = read(state_dir, table)
        if barrier is None:
            return None
        if barrier.offsets is not None:
            return barrier.offsets
        if clock() >= barrier.hold_until:
            return None
        sleep(POLL_S)


def split_at(committed: dict[int, int], end: dict[int, int], barrier: dict[int, int]) -> dict[int, int] | None:
    """Where a batch from the table's `committed` offsets to `end` is to be cut so that one
    commit ends at `barrier`: the offsets its first commit ends at; None when it needs no
    cut (it ends at or before the barrier, or the table is at or past it)."""
    parts = set(barrier) | set(end)
    start = {p: committed.get(p, 0) for p in parts}
    stop = {p: max(end.get(p, start[p]), start[p]) for p in parts}
    at = {p: barrier.get(p, stop[p]) for p in parts}
    if any(start[p] > at[p] for p in parts) or all(start[p] == at[p] for p in parts):
        return None  # past it (the reconciler counts again), or at it already
    if all(stop[p] <= at[p] for p in parts):
        return None  # the batch ends at or before it: its commit is the one, or one before it
    return {p: min(at[p], stop[p]) for p in parts}


def at_barrier(offsets: dict[int, int], barrier: dict[int, int]) -> bool:
    """Whether a commit's offsets end exactly at the barrier (a partition absent from one
    is at 0 in it)."""
    return all(offsets.get(p, 0) == barrier.get(p, 0) for p in set(offsets) | set(barrier))


def missed(offsets: dict[int, int], barrier: dict[int, int]) -> bool:
    """Whether a table whose last commit carries `offsets` went past the barrier."""
    return any(o > barrier.get(p, 0) for p, o in offsets.items())


def first_uncounted(low: int, high: int, counted) -> int:
    """The first offset in [low, high) whose record a count does not hold, `high` when it
    holds them all: the records it holds are a prefix (`counted(offset)`, of the record at
    that offset or the first kept after it), found in log2(high - low) reads."""
    while low < high:
        middle = (low + high) // 2
        if counted(middle):
            low = middle + 1
        else:
            high = middle
    return low
