"""The supervisor of a continuous job sees a query that ends while the job runs (real Spark
queries: each query's manager is its session's, so every query starts in the job's)."""
from __future__ import annotations

import time


def test_a_query_failing_while_the_job_runs_is_seen_and_started_again(spark, tmp_path, monkeypatch):
    from cdc.config.models import Settings, SparkSettings, StackSettings, TableRegistration
    from cdc.jobs import runner

    starts = []

    def start_query(session, settings, reg, available_now, tables=1):
        starts.append(session)

        def each(df, batch_id):
            if len(starts) == 1:  # the first query fails at its first batch, as Kafka timing out would
                raise RuntimeError("org.apache.kafka.common.errors.TimeoutException: fetch timed out")

        return (session.readStream.format("rate").load().writeStream.foreachBatch(each)
                .option("checkpointLocation", str(tmp_path / f"checkpoint{len(starts)}")).start())

    monkeypatch.setattr(runner, "start_query", start_query)
    monkeypatch.setattr(runner, "read_lag", lambda *args, **kwargs: None)
    settings = Settings(stack=StackSettings(state_dir=tmp_path), spark=SparkSettings(retry_for_s=60))
    table = TableRegistration(name="s.t", source={"name": "pg", "schema": "s", "table": "t"})
    sup = runner.Supervisor(spark, settings, [table], available_now=False, sleep=lambda s: None)
    sup.start_all()
    try:
        deadline = time.monotonic() + 120
        while len(starts) < 2:
            assert time.monotonic() < deadline, "the failed query was never seen"
            sup.poll()
        assert sup.queries["s.t"].isActive and "s.t" in sup.failing_since
    finally:
        sup.stop()
