"""The systems benchmark's backlog, as plain changes, and the final table they must give.

Every change is `(op, id, v)`. The backlog holds what peers get wrong: several changes per
key, deletes followed by re-inserts of the same key, and updates whose `v` is Debezium's
placeholder for an unchanged TOASTed value (the correct result keeps the stored `v`)."""
from __future__ import annotations

import random
from typing import Iterator, NamedTuple

UNAVAILABLE = "__debezium_unavailable_value"


class Change(NamedTuple):
    op: str
    id: int
    v: str


def n_of(row_id: int) -> str:
    """`n` as bench.workload.Events writes it for a key."""
    return f"{row_id % 100000}.25"


def load(keys: int) -> Iterator[Change]:
    """An insert of every key, with the values a bulk load of the benchmark's shape writes
    (bench.workload.initial_rows: `v` 'initial'): what the merge workload's target holds
    before its changes."""
    return (Change("c", row_id, "initial") for row_id in range(keys))


def changes(keys: int, count: int, seed: int = 11, unavailable: float = 0.15,
            delete: float = 0.15, loaded: bool = False) -> Iterator[Change]:
    """`count` changes over `keys` keys, starting from an empty table (`loaded`: one holding
    every key, as after `load`): a key not in the table is inserted, one in it is updated
    (its `v` the placeholder at rate `unavailable`) or deleted (at rate `delete`), so a
    deleted key comes back with a later insert."""
    rng = random.Random(seed)
    live: set[int] = set(range(keys)) if loaded else set()
    for i in range(count):
        row_id = rng.randrange(keys)
        if row_id not in live:
            live.add(row_id)
            yield Change("c", row_id, f"i{i}")
            continue
        r = rng.random()
        if r < delete:
            live.discard(row_id)
            yield Change("d", row_id, f"d{i}")
        elif r < delete + unavailable:
            yield Change("u", row_id, UNAVAILABLE)
        else:
            yield Change("u", row_id, f"u{i}")


def full_identity(stream) -> Iterator[tuple[Change, str | None]]:
    """Each change with the `v` its row held before it (None for an insert), as a table of
    `REPLICA IDENTITY FULL` gives them: an update's and a delete's `before` is the whole old
    row, and Debezium copies an unchanged TOASTed value from it into `after`, so the
    placeholder never appears."""
    stored: dict[int, str] = {}
    for op, row_id, v in stream:
        before = stored.get(row_id)
        if op == "d":
            stored.pop(row_id, None)
            yield Change(op, row_id, v), before
            continue
        if v == UNAVAILABLE:
            v = before
        stored[row_id] = v
        yield Change(op, row_id, v), before


def truth(stream) -> dict[int, tuple[str, str]]:
    """The final table, `id -> (v, n)`, of changes applied in order: the last change per key
    wins, a delete removes the row, the placeholder keeps the stored `v`."""
    table: dict[int, tuple[str, str]] = {}
    for op, row_id, v in stream:
        if op == "d":
            table.pop(row_id, None)
        elif v == UNAVAILABLE and row_id in table:
            table[row_id] = (table[row_id][0], n_of(row_id))
        else:
            table[row_id] = (v, n_of(row_id))
    return table


def stats(stream) -> dict:
    """How many of each case the backlog holds."""
    seen, deleted = set(), set()
    counts = {"events": 0, "inserts": 0, "updates": 0, "deletes": 0, "unavailable": 0, "reinserts": 0}
    for op, row_id, v in stream:
        counts["events"] += 1
        if op == "c":
            counts["inserts"] += 1
            counts["reinserts"] += row_id in deleted
        elif op == "d":
            counts["deletes"] += 1
            deleted.add(row_id)
        else:
            counts["updates"] += 1
            counts["unavailable"] += v == UNAVAILABLE
        seen.add(row_id)
    counts["keys_changed"] = len(seen)
    return counts
