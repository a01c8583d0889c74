"""Unchanged TOASTed values that a change does not carry (PostgreSQL logs none; Debezium
sends its placeholder): where a batch finds them, and what it does without them.

A key change arrives as a delete of the old key (`_key_moved`) and a create of the new
one (`_from_<i>`: the old key). The create's unchanged values are the old row's, as of just
before the change: the batch's newest earlier change of the old key that carries the
value (a key-changing create resolved first, so chains 1 -> 2 -> 3 follow), else the
target's row of the old key (history: its newest earlier version), else the delete
memory's copy of the moved row (`_cdc_moved`), kept when a batch ends between the delete
and its create. A change whose value is found nowhere goes to the dead letters rather
than writing a null: see `unknown_values`.
"""
from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from cdc.planning.position import source_part
from cdc.planning.sql import q

# What a candidate says of a column: the value, nothing known (the row was deleted, or a
# resolved move did not find it), or "ask the key this row moved from" (resolved first).
KNOWN, UNKNOWN, CHAIN = 2, 1, 0
PLACE = len(source_part("0" * 64))  # a change's place in the source log: its position without Kafka's tie-break
MOVED_ROW_UNKNOWN = "moved-row-unknown"
VALUE_UNKNOWN = "unchanged-value-unknown"
MAX_ROUNDS = 64  # chains of key changes within one batch are resolved one link per round


def _place(column: str):
    return F.substring(F.coalesce(F.col(column), F.lit("")), 1, PLACE)


def _any(flags: list) -> F.Column:
    return reduce(lambda a, b: a | b, flags, F.lit(False))


def moved_json_type(events: DataFrame, toast: tuple[str, ...]) -> StructType:
    """The schema of `_cdc_moved`: per column, a struct whose `v` is the value (a field
    missing or null: not known)."""
    types = {f.name: f.dataType for f in events.schema.fields}
    return StructType([StructField(c, StructType([StructField("v", types[c])])) for c in toast])


def needs_resolution(stats: list) -> bool:
    """Whether a batch (its per-partition stats) holds a key change whose values are to be
    looked up: a create with a placeholder, or a delete whose create is not in the batch."""
    creates = sum(s.moved_creates or 0 for s in stats)
    pairs = [(s.moved_deletes or 0, s.moved_adds or 0, s.moved_places or 0) for s in stats]
    unpaired = sum(d for d, _, _ in pairs) != sum(a for _, a, _ in pairs) or reduce(
        lambda a, b: a ^ b, (x for _, _, x in pairs), 0) != 0
    return creates > 0 or unpaired


def stats_columns(toast: tuple[str, ...]) -> list:
    """Per-partition aggregates of the batch's stats that `needs_resolution` and
    `unknown_values` read (a key change's two events share a place: their hashes cancel)."""
    lacking = _any([F.col(f"_unavailable_{i}") for i in range(len(toast))])
    place_hash = F.xxhash64(_place("_position"))
    return [
        F.sum((F.col("_op").isin("c", "u", "r") & lacking).cast("int")).alias("placeholders"),
        F.sum((F.col("_moved_from") & lacking).cast("int")).alias("moved_creates"),
        F.sum(F.col("_key_moved").cast("int")).alias("moved_deletes"),
        F.sum(F.col("_moved_from").cast("int")).alias("moved_adds"),
        F.bit_xor(F.when(F.col("_key_moved") | F.col("_moved_from"), place_hash)).alias("moved_places"),
    ]


