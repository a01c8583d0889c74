"""Kafka topics of registered tables, created up front so that a job can start on a
table that has no change yet."""
from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cdc.errors import ConnectorError, DependencyError


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def existing_topics(bootstrap: str) -> set[str]:
    try:
        return set(admin(bootstrap).list_topics(timeout=15).topics)
    except KafkaException as e:
        raise DependencyError(f"Kafka at {bootstrap} is unreachable: {e}",
                              hint="start it (`cdc stack up`) or set kafka.bootstrap_servers in cdc.yaml") from None


def ensure_topics(bootstrap: str, topics: list[str]) -> list[str]:
    """Create the missing ones (one partition, the cluster's replication factor)."""
    missing = sorted(set(topics) - existing_topics(bootstrap))
    if not missing:
        return []
    client = admin(bootstrap)  # keep the handle alive until the futures resolve
    futures = client.create_topics([NewTopic(t, num_partitions=1, replication_factor=-1) for t in missing])
    for topic, fut in futures.items():
        try:
            fut.result(30)
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise ConnectorError(f"cannot create Kafka topic {topic}: {e}") from None
    return missing


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """(earliest, end) offset per partition of `topic`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-watermarks", "enable.auto.commit": False,
                         "log_level": 0})
    try:
        meta = consumer.list_topics(topic, timeout=15).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15) for p in meta.partitions}
    except KafkaException as e:
        raise DependencyError(f"Kafka at {bootstrap} is unreachable: {e}") from None
    finally:
        consumer.close()


def topic_id(bootstrap: str, topic: str) -> str | None:
    """Kafka's id of the topic (a recreated topic gets a new one), or None if unknown."""
    from confluent_kafka import TopicCollection

    client = admin(bootstrap)
    try:
        desc = client.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(30)
    except KafkaException as e:
        if "UNKNOWN_TOPIC" in str(e):
            return None
        raise DependencyError(f"Kafka at {bootstrap} is unreachable: {e}") from None
    return str(desc.topic_id) if getattr(desc, "topic_id", None) is not None else None
