from prometheus_client import REGISTRY

from cdc.jobs import metrics


def value(name: str, **labels) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_a_batch_counts_its_records_dead_letters_and_step_times():
    metrics.batch_applied("m.a", records=10, bad=2, seconds=1.5, steps={"decode": 0.5, "merge": 0.75})
    metrics.batch_applied("m.a", records=5, bad=0, seconds=0.5, steps={"merge": 0.25, "delete memory": 0.1})
    assert value("cdc_events_read_total", table="m.a") == 15
    assert value("cdc_events_applied_total", table="m.a") == 13
    assert value("cdc_dead_letters_total", table="m.a") == 2
    assert value("cdc_batch_duration_seconds_count", table="m.a") == 2
    assert abs(metrics.step_seconds("m.a") - 1.1) < 1e-9  # merge and delete memory; decoding is not the apply


def test_lag_per_partition_never_negative():
    metrics.record_lag("m.b", {0: 100, 1: 7}, {0: 40})
    assert value("cdc_lag_records", table="m.b", partition="0") == 60
    assert value("cdc_lag_records", table="m.b", partition="1") == 7
    metrics.record_lag("m.b", {0: 100, 1: 7}, {0: 100, 1: 9})  # a compacted end behind the checkpoint
    assert value("cdc_lag_records", table="m.b", partition="0") == 0
    assert value("cdc_lag_records", table="m.b", partition="1") == 0


def test_direct_commits_sum_their_driver_cpu_and_count():
    assert metrics.commit_cpu("m.c") == (0.0, 0)
    for cpu_s in (0.05, 0.15, 3.0):  # the last past every bucket
        metrics.COMMIT_CPU_SECONDS.labels("m.c").observe(cpu_s)
    total, count = metrics.commit_cpu("m.c")
    assert count == 3 and abs(total - 3.2) < 1e-9
    assert value("cdc_direct_commit_cpu_seconds_count", table="m.c") == 3