def resolve_moves(events: DataFrame, key: tuple[str, ...], toast: tuple[str, ...], stored: DataFrame,
                  memory: DataFrame | None, remember: bool, persisted: list) -> tuple[DataFrame, DataFrame | None]:
    """(`events` with the unchanged values of key-changing creates filled in, and for each
    key-changing delete whose create is not in the batch, its row's values as `_moved`
    JSON for the delete memory, or None when `remember` is false).

    `stored`: the target's rows (key, toast columns, `_cdc_position`, `_gone`: a row that
    holds nothing, a soft-deleted one); `memory`: the delete memory's rows with `_cdc_moved`.
    DataFrames cached on the way are appended to `persisted` (the caller unpersists them)."""
    n = len(toast)
    moved_type = moved_json_type(events, toast)
    lacking = [F.col(f"_unavailable_{j}") for j in range(n)]
    requests = events.where(F.col("_moved_from") & _any(lacking)).select(
        F.col("_partition").alias("_rp"), F.col("_offset").alias("_ro"), F.lit(False).alias("_rdelete"),
        *[F.col(f"_from_{i}").alias(f"_q{i}") for i in range(len(key))], _place("_position").alias("_qat"),
        *[F.col(f"_unavailable_{j}").alias(f"_need_{j}") for j in range(n)])
    if remember:
        paired = events.where("_moved_from").select(_place("_position").alias("_qat"))
        deletes = events.where("_key_moved").select(
            F.col("_partition").alias("_rp"), F.col("_offset").alias("_ro"), F.lit(True).alias("_rdelete"),
            *[F.col(q(k)).alias(f"_q{i}") for i, k in enumerate(key)], _place("_position").alias("_qat"),
            *[F.lit(True).alias(f"_need_{j}") for j in range(n)]).join(paired, "_qat", "left_anti")
        requests = requests.unionByName(deletes)
    requests = requests.persist()
    persisted.append(requests)
    # The lookups are small: broadcast, so the batch and the target are not shuffled for them.
    wanted = F.broadcast(requests.select(*[F.col(f"_q{i}").alias(k) for i, k in enumerate(key)]).distinct())
    fixed = _stored_candidates(stored.join(wanted, list(key), "left_semi"), key, toast)
    if memory is not None:
        fixed = fixed.unionByName(_memory_candidates(memory.join(wanted, list(key), "left_semi"), key, toast,
                                                     moved_type))
    fixed = fixed.persist()
    persisted.append(fixed)
    # The batch's candidates are few (the wanted keys' changes): each round settles the moves
    # whose answers are known there, not the whole batch.
    batch = _batch_candidates(events, wanted, key, toast).persist()
    persisted.append(batch)
    pending, settled = requests, []
    for _ in range(MAX_ROUNDS):
        # Each round's results are checkpointed (a few rows): a round's plan then starts from
        # them, not from every round before it, so plans stay small however long the chain.
        winners = _winners(pending, batch.drop("_cp", "_co").unionByName(fixed), key, n).localCheckpoint()
        blocked = _any([F.col(f"_need_{j}") & (F.col(f"_s{j}") == CHAIN) for j in range(n)])
        pending = winners.where(blocked).select(*requests.columns)
        if pending.isEmpty():
            settled.append(winners)
            break
        done = winners.where(~blocked)
        settled.append(done)
        batch = _settle(batch, done.where(~F.col("_rdelete")), n).localCheckpoint()
    resolved = reduce(DataFrame.unionByName, settled)
    events = _filled(events, resolved.where(~F.col("_rdelete")), toast)
    moved = None
    if remember:
        fields = [F.when(F.col(f"_s{j}") == KNOWN, F.struct(F.col(f"_v{j}").alias("v"))).alias(c)
                  for j, c in enumerate(toast)]
        moved = resolved.where("_rdelete").select(
            F.col("_rp").alias("_partition"), F.col("_ro").alias("_offset"),
            F.to_json(F.struct(*fields)).alias("_moved"))
    return events, moved


def _candidate(key: tuple[str, ...], position, memory: bool, states: list, values: list) -> list:
    return ([F.col(q(k)).alias(f"_c{i}") for i, k in enumerate(key)]
            + [position.alias("_cpos"), F.lit(memory).alias("_cmem")]
            + [s.cast("int").alias(f"_s{j}") for j, s in enumerate(states)]
            + [v.alias(f"_v{j}") for j, v in enumerate(values)])


def _batch_candidates(events: DataFrame, wanted: DataFrame, key: tuple[str, ...], toast: tuple[str, ...]):
    """The batch's changes of the wanted keys: per column, known (a change that carries the
    value), unknown (a delete; a settled move without it), a chain (an unsettled move
    without it) or nothing to say (an update without it: look further back)."""
    upsert = F.col("_op").isin("c", "u", "r")
    states = []
    for j in range(len(toast)):
        lacks = F.col(f"_unavailable_{j}")
        states.append(F.when(F.col("_op") == "d", UNKNOWN).when(upsert & ~lacks, KNOWN)
                      .when(F.col("_moved_from"), CHAIN))
    return events.where(F.col("_op").isin("c", "u", "r", "d") & F.col("_error").isNull()).join(
        wanted, list(key), "left_semi").select(
        *_candidate(key, F.col("_position"), False, states, [F.col(q(c)) for c in toast]),
        F.col("_partition").alias("_cp"), F.col("_offset").alias("_co"))


