"""Kafka topics of registered tables, created up front so that a job can start on a
table that has no change yet."""
from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cdc.errors import ConnectorError, DependencyError


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def existing_topics(bootstrap: str, timeout_s: float = 15) -> set[str]:
    try:
        return set(admin(bootstrap).list_topics(timeout=timeout_s).topics)
    except KafkaException as e:
        raise DependencyError(f"Kafka at {bootstrap} is unreachable: {e}",
                              hint="start it (`cdc stack up`) or set kafka.bootstrap_servers in cdc.yaml") from None


MAX_MESSAGE_BYTES = "max.message.bytes"


def ensure_topics(bootstrap: str, topics: list[str], max_record_bytes: int | None = None) -> list[str]:
    """Create the missing ones (one partition, the cluster's replication factor) taking
    records up to `max_record_bytes`, and raise an existing one's limit to it; return
    the created ones."""
    missing = sorted(set(topics) - existing_topics(bootstrap))
    client = admin(bootstrap)  # keep the handle alive until the futures resolve
    limit = {MAX_MESSAGE_BYTES: str(max_record_bytes)} if max_record_bytes else {}
    if missing:
        futures = client.create_topics([NewTopic(t, num_partitions=1, replication_factor=-1, config=limit)
                                        for t in missing])
        for topic, fut in futures.items():
            try:
                fut.result(30)
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise ConnectorError(f"cannot create Kafka topic {topic}: {e}") from None
    if max_record_bytes:
        _raise_record_limit(client, sorted(set(topics) - set(missing)), max_record_bytes)
    return missing


def _raise_record_limit(client: AdminClient, topics: list[str], max_record_bytes: int) -> None:
    """Topics whose `max.message.bytes` is below `max_record_bytes` get it raised (a topic
    made by Debezium or by an older release has the broker's default)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    if not topics:
        return
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    low = []
    for resource, fut in client.describe_configs(resources).items():
        try:
            entry = fut.result(30).get(MAX_MESSAGE_BYTES)
        except KafkaException as e:
            raise ConnectorError(f"cannot read the configuration of Kafka topic {resource.name}: {e}") from None
        if entry is None or int(entry.value) < max_record_bytes:
            low.append(ConfigResource(ConfigResource.Type.TOPIC, resource.name, incremental_configs=[
                ConfigEntry(MAX_MESSAGE_BYTES, str(max_record_bytes),
                            incremental_operation=AlterConfigOpType.SET)]))
    for resource, fut in (client.incremental_alter_configs(low).items() if low else ()):
        try:
            fut.result(30)
        except KafkaException as e:
            raise ConnectorError(f"cannot raise {MAX_MESSAGE_BYTES} of Kafka topic {resource.name} to "
                                 f"{max_record_bytes}: {e}",
                                 hint="give cdc's Kafka user AlterConfigs on its topics, or set the topic's "
                                      "max.message.bytes yourself") from None


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


def offsets_at(bootstrap: str, topic: str, ms: int) -> dict[int, int | None]:
    """Each partition's first offset whose record time is at or after `ms` (epoch
    milliseconds); None where no record is."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-replay-window", "enable.auto.commit": False,
                         "log_level": 0})
    try:
        meta = consumer.list_topics(topic, timeout=15).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        found = consumer.offsets_for_times([TopicPartition(topic, p, ms) for p in meta.partitions], timeout=15)
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in found}
    except KafkaException as e:
        raise DependencyError(f"Kafka at {bootstrap} is unreachable: {e}") from None
    finally:
        consumer.close()


def record_times(bootstrap: str, topic: str, offsets: dict[int, int], timeout_s: float = 15) -> dict[int, int | None]:
    """The time (epoch milliseconds) of the record at each partition's offset, or of the
    first one kept after it; None where no record was read within `timeout_s`."""
    import time

    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-record-times", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True, "log_level": 0})
    found: dict[int, int | None] = {}
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
        deadline = time.monotonic() + timeout_s
        while len(found) < len(offsets) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.partition() in found:
                continue
            if msg.error() is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                raise DependencyError(f"Kafka at {bootstrap}: cannot read {topic}: {msg.error()}")
            found[msg.partition()] = msg.timestamp()[1] if msg.error() is None else None
            consumer.pause([TopicPartition(topic, msg.partition())])
    except KafkaException as e:
        raise DependencyError(f"Kafka at {bootstrap} is unreachable: {e}") from None
    finally:
        consumer.close()
    return {p: found.get(p) for p in offsets}

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
