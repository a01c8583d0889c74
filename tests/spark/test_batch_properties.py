"""One specification of a batch, checked on generated histories: a source's statements
(inserts, updates, deletes and their tombstones, re-inserts, truncates, unchanged TOASTed
values, key changes, connector restarts that send records again) captured into a topic of one
or two partitions, cut into batches with replays (`cdc replay`: a window of records applied
again, nothing skipped by the committed offsets) and restarts (a new applier on the same
target), applied through the real apply step to several targets: an Iceberg one written
directly where the plan allows, an Iceberg one by the MERGE alone, a Delta one. After each
batch every target must hold what the reference model (tests/model.py) says, row for row (read
back by pyiceberg and delta-rs), and the same dead letters.

`make test` runs an explicit history that meets every rule, in each mode, on Iceberg (about
90 s: each batch is real commits); `make test-long` (the `long` marker) runs it on Delta too,
and CDC_PROPERTY_EXAMPLES (default 6; more need pytest's `--timeout 0`) random ones in each
mode, on every target, and shrinks a failing one (up to five minutes). A failure prints the
history and its batches, one record a line, and what the target and the model hold."""
from __future__ import annotations

import datetime as dt
import itertools
import json
import os
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, Phase, example, given, note, settings

from cdc.jobs.apply import TableApplier
from tests import model
from tests.model import PLACEHOLDER, TOMBSTONE, Record, Target, strategies
from tests.spark.test_merge_semantics import Harness

_examples = itertools.count()
LONG_EXAMPLES = int(os.environ.get("CDC_PROPERTY_EXAMPLES", "6"))
SLOW = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large,
        HealthCheck.large_base_example]
# The targets: (sink, direct writes). The direct path takes upsert batches only.
DIRECT, MERGE, DELTA = ("iceberg", True), ("iceberg", False), ("delta", False)
# A history that meets every rule: a remembered delete and a truncate keeping a replayed older
# create out, unchanged values kept, a key change within a batch, a connector's restart sending
# records again, a value nobody has (a dead letter), two partitions, a new applier midway.
EVERY_RULE = ([("insert", 1, "a", 1), ("insert", 2, "b", 2), ("update", 1, PLACEHOLDER, 2), ("delete", 2),
               ("truncate",), ("insert", 3, "a", 1), ("move", 3, 4, True), ("update", 4, "b", 3), ("redeliver", 3),
               ("unseen", 1, 0), ("delete", 4)], 2, [],
              [("batch", 2), ("batch", 3), ("replay", 5, 2), ("batch", 1), ("replay", 6, 2), ("restart",),
               ("batch", 4), ("batch", 3), ("batch", 6)])


def kafka_record(r: Record, topic: str) -> tuple:
    """`r` as the Kafka source gives it (JSON converter with schemas, as tests/events.py writes)."""
    wrap = (lambda payload: json.dumps({"schema": {"type": "struct"}, "payload": payload}).encode())
    key = None if r.key is None else wrap({"id": r.key})
    headers = []
    if r.moved_to is not None:
        headers.append(("__debezium.newkey", json.dumps({"id": r.moved_to}).encode()))
    if r.moved_from is not None:
        headers.append(("__debezium.oldkey", json.dumps({"id": r.moved_from}).encode()))
    if r.op == TOMBSTONE:
        return key, None, topic, r.partition, r.offset, headers
    source = {"lsn": r.lsn, "ts_ms": r.ts_ms, "sequence": json.dumps([str(r.commit), str(r.lsn)])}
    row = {"id": r.key, "v": r.v, "n": r.n}
    value = {"before": {"id": r.key} if r.op == "d" else None, "after": row if r.op in ("c", "u", "r") else None,
             "source": source, "op": r.op, "ts_ms": r.ts_ms}
    return key, wrap(value), topic, r.partition, r.offset, headers


def normal(rows: list[dict]) -> list[dict]:
    """Rows as the model writes them: times in epoch milliseconds, numbers as ints."""
    def value(v):
        if isinstance(v, dt.datetime):
            return int((v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).timestamp() * 1000)
        if isinstance(v, Decimal):
            return int(v)
        return v
    return sorted(({k: value(v) for k, v in r.items()} for r in rows),
                  key=lambda r: (r["id"], r["_cdc_position"] or ""))


def restarted(a: TableApplier, spark) -> TableApplier:
    """A new applier of the same table, as a new job process makes it (nothing kept in memory)."""
    return TableApplier(a.name, a.target_ref, a.topic, a.columns, a.key, job=a.job, deletes_ref=a.deletes_ref,
                        delete_horizon_hours=a.delete_horizon_hours, on_error=a.on_error,
                        dead_letters_ref=a.dead_letters_ref, mode=a.mode, direct_writes=a.direct_writes,
                        buckets_from_bytes=a.buckets_from_bytes).prepare(spark)