def _settle(batch: DataFrame, done: DataFrame, n: int) -> DataFrame:
    """The batch's candidates with the settled moves' answers: what a chain link asked is
    now known, or known to be unknown."""
    answers = done.select("_rp", "_ro", *[F.col(f"_s{j}").alias(f"_a{j}") for j in range(n)],
                          *[F.col(f"_v{j}").alias(f"_b{j}") for j in range(n)])
    joined = batch.join(F.broadcast(answers), (F.col("_cp") == F.col("_rp")) & (F.col("_co") == F.col("_ro")),
                        "left")
    settled = {}
    for j in range(n):
        asked = F.col("_rp").isNotNull() & (F.col(f"_s{j}") == CHAIN)
        settled[f"_s{j}"] = F.when(asked, F.when(F.col(f"_a{j}") == KNOWN, KNOWN).otherwise(UNKNOWN)).otherwise(
            F.col(f"_s{j}"))
        settled[f"_v{j}"] = F.when(asked, F.col(f"_b{j}")).otherwise(F.col(f"_v{j}"))
    return joined.withColumns(settled).select(*batch.columns)


def _stored_candidates(stored: DataFrame, key: tuple[str, ...], toast: tuple[str, ...]) -> DataFrame:
    state = F.when(F.col("_gone"), UNKNOWN).otherwise(KNOWN)
    return stored.select(*_candidate(key, F.coalesce(F.col("_cdc_position"), F.lit("")), False,
                                     [state] * len(toast), [F.col(q(c)) for c in toast]))


def _memory_candidates(memory: DataFrame, key: tuple[str, ...], toast: tuple[str, ...], moved_type: StructType):
    row = F.from_json(F.col("_cdc_moved"), moved_type)
    states = [F.when(row.getField(c).isNotNull(), KNOWN).otherwise(UNKNOWN) for c in toast]
    return memory.select(*_candidate(key, F.col("_cdc_position"), True, states,
                                     [row.getField(c).getField("v") for c in toast]))


def _winners(pending: DataFrame, candidates: DataFrame, key: tuple[str, ...], n: int) -> DataFrame:
    """Per pending request and column, the newest candidate of its key before its place
    (the memory's copy: at its place) that says something: `_s<j>` and `_v<j>`, with
    `_s<j>` UNKNOWN when nothing does."""
    place = F.substring(F.col("_cpos"), 1, PLACE)
    on = reduce(lambda a, b: a & b, [F.col(f"_q{i}") == F.col(f"_c{i}") for i in range(len(key))])
    on = on & ((place < F.col("_qat")) | (F.col("_cmem") & (place == F.col("_qat"))))
    joined = pending.join(candidates, on, "left")
    best = [F.max_by(F.when(F.col(f"_s{j}").isNotNull(), F.struct(F.col(f"_s{j}").alias("s"),
                                                                  F.col(f"_v{j}").alias("v"))),
                     F.when(F.col(f"_s{j}").isNotNull(), F.col("_cpos"))).alias(f"_w{j}") for j in range(n)]
    grouped = joined.groupBy(*pending.columns).agg(*best)
    return grouped.select(*pending.columns, *[c for j in range(n) for c in (
        F.coalesce(F.col(f"_w{j}.s"), F.lit(UNKNOWN)).alias(f"_s{j}"), F.col(f"_w{j}.v").alias(f"_v{j}"))])


def _filled(events: DataFrame, done: DataFrame, toast: tuple[str, ...]) -> DataFrame:
    """`events` with the values found for settled creates (placeholders found stay flagged)."""
    found = done.select("_rp", "_ro", *[c for j in range(len(toast)) for c in (
        (F.col(f"_s{j}") == KNOWN).alias(f"_k{j}"), F.col(f"_v{j}").alias(f"_f{j}"))])
    joined = events.join(F.broadcast(found), (F.col("_partition") == F.col("_rp")) & (F.col("_offset") == F.col("_ro")), "left")
    filled = {}
    for j, c in enumerate(toast):
        known = F.coalesce(F.col(f"_k{j}"), F.lit(False)) & F.col(f"_unavailable_{j}")
        filled[c] = F.when(known, F.col(f"_f{j}")).otherwise(F.col(q(c)))
        filled[f"_unavailable_{j}"] = F.col(f"_unavailable_{j}") & ~known
    return joined.withColumns(filled).select(*events.columns)


