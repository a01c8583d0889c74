"""The Kafka read behind the schema check (`newest_values`) against the real broker: each
partition's newest non-null value of a batch's range, or None when the look-back does not
tell, so the job scans the batch instead."""
from __future__ import annotations

import secrets

from confluent_kafka import Producer

from cdc.register.topics import ensure_topics, newest_values, offsets_at, watermarks


def test_newest_values_reads_the_end_of_each_range(stack, settings):
    topic = f"it_probe_{secrets.token_hex(3)}"
    ensure_topics(settings.kafka_bootstrap, [topic])
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for i in range(9):  # offsets 0-8: values
        producer.produce(topic, key=b"k", value=f"v{i}".encode(), partition=0)
    producer.produce(topic, key=b"k", value=None, partition=0)  # offset 9: a tombstone
    for _ in range(40):  # offsets 10-49: tombstones only
        producer.produce(topic, key=b"k", value=None, partition=0)
    producer.flush(30)
    assert watermarks(settings.kafka_bootstrap, topic)[0] == (0, 50)
    bootstrap = settings.kafka_bootstrap
    assert newest_values(bootstrap, topic, {0: (0, 10)}) == [b"v8"]  # a tombstone at the end is skipped
    assert newest_values(bootstrap, topic, {0: (5, 7)}) == [b"v6"]  # a range shorter than the look-back
    assert newest_values(bootstrap, topic, {0: (8, 10)}) == [b"v8"]
    assert newest_values(bootstrap, topic, {0: (3, 4)}) == [b"v3"]  # records after the end are not taken
    assert newest_values(bootstrap, topic, {0: (0, 50)}) is None  # only tombstones near the end: scan instead
    assert newest_values(bootstrap, topic, {0: (9, 50)}) is None  # tombstones beyond the look-back
    assert newest_values(bootstrap, topic, {0: (20, 50)}) == []  # only tombstones in the whole range
    assert newest_values(bootstrap, topic, {0: (7, 7)}) == []  # an empty range


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
