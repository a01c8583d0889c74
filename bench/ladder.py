"""The ladder to the physical limit: the same whole job (`cdc run --available-now` over the
apply section's backlog, one batch) stopped at each step of its way, so each step's share
of the whole batch shows. Rungs: read the topic into Spark's `noop` sink (raw consume),
decode into `noop`, decode into plain Parquet files, decode and append to the Iceberg
target (the append limit), and the full MERGE."""
from __future__ import annotations

import shutil
from pathlib import Path

from pyspark.sql import functions as F

from bench.workload import fill, registration, timed
from cdc.jobs.apply import TableApplier
from cdc.jobs.queries import Queries
from cdc.jobs.targets import open_target
from cdc.planning.sql import q

ONE_BATCH = {"max_offsets_per_trigger": 2 ** 31 - 1}  # a backlog measured as one batch, whatever the automatic cap


class RawConsume(TableApplier):
    """Reads each batch's records from Kafka, and nothing else."""

    def __call__(self, batch, batch_id: int, waited_s: float = 0.0) -> None:
        batch.write.format("noop").mode("overwrite").save()


class DecodeOnly(TableApplier):
    """The job up to the apply step (read, skip what is held, judge the schemas, decode), the
    decoded events into `noop`."""

    def _apply(self, spark, table, batch, events, summary, committed, planned_end, batch_id) -> None:
        events.write.format("noop").mode("overwrite").save()

    def _rows(self, events):
        """Every decoded change as a row of the target's columns and its `_cdc_*` columns."""
        return (events.where("_error IS NULL AND _op IN ('c', 'u', 'r', 'd')")
                .select(*[F.col(q(c.name)) for c in self.columns], F.col("_op").alias("_cdc_op"),
                        F.col("_position").alias("_cdc_position"), F.col("_source_ts").alias("_cdc_source_ts"),
                        F.col("_partition").alias("_cdc_kafka_partition"),
                        F.col("_offset").alias("_cdc_kafka_offset")))


class DecodeToParquet(DecodeOnly):
    """The decoded changes written as plain Parquet files beside the query's checkpoint."""

    def _apply(self, spark, table, batch, events, summary, committed, planned_end, batch_id) -> None:
        self._rows(events).write.mode("append").parquet(str(parquet_dir(self.checkpoint)))


class AppendLimit(DecodeOnly):
    """The decoded changes appended to the Iceberg target instead of merged: what the same
    job costs without MERGE."""

    def _apply(self, spark, table, batch, events, summary, committed, planned_end, batch_id) -> None:
        self._rows(events).writeTo(self.target_ref).append()


RUNGS = {"raw_consume": RawConsume, "decode_noop": DecodeOnly, "decode_parquet": DecodeToParquet,
         "decode_append": AppendLimit}  # in the order of the ladder, the full MERGE above them


def parquet_dir(checkpoint: Path) -> Path:
    return Path(f"{checkpoint}.parquet")


def rung_s(spark, settings, catalog, template, topic: str, rung: str, rows: int = 0) -> float:
    """Seconds of the job stopped at `rung` over the whole of `topic`, into a target of `rows`
    rows made anew (so its record schemas are judged again, as in the full job's first run)."""
    reg = registration(settings, f"ladder_{rung}", **ONE_BATCH)
    fill(spark, settings, catalog, reg, template, rows, topic=topic)
    checkpoint = settings.path(settings.spark.checkpoint_dir) / reg.name
    shutil.rmtree(parquet_dir(checkpoint), ignore_errors=True)
    session = spark.newSession()
    target = open_target(session, settings, reg)
    queries = Queries(session, settings)
    return timed(lambda: queries.stream(session, reg, target, checkpoint, {"startingOffsets": "earliest"},
                                       available_now=True, applier_type=RUNGS[rung]).awaitTermination())


def figures(events: int, seconds: dict[str, float]) -> dict:
    """`ladder`: each rung's seconds, events/s and share of the full MERGE's (`seconds["merge"]`)."""
    ladder = {rung: {"s": round(s, 2), "events_per_s": round(events / s), "share": round(s / seconds["merge"], 3)}
              for rung, s in seconds.items()}
    print("ladder: " + ", ".join(f"{rung} {v['s']:.1f}s ({v['events_per_s']:,}/s, {v['share']:.0%})"
                                 for rung, v in ladder.items()), flush=True)
    return {"ladder": ladder}