def unknown_values(events: DataFrame, key: tuple[str, ...], toast: tuple[str, ...], held: DataFrame,
                   mode: str, floor: str | None, remembered: DataFrame | None) -> DataFrame:
    """The keys (with `_error_class`) whose changes would write a row without a value the
    batch lacks: no change of the key carries it (history: its first change does not),
    the target holds no row of the key to keep it from (`held`: its keys, with `_known`,
    the newest position it holds of each), and the change would be written (newer than
    what the target holds, its remembered delete and the last truncate)."""
    upsert = F.col("_op").isin("c", "u", "r")
    lacking = _any([F.col(f"_unavailable_{j}") for j in range(len(toast))])
    ok = events.where(F.col("_error").isNull() & upsert)
    if mode == "history":  # later changes take the value from earlier ones
        first = F.min_by(F.struct(lacking.alias("lacks"), F.col("_position").alias("p")), F.col("_position"))
        keys = ok.groupBy(*[q(k) for k in key]).agg(first.alias("_first"), F.max("_moved_from").alias("_moved"))
        keys = keys.where("_first.lacks").select(*[q(k) for k in key], F.col("_first.p").alias("_p"), "_moved")
    else:  # the last change per key takes the newest value any change carries
        changes = events.where(F.col("_error").isNull() & F.col("_op").isin("c", "u", "r", "d"))
        has = [F.max(upsert & ~F.col(f"_unavailable_{j}")).alias(f"_h{j}") for j in range(len(toast))]
        keys = changes.groupBy(*[q(k) for k in key]).agg(
            *has, F.max_by("_op", "_position").alias("_last"), F.max("_position").alias("_p"),
            F.max("_moved_from").alias("_moved"), F.max(upsert).alias("_upserts"))
        # soft_delete writes a key created and deleted within the batch too, with its values
        written = F.col("_upserts") if mode == "soft_delete" else F.col("_last") != "d"
        keys = keys.where(written & ~reduce(lambda a, b: a & b, [F.col(f"_h{j}") for j in range(len(toast))]))
        keys = keys.select(*[q(k) for k in key], "_p", "_moved")
    keys = keys.join(held, list(key), "left").where(F.col("_held").isNull() | ~F.col("_held"))
    keys = keys.where(F.col("_p") > F.coalesce(F.col("_known"), F.lit("")))
    if floor:
        keys = keys.where(F.col("_p") > F.lit(floor))
    if remembered is not None:
        on = reduce(lambda a, b: a & b, [F.col(q(k)).eqNullSafe(F.col(f"_deleted_{i}")) for i, k in enumerate(key)])
        keys = keys.join(remembered, on, "left").where(
            F.col("_deleted_position").isNull() | (F.col("_p") > F.col("_deleted_position")))
    return keys.select(*[q(k) for k in key], F.when(F.col("_moved"), F.lit(MOVED_ROW_UNKNOWN))
                       .otherwise(F.lit(VALUE_UNKNOWN)).alias("_unknown"))


def set_aside(events: DataFrame, unknown: DataFrame, key: tuple[str, ...], toast: tuple[str, ...]) -> DataFrame:
    """`events` with the changes of the `unknown` keys marked bad (`_error`, `_error_class`)."""
    names = ", ".join(toast)
    message = {
        MOVED_ROW_UNKNOWN: "the row moved here from another key with unchanged TOASTed value(s) of "
                           f"{names}, and the old row is in neither the batch, the target nor the delete "
                           "memory, so its values are not known",
        VALUE_UNKNOWN: f"an unchanged TOASTed value of {names} is not in the change, and the target holds "
                       "no row of this key to keep it from",
    }
    joined = events.join(unknown, list(key), "left")
    bad = F.col("_unknown").isNotNull() & F.col("_op").isin("c", "u", "r") & F.col("_error").isNull()
    text = F.when(F.col("_unknown") == MOVED_ROW_UNKNOWN, F.lit(message[MOVED_ROW_UNKNOWN])).otherwise(
        F.lit(message[VALUE_UNKNOWN]))
    return joined.withColumns({"_error": F.when(bad, text).otherwise(F.col("_error")),
                               "_error_class": F.when(bad, F.col("_unknown")).otherwise(F.col("_error_class"))}
                              ).select(*events.columns)
