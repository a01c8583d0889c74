"""A partition's watermarks are asked again while its leader is elected, and only then."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdc.control.kafka import watermark


class Partition:
    """A consumer's answers for one partition: errors first (KafkaError codes), then its offsets."""

    def __init__(self, *errors: int):
        self.errors, self.asked = list(errors), 0

    def get_watermark_offsets(self, partition, timeout):
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return (3, 42)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_a_partition_electing_its_leader_is_asked_again():
    clock = Clock()
    consumer = Partition(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert watermark(consumer, "t-0", clock=clock, sleep=clock.sleep) == (3, 42)
    assert consumer.asked == 3 and clock.now == pytest.approx(0.3)


def test_another_error_or_an_election_past_the_timeout_is_raised():
    clock = Clock()
    with pytest.raises(KafkaException):
        watermark(Partition(KafkaError._TRANSPORT), "t-0", clock=clock, sleep=clock.sleep)
    assert clock.now == 0.0
    consumer = Partition(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 100)
    with pytest.raises(KafkaException):
        watermark(consumer, "t-0", timeout_s=5, clock=clock, sleep=clock.sleep)
    assert clock.now <= 5 and consumer.asked < 10
