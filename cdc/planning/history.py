"""History mode (SCD type 2) in Spark: every change of a batch becomes a version of its row,
valid from its source commit time until the next change of the key; a delete ends the
key's last version and starts none. Versions are told apart by position, so a change the
table already holds (a replay, a re-run batch) adds nothing."""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from cdc.planning.sql import q

VERSION, CLOSE = "v", "c"  # `_role` of a row of the batch view: a new version, or the end of the open one


def stored_versions(target: DataFrame, batch_keys: DataFrame, key: tuple[str, ...],
                    toastable: tuple[str, ...] = ()) -> DataFrame:
    """Per key of the batch: the newest position the target holds (`_known`) and the values
    of the toastable columns in its current version (`_stored_<i>`)."""
    current = F.col("_cdc_current") & F.col("_cdc_current").isNotNull()
    return target.join(batch_keys, list(key), "left_semi").groupBy(*[q(k) for k in key]).agg(
        F.max("_cdc_position").alias("_known"),
        *[F.max_by(F.col(q(c)), F.when(current, F.col("_cdc_position"))).alias(f"_stored_{i}")
          for i, c in enumerate(toastable)])


def history_changes(events: DataFrame, stored: DataFrame, key: tuple[str, ...], columns: tuple[str, ...],
                    toastable: tuple[str, ...] = ()) -> DataFrame:
    """The batch view of history mode. `events`: the batch's decoded changes (ops c, u, r, d;
    tombstones add nothing: their delete came before them), with `_deleted_position` of the
    delete memory; `stored`: `stored_versions`. One `_role` VERSION row per change newer than
    anything the target holds of its key, valid until the key's next change of the batch
    (`_valid_to`, null for the newest unless it is deleted), and one `_role` CLOSE row per
    key, which ends the key's open version at the key's first new change."""
    fresh = (events.where(F.col("_op").isin("c", "u", "r", "d"))
             .dropDuplicates([*key, "_position"])  # an exact redelivery
             .join(stored, list(key), "left")
             .where(F.col("_position") > F.coalesce(F.col("_known"), F.lit("")))
             .where(F.col("_position") > F.coalesce(F.col("_deleted_position"), F.lit(""))))
    by_key = Window.partitionBy(*[q(k) for k in key]).orderBy("_position")
    so_far = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    upsert = F.col("_op").isin("c", "u", "r")
    # An unchanged TOASTed value is the newest value the key really had: earlier in the
    # batch, else in the stored current version.
    kept = {c: F.coalesce(F.last(F.when(upsert & ~F.col(f"_unavailable_{i}"), F.struct(F.col(q(c)).alias("v"))),
                                 ignorenulls=True).over(so_far), F.struct(F.col(f"_stored_{i}").alias("v")))
            .getField("v") for i, c in enumerate(toastable)}
    ordered = fresh.select(
        *[q(k) for k in key],
        *[kept[c].alias(c) if c in kept else F.col(q(c)) for c in columns if c not in key],
        "_op", "_position", "_source_ts", "_partition", "_offset",
        F.lead("_source_ts").over(by_key).alias("_valid_to"),
        (F.row_number().over(by_key) == 1).alias("_first"),
        F.lead("_op").over(by_key).isNull().alias("_last"))
    versions = ordered.where(upsert).withColumn("_role", F.lit(VERSION))
    closes = ordered.where("_first").withColumn("_role", F.lit(CLOSE))
    return versions.unionByName(closes).drop("_first")
