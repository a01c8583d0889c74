"""Kafka reads (control/kafka.py) and topic creation (register/topics.py) against the real broker."""
from __future__ import annotations

import secrets

from confluent_kafka import Producer

from cdc.config.models import KafkaSettings, TopicSettings
from cdc.control.kafka import end_offsets, existing_topics, offsets_at, record_times
from cdc.register.topics import ensure_topics, topic_layout


def test_offsets_at_a_time_find_the_first_record_at_or_after_it(stack, settings):
    """What `cdc replay --from-timestamp` checks before Spark starts."""
    topic = f"it_times_{secrets.token_hex(3)}"
    ensure_topics(settings.kafka_bootstrap, [topic], settings.kafka)
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for i, ms in enumerate((1_000_000, 2_000_000, 3_000_000)):
        producer.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=ms)
    producer.flush(30)
    bootstrap = settings.kafka_bootstrap
    assert offsets_at(bootstrap, topic, 0) == {0: 0}
    assert offsets_at(bootstrap, topic, 1_500_000) == {0: 1}
    assert offsets_at(bootstrap, topic, 3_000_001) == {0: None}  # after the last record
    # what `cdc status` reads for a table's age: the time of the oldest record not applied
    assert record_times(bootstrap, topic, {0: 1}) == {0: 2_000_000}
    assert record_times(bootstrap, topic, {0: 3}, timeout_s=5) == {0: None}  # nothing there yet


def test_the_end_offsets_of_many_topics_come_in_one_read_and_a_missing_topic_is_not_created(stack, settings):
    """What a running job's lag gauge reads every few seconds for all its tables."""
    bootstrap, tag = settings.kafka_bootstrap, secrets.token_hex(3)
    two = f"it_ends_{tag}_two"
    ensure_topics(bootstrap, [two, f"it_ends_{tag}_empty"], KafkaSettings(topics=TopicSettings(partitions=2)))
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in ((0, 3), (1, 1)):
        for i in range(count):
            producer.produce(two, value=b"v", partition=partition)
    producer.flush(30)
    missing = f"it_ends_{tag}_missing"
    assert end_offsets(bootstrap, [two, f"it_ends_{tag}_empty", missing]) == {
        two: {0: 3, 1: 1}, f"it_ends_{tag}_empty": {0: 0, 1: 0}}
    assert end_offsets(bootstrap, [missing]) == {}
    assert missing not in existing_topics(bootstrap)


def test_topics_are_made_as_configured_and_an_existing_one_is_left_as_it_is(stack, settings):
    bootstrap, topic = settings.kafka_bootstrap, f"it_shape_{secrets.token_hex(3)}"
    two_days = KafkaSettings(topics=TopicSettings(partitions=3, retention_hours=48))
    assert ensure_topics(bootstrap, [topic], two_days) == [topic]
    # a topic named twice (registrations of one source table) is asked for once
    assert topic_layout(bootstrap, [topic, "it_no_such_topic", topic]) == {topic: (3, 48 * 3_600_000)}
    assert ensure_topics(bootstrap, [topic], KafkaSettings()) == []
    assert topic_layout(bootstrap, [topic]) == {topic: (3, 48 * 3_600_000)}  # `register` warns instead


def test_a_table_topic_of_three_partitions_replicates_exactly(it_env, capsys):
    """A topic made with more partitions than cdc.yaml says (by an administrator, or before a
    change of `kafka.topics`): `register` keeps it and says so, and the table's changes,
    spread over its partitions by key, apply exactly."""
    from cdc.control.kafka import watermarks

    env, s = it_env, it_env.schema
    env.sql(f'CREATE TABLE "{s}".spread (id int PRIMARY KEY, v text, n int)')
    env.sql(f'INSERT INTO "{s}".spread SELECT g, \'v\' || g, g FROM generate_series(1, 60) g')
    name, topic = env.register_table("spread"), f"{env.source}.{s}.spread"
    ensure_topics(env.settings.kafka_bootstrap, [topic], KafkaSettings(topics=TopicSettings(partitions=3)))
    capsys.readouterr()
    assert env.cdc("register", "--table", name) == 0
    assert f"topic {topic} has 3 partition(s), kafka.topics.partitions says 1" in capsys.readouterr().err
    env.replicate("spread", env.transaction(
        f'UPDATE "{s}".spread SET v = v || \'+\', n = n * 2 WHERE id % 3 = 0',
        f'DELETE FROM "{s}".spread WHERE id % 5 = 0',
        f'UPDATE "{s}".spread SET id = id + 1000 WHERE id IN (7, 8)',  # a key change: between partitions
        f'INSERT INTO "{s}".spread SELECT g, \'new\', g FROM generate_series(61, 90) g'))
    env.replicate("spread", env.transaction(f'UPDATE "{s}".spread SET n = -n WHERE id > 50'))
    assert env.assert_equal("spread") == 78
    filled = [p for p, (lo, hi) in watermarks(env.settings.kafka_bootstrap, topic).items() if hi > lo]
    assert len(filled) == 3, filled