def describe(source, steps) -> str:
    """The history and its batches, one record a line, for a failing example's report."""
    lines = [f"source holds at the end: {source.live}"]
    for i, step in enumerate(steps):
        if step[0] == "restart":
            lines.append(f"step {i}: restart")
            continue
        lines.append(f"step {i}: {'batch' if step[2] else 'replay (nothing skipped)'}")
        for r in step[1]:
            extra = "".join(f" {k}={getattr(r, k)}" for k in ("moved_to", "moved_from") if getattr(r, k) is not None)
            lines.append(f"    p{r.partition}@{r.offset} {r.op} id={r.key} v={r.v!r} n={r.n} lsn={r.lsn}{extra}")
    return "\n".join(lines)


def check(scratch, tmp_path, mode: str, kinds: tuple, case) -> None:
    """Apply the generated `case` to targets of `kinds` in `mode` and to the model, comparing after each batch."""
    spark, catalog = scratch
    source, steps = model.history(*case)
    note(describe(source, steps))
    n = next(_examples)
    targets = []
    for sink, direct in kinds:
        h = Harness(spark, catalog, f"bp{n}_{sink}{'_direct' if direct else ''}", sink=sink, delta_root=tmp_path,
                    mode=mode)
        h.applier.direct_writes = direct
        targets.append(h)
    expected = Target(mode)
    for i, step in enumerate(steps):
        if step[0] == "restart":
            for h in targets:
                h.applier = restarted(h.applier, spark)
            continue
        _, records, skip = step
        model.apply(expected, records, skip)
        want, dead = expected.table(), sorted(expected.dead)
        for h in targets:
            h.applier.skip_committed = skip
            try:
                h.apply([kafka_record(r, h.topic.name) for r in records])
            finally:
                h.applier.skip_committed = True
            got = normal(h._read())
            label = f"{h.sink}{' direct' if h.applier.direct_writes else ''} after step {i}"
            assert got == want, f"{label}: the target holds\n{got}\nthe model\n{want}"
            letters = sorted((d["partition"], d["offset"], d["error_class"]) for d in h.dead_letters())
            assert letters == dead, f"{label}: dead letters {letters}, the model's {dead}"


def property_test(mode: str, kinds: tuple, examples: int, derandomize: bool, explicit: tuple = (), **limits):
    """A test of `examples` generated histories (and the `explicit` ones) into targets of `kinds`."""
    @settings(max_examples=max(1, examples), deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=SLOW, print_blob=True,
              phases=list(Phase) if examples else [Phase.explicit])
    @given(case=strategies(**limits))
    def test(scratch, tmp_path, case):
        check(scratch, tmp_path, mode, kinds, case)
    for case in explicit:
        test = example(case=case)(test)
    test.__doc__ = f"Histories into {mode} targets ({', '.join(s + (' direct' if d else '') for s, d in kinds)}) " \
                   "equal the model after every batch."
    return test


# The smallest histories that tell a MERGE without its remembered-delete guard, or without its
# truncate floor, from the model (found by shrinking against a copy of the model with the guard
# dropped): a connector's restart sends a create again after its key's delete; an update of a
# row the topic never had, again after a truncate.
RESURRECTED = ([("insert", 1, "a", 0), ("delete", 1), ("redeliver", 2)], 1, [], [("batch", 1)])
BELOW_THE_FLOOR = ([("unseen", 1, 0), ("truncate",), ("redeliver", 2)], 1, [], [("batch", 1)])

# `make test` (about 90 s): the history that meets every rule in each mode, on Iceberg (the
# direct path and the MERGE in upsert mode; the MERGE in the others). Delta's MERGE (3 to 6 s a
# batch) and the generated histories are `make test-long`'s.
test_upsert_targets_follow_the_model = property_test("upsert", (DIRECT, MERGE), 0, True, (EVERY_RULE,))
test_history_targets_follow_the_model = property_test("history", (MERGE,), 0, True, (EVERY_RULE,))
test_soft_delete_targets_follow_the_model = property_test("soft_delete", (MERGE,), 0, True, (EVERY_RULE,))

# `make test-long`: CDC_PROPERTY_EXAMPLES random ones in each mode, on every target (a minute or
# so each, with Delta; a failing one shrinks for up to five minutes); more than a few need
# pytest's `--timeout 0`.
test_upsert_targets_follow_the_model_long = pytest.mark.long(
    property_test("upsert", (DIRECT, MERGE, DELTA), LONG_EXAMPLES, False,
                  (EVERY_RULE, RESURRECTED, BELOW_THE_FLOOR)))
test_history_targets_follow_the_model_long = pytest.mark.long(
    property_test("history", (MERGE, DELTA), LONG_EXAMPLES, False, (EVERY_RULE,)))
test_soft_delete_targets_follow_the_model_long = pytest.mark.long(
    property_test("soft_delete", (MERGE, DELTA), LONG_EXAMPLES, False, (EVERY_RULE,)))
