"""The supervisor of a continuous job sees a query that ends while the job runs (real Spark
queries: each query's manager is its session's, so every query starts in the job's)."""
from __future__ import annotations

import time


def test_a_query_failing_while_the_job_runs_is_seen_and_started_again(spark, tmp_path):
    from cdc.config.models import Settings, SparkSettings, StackSettings, TableRegistration
    from cdc.jobs.queries import Queries
    from cdc.jobs.supervisor import Supervisor

    starts = []

    def each(df, batch_id):
        if len(starts) == 1:  # the first query fails at its first batch, as Kafka timing out would
            raise RuntimeError("org.apache.kafka.common.errors.TimeoutException: fetch timed out")

    class Starter(Queries):
        """The job's queries, each a rate source's in the job's session."""

        def start_table(self, reg, available_now, tables=1):
            starts.append(reg.name)
            return (self.spark.readStream.format("rate").load().writeStream.foreachBatch(each)
                    .option("checkpointLocation", str(tmp_path / f"checkpoint{len(starts)}")).start())

    settings = Settings(stack=StackSettings(state_dir=tmp_path), spark=SparkSettings(retry_for_s=60))
    table = TableRegistration(name="s.t", source={"name": "pg", "schema": "s", "table": "t"})
    sup = Supervisor(spark, settings, [table], available_now=False, starter=Starter(spark, settings),
                     lag=lambda *args, **kwargs: None)
    sup.start_all()
    try:
        deadline = time.monotonic() + 120
        while len(starts) < 2:
            assert time.monotonic() < deadline, "the failed query was never seen"
            sup.look()
        assert sup.queries["s.t"].isActive and "s.t" in sup.state.failing_since
    finally:
        sup.stop()

