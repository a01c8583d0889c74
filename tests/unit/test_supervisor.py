import pytest

from cdc.config.models import Settings, SparkSettings
from cdc.errors import ApplyError, DependencyError
from cdc.jobs.runner import Supervisor, retriable


class Clock:
    def __init__(self):
        self.now = 0.0
        self.slept = []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


def supervisor(bound):
    clock = Clock()
    settings = Settings(spark=SparkSettings(retry_for_s=bound))
    return Supervisor(None, settings, [], available_now=True, clock=lambda: clock.now, sleep=clock.sleep), clock


def test_retries_with_backoff_then_gives_up_naming_the_cause():
    sup, clock = supervisor(bound=20)
    err = DependencyError("Kafka at x is unreachable")
    with pytest.raises(ApplyError, match=r"gave up after 20s of retries; last error: Kafka at x is unreachable"):
        for _ in range(100):
            sup.backoff("t.a", err)
    assert clock.slept[:4] == [1.0, 2.0, 4.0, 8.0] and max(clock.slept) <= 30


def test_recovery_resets_the_budget():
    sup, clock = supervisor(bound=5)
    sup.backoff("t.a", DependencyError("down"))
    clock.now += 100
    sup.recovered("t.a")
    sup.backoff("t.a", DependencyError("down again"))  # a fresh budget, no raise
    assert clock.slept == [1.0, 1.0]


def test_verdicts_about_the_data_are_not_retried():
    sup, _ = supervisor(bound=300)
    with pytest.raises(ApplyError, match="bad record"):
        sup.backoff("t.a", ApplyError("bad record"))
    assert not retriable(RuntimeError("py4j ... cdc.errors.ApplyError: table t: 1 record(s) ..."))
    assert not retriable(RuntimeError("[KAFKA_DATA_LOSS] ..."))
    assert not retriable(RuntimeError("[CAST_INVALID_INPUT] ... SQLSTATE: 22018"))
    assert retriable(RuntimeError("org.apache.kafka.common.errors.TimeoutException: Timed out"))
