"""A micro-batch of one table as a plan: from the batch's stats and what the target holds,
everything the batch will do, decided before anything is written and with no I/O. The
applier (jobs/apply.py) carries the plan out step by step."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from cdc.control import commits
from cdc.planning import unchanged
from cdc.planning.merge import KEY_BUCKETS

SMALL_BATCH_RECORDS = KEY_BUCKETS // 16  # up to this many records, a MERGE names its keys' buckets
DIRECT_RECORDS = 50_000  # up to this many records, a batch may be written directly (by one task)
# Up to this many records, a batch is also decoded by that task, with no query planned. A
# batch of 20,000 changes of 4.5 KB took the task 1.3-1.9 s on one core, and a query 1.7-2.1 s
# on two (about 0.5 s of it planning); a much bigger batch goes faster as a query. Among many
# tables' batches, whose tasks hold the cores anyway, the task was 5-8x faster than a query's
# decode step.
BATCH_TASK_RECORDS = 32_768


@dataclass(frozen=True)
class PartitionStats:
    """What one Kafka partition's records of the batch hold (the applier's one aggregation)."""

    partition: int
    first: int
    last: int
    records: int
    position: str | None = None  # the highest source position
    source_ts_ms: int | None = None  # the source time of a change, at most
    errors: int = 0
    deletes: int = 0
    truncates: tuple[tuple[str, int | None], ...] = ()  # (position, source time in ms)
    schemas: frozenset[str] = frozenset()
    buckets: frozenset[int] = frozenset()
    placeholders: int = 0  # creates and updates lacking an unchanged value (TOAST)
    moved_creates: int = 0
    moved_deletes: int = 0
    moved_adds: int = 0
    moved_places: int = 0
    transaction: tuple[str, int] | None = None  # the change at `position`: Debezium's transaction id, its order


@dataclass(frozen=True)
class Target:
    """What the plan needs to know of the table and its target."""

    topic: str
    topic_id: str | None
    job: str
    mode: str  # upsert, soft_delete or history
    toast: tuple[str, ...]  # the columns whose unchanged values Debezium may leave out
    bucket_column: str | None  # the expression of a key's bucket, when the target is bucketed
    committed: dict[int, int]  # the offsets its last commit carries
    summary: dict | None  # its last commit's summary
    record_schemas: dict[int, list] | None = None  # the record schemas judged so far (JSON without a registry)
    refusal: str | None = None  # why the target takes no direct write (sinks/direct.py; None: it does)


@dataclass(frozen=True)
class Changes:
    """Apply the changes with positions after `after` and before `before` (each None: no
    bound) in one commit; the `final` one carries the batch's offsets, and keeps tombstones."""

    after: str | None = None
    before: str | None = None
    final: bool = True


@dataclass(frozen=True)
class Truncate:
    """The target's rows written before `position` go (upsert) or end (soft_delete, history)."""

    position: str
    at_ms: int | None


@dataclass(frozen=True)
class BatchPlan:
    """What a batch does, in order: set aside its dead letters, then each step."""

    props: dict[str, str]  # the final commit's summary properties (offsets, position, identity)
    steps: tuple[Changes | Truncate, ...]  # empty: nothing new; a commit of `props` alone, if any
    dead_letters: int = 0
    buckets: tuple[str, tuple[int, ...]] | None = None  # a small batch's key buckets (see merge.merge_sql)
    key_changes: bool = False  # a key change's values are looked up in the target
    placeholders: bool = False  # unchanged values are looked up in the target
    deletes: bool = False  # the delete memory takes the batch's deletes
    direct: tuple[str, ...] = ()  # why the batch cannot be written directly (empty: it can)

    @property
    def empty(self) -> bool:
        return not self.steps


def plan_batch(stats: list[PartitionStats], target: Target, batch_id: int,
               planned_end: dict[int, int]) -> BatchPlan | None:
    """The batch's plan; None when it holds nothing new and its planned end is not ahead of
    the target's offsets (nothing to commit)."""
    committed = target.committed
    if not stats:
        # Nothing new (a re-run batch the table holds, or offsets without records): the
        # planned end is recorded so the table's offsets keep up with the checkpoint's.
        ahead = {p: o for p, o in planned_end.items() if o > committed.get(p, 0)}
        if not ahead:
            return None
        return BatchPlan(commits.summary_properties(target.topic, {**committed, **ahead}, batch_id, target.job,
                                                    None, None, target.summary, target.topic_id), ())
    offsets = commits.merged_offsets(committed, [commits.PartitionRange(s.partition, s.first, s.last)
                                                 for s in stats])
    for p, o in planned_end.items():  # compacted topics leave gaps: the planned end is exact
        offsets[p] = max(offsets.get(p, 0), o)
    last = max((s for s in stats if s.position), key=lambda s: s.position, default=None)
    times = [s.source_ts_ms for s in stats if s.source_ts_ms is not None]
    props = commits.summary_properties(target.topic, offsets, batch_id, target.job,
                                       last.position if last else None, max(times) if times else None,
                                       target.summary, target.topic_id, last.transaction if last else None)
    if target.record_schemas:
        props[commits.RECORD_SCHEMAS] = json.dumps({str(k): v for k, v in target.record_schemas.items()})
    buckets = None
    if target.bucket_column and sum(s.records for s in stats) <= SMALL_BATCH_RECORDS:
        found = tuple(sorted({b for s in stats for b in s.buckets}))
        buckets = (target.bucket_column, found) if found else None
    truncates = sorted({t for s in stats for t in s.truncates if t[0]})
    deletes = any(s.deletes for s in stats) and target.mode != "history"  # history keeps its own
    plan = BatchPlan(props, truncate_steps(truncates, target.mode), dead_letters=sum(s.errors for s in stats),
                     buckets=buckets, key_changes=bool(target.toast) and unchanged.needs_resolution(stats),
                     placeholders=bool(target.toast) and any(s.placeholders for s in stats), deletes=deletes)
    return replace(plan, direct=not_direct(plan, target, sum(s.records for s in stats)))


def truncate_steps(truncates: list[tuple[str, int | None]], mode: str) -> tuple[Changes | Truncate, ...]:
    """The steps of a batch with `truncates` (position, time), in position order. Upsert:
    what precedes the last truncate is gone. History and soft_delete keep what a truncate
    ends: the changes before each truncate are applied first (position-guarded, so a re-run
    batch adds nothing), then the truncate, then the changes after it."""
    if not truncates:
        return (Changes(),)
    if mode == "upsert":
        return (Truncate(*truncates[-1]), Changes(after=truncates[-1][0]))
    steps: list[Changes | Truncate] = []
    lower = None
    for position, at_ms in truncates:
        steps += [Changes(after=lower, before=position, final=False), Truncate(position, at_ms)]
        lower = position
    return (*steps, Changes(after=lower))


def not_direct(plan: BatchPlan, target: Target, records: int) -> tuple[str, ...]:
    """Why the batch's changes cannot be written without a MERGE (empty: they can): the
    direct write takes an upsert target's last change per key whose rows are whole (its
    deletes remembered by an append of its own), into a target it writes exactly
    (`Target.refusal`), in one task."""
    return tuple(reason for reason, holds in (
        (target.refusal, target.refusal is not None),
        (f"{target.mode} mode", target.mode != "upsert"),
        ("a truncate", any(isinstance(s, Truncate) for s in plan.steps)),
        ("a key change", plan.key_changes),
        ("unchanged values to look up", plan.placeholders),
        (f"more than {DIRECT_RECORDS:,} records", records > DIRECT_RECORDS),
    ) if holds)
