"""A partition's offsets are asked again while its leader is elected, and only then."""
from __future__ import annotations

from typing import NamedTuple

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdc.control.kafka import checked, while_electing


class Partition:
    """A consumer's answers for one partition: errors first (KafkaError codes), then its offsets."""

    def __init__(self, *errors: int):
        self.errors, self.asked = list(errors), 0

    def get_watermark_offsets(self):
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
    assert while_electing(consumer.get_watermark_offsets, clock=clock, sleep=clock.sleep) == (3, 42)
    assert consumer.asked == 3 and clock.now == pytest.approx(0.3)


def test_another_error_or_an_election_past_the_timeout_is_raised():
    clock = Clock()
    with pytest.raises(KafkaException):
        while_electing(Partition(KafkaError._TRANSPORT).get_watermark_offsets, clock=clock, sleep=clock.sleep)
    assert clock.now == 0.0
    consumer = Partition(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 100)
    with pytest.raises(KafkaException):
        while_electing(consumer.get_watermark_offsets, timeout_s=5, clock=clock, sleep=clock.sleep)
    assert clock.now <= 5 and consumer.asked < 10


class Answered(NamedTuple):
    """A partition as a request answers it (confluent_kafka's TopicPartition.error is read-only)."""
    offset: int
    error: KafkaError | None = None


def test_a_partition_answered_with_an_error_raises_it_to_be_asked_again():
    fine = Answered(7)
    assert checked([fine]) == [fine]
    answers = [[fine, Answered(-1, KafkaError(KafkaError.LEADER_NOT_AVAILABLE))], [fine, Answered(9)]]
    clock = Clock()
    found = while_electing(lambda: checked(answers.pop(0)), clock=clock, sleep=clock.sleep)
    assert [tp.offset for tp in found] == [7, 9] and not answers and clock.now == pytest.approx(0.1)
    with pytest.raises(KafkaException):
        checked([Answered(-1, KafkaError(KafkaError._TRANSPORT))])
