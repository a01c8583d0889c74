"""Rule 3 and 5 in Spark: the last change per key of a micro-batch, by aggregate
(`max_by` on the position), not by a sort."""
from __future__ import annotations

from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc.planning.sql import TOMBSTONE, VALUES_AT, q

CARRIED = ("_op", "_position", "_source_ts", "_partition", "_offset")


def last_per_key(events: DataFrame, key: tuple[str, ...], columns: tuple[str, ...],
                 toastable: tuple[str, ...] = (), keep_values: bool = False) -> DataFrame:
    """`events`' last change per key (see `last_per_key_of`)."""
    return last_per_key_of(key, columns, toastable, keep_values)(events)


def last_per_key_of(key: tuple[str, ...], columns: tuple[str, ...], toastable: tuple[str, ...] = (),
                    keep_values: bool = False) -> Callable[[DataFrame], DataFrame]:
    """The dedupe of a batch's events, its expressions built once (a job keeps it between
    batches). One row per key: the change with the highest position; a tombstone that follows it in
    its partition turns it into a delete; a key with only tombstones keeps one `tombstone`
    row (applied against the stored row's Kafka offset by the MERGE). A `toastable` column
    takes the newest value the batch really carries (placeholders skipped), with `_has_<i>`
    false when it carries none, so the MERGE keeps the stored value. With `keep_values`
    (soft_delete) a key whose last change is a delete keeps the values of its newest upsert,
    and `_values_at` gives that upsert's position (null when the batch has none)."""
    values = [c for c in columns if c not in key] + list(CARRIED)
    is_change = F.col("_op") != TOMBSTONE
    is_tomb = F.col("_op") == TOMBSTONE
    is_upsert = F.col("_op").isin("c", "u", "r")
    aggregates = [
        F.max_by(F.when(is_change, F.struct(*[q(v) for v in values])), F.when(is_change, F.col("_position")))
        .alias("_w"),
        F.max_by(F.when(is_tomb, F.struct("_partition", "_offset")), F.when(is_tomb, F.col("_offset"))).alias("_t"),
        *[agg for i, c in enumerate(toastable) for agg in _known_value(i, c)],
        *([F.max_by(F.when(is_upsert, F.struct(*[q(v) for v in values])), F.when(is_upsert, F.col("_position")))
           .alias("_u")] if keep_values else []),
    ]
    lone_tomb = F.col("_w").isNull()
    # Offsets compare only within one partition (a key's records share one unless the
    # topic was repartitioned).
    tomb_after = (F.col("_t").isNotNull() & (F.col("_t._partition") == F.col("_w._partition"))
                  & (F.col("_t._offset") > F.col("_w._offset")))
    keys = [F.col(q(k)) for k in key]
    out = list(keys)
    toast = {c: i for i, c in enumerate(toastable)}
    kept = "_u" if keep_values else "_w"
    out += [(F.col(f"_tv_{toast[c]}") if c in toast else F.col(kept).getField(c)).alias(c)
            for c in columns if c not in key]
    if keep_values:
        out.append(F.col("_u._position").alias(VALUES_AT))
    out += [F.coalesce(F.col(f"_th_{i}"), F.lit(False)).alias(f"_has_{i}") for i in toast.values()]
    out += [
        F.when(lone_tomb, F.lit(TOMBSTONE)).when(tomb_after, F.lit("d")).otherwise(F.col("_w._op")).alias("_op"),
        F.col("_w._position").alias("_position"),
        F.col("_w._source_ts").alias("_source_ts"),
        F.when(lone_tomb, F.col("_t._partition")).otherwise(F.col("_w._partition")).alias("_partition"),
        F.when(lone_tomb, F.col("_t._offset")).otherwise(F.col("_w._offset")).alias("_offset"),
    ]
    return lambda events: events.groupBy(*keys).agg(*aggregates).select(*out)


def _known_value(i: int, column: str):
    """The newest value of a toastable column that a change of the batch really carries."""
    known = F.col("_op").isin("c", "u", "r") & ~F.col(f"_unavailable_{i}")
    return (F.max_by(F.col(q(column)), F.when(known, F.col("_position"))).alias(f"_tv_{i}"),
            F.max(F.when(known, F.lit(True))).alias(f"_th_{i}"))
