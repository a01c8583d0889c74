"""Kafka reads of topics.py against the real broker."""
from __future__ import annotations

import secrets

from confluent_kafka import Producer

from cdc.register.topics import ensure_topics, offsets_at


def test_offsets_at_a_time_find_the_first_record_at_or_after_it(stack, settings):
    """What `cdc replay --from-timestamp` checks before Spark starts."""
    topic = f"it_times_{secrets.token_hex(3)}"
    ensure_topics(settings.kafka_bootstrap, [topic])
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for i, ms in enumerate((1_000_000, 2_000_000, 3_000_000)):
        producer.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=ms)
    producer.flush(30)
    bootstrap = settings.kafka_bootstrap
    assert offsets_at(bootstrap, topic, 0) == {0: 0}
    assert offsets_at(bootstrap, topic, 1_500_000) == {0: 1}
    assert offsets_at(bootstrap, topic, 3_000_001) == {0: None}  # after the last record
