"""Rule 3 and 5 in Spark: the last change per key of a micro-batch, by aggregate
(`max_by` on the position), not by a sort."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc.planning.sql import TOMBSTONE, q

CARRIED = ("_op", "_position", "_source_ts", "_partition", "_offset")


def last_per_key(events: DataFrame, key: tuple[str, ...], columns: tuple[str, ...]) -> DataFrame:
    """One row per key: the change with the highest position; a tombstone that follows it in
    its partition turns it into a delete; a key with only tombstones keeps one `tombstone`
    row (applied against the stored row's Kafka offset by the MERGE)."""
    values = [c for c in columns if c not in key] + list(CARRIED)
    is_change = F.col("_op") != TOMBSTONE
    is_tomb = F.col("_op") == TOMBSTONE
    grouped = events.groupBy(*[q(k) for k in key]).agg(
        F.max_by(F.when(is_change, F.struct(*[q(v) for v in values])), F.when(is_change, F.col("_position")))
        .alias("_w"),
        F.max_by(F.when(is_tomb, F.struct("_partition", "_offset")), F.when(is_tomb, F.col("_offset"))).alias("_t"),
    )
    lone_tomb = F.col("_w").isNull()
    # Offsets compare only within one partition (a key's records share one unless the
    # topic was repartitioned).
    tomb_after = (F.col("_t").isNotNull() & (F.col("_t._partition") == F.col("_w._partition"))
                  & (F.col("_t._offset") > F.col("_w._offset")))
    out = [F.col(q(k)) for k in key]
    out += [F.col("_w").getField(c).alias(c) for c in columns if c not in key]
    out += [
        F.when(lone_tomb, F.lit(TOMBSTONE)).when(tomb_after, F.lit("d")).otherwise(F.col("_w._op")).alias("_op"),
        F.col("_w._position").alias("_position"),
        F.col("_w._source_ts").alias("_source_ts"),
        F.when(lone_tomb, F.col("_t._partition")).otherwise(F.col("_w._partition")).alias("_partition"),
        F.when(lone_tomb, F.col("_t._offset")).otherwise(F.col("_w._offset")).alias("_offset"),
    ]
    return grouped.select(*out)
