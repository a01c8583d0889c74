"""Kafka topics of registered tables, created up front so that a job can start on a
table that has no change yet, with the layout their registrations ask for."""
from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cdc.config.models import KafkaSettings, TableRegistration, TopicSettings
from cdc.control.kafka import Brokers, Watched, admin, existing_topics
from cdc.errors import ConnectorError


MAX_MESSAGE_BYTES, RETENTION_MS = "max.message.bytes", "retention.ms"


def ensure_topics(kafka: Brokers, topics: list[str], settings: KafkaSettings) -> list[str]:
    """Create the missing ones as `settings.topics` says (partitions, replication factor,
    retention) taking records up to `settings.max_record_bytes`, and raise an existing one's
    record limit to it (its partitions and retention stay: `layout_warnings` tells of
    them); return the created ones."""
    missing = sorted(set(topics) - existing_topics(kafka))
    client = admin(kafka)  # keep the handle alive until the futures resolve
    shape = settings.topics
    if missing:
        config = {MAX_MESSAGE_BYTES: str(settings.max_record_bytes), RETENTION_MS: str(shape.retention_ms),
                  "cleanup.policy": "delete"}
        futures = client.create_topics([NewTopic(t, num_partitions=shape.partitions,
                                                 replication_factor=shape.replication_factor, config=config)
                                        for t in missing])
        for topic, fut in futures.items():
            try:
                fut.result(30)
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise ConnectorError(f"cannot create Kafka topic {topic}: {e}",
                                         hint="check kafka.topics in cdc.yaml against the cluster (a replication "
                                              "factor above its broker count is refused)") from None
    _raise_record_limit(client, sorted(set(topics) - set(missing)), settings.max_record_bytes)
    return missing


def _raise_record_limit(client: AdminClient, topics: list[str], max_record_bytes: int) -> None:
    """Topics whose `max.message.bytes` is below `max_record_bytes` get it raised (a topic
    made by Debezium or by an older release has the broker's default)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    low = [ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry(MAX_MESSAGE_BYTES, str(max_record_bytes), incremental_operation=AlterConfigOpType.SET)])
        for name, configs in describe_configs(client, topics).items()
        if configs.get(MAX_MESSAGE_BYTES) is None or int(configs[MAX_MESSAGE_BYTES]) < max_record_bytes]
    for resource, fut in (client.incremental_alter_configs(low).items() if low else ()):
        try:
            fut.result(30)
        except KafkaException as e:
            raise ConnectorError(f"cannot raise {MAX_MESSAGE_BYTES} of Kafka topic {resource.name} to "
                                 f"{max_record_bytes}: {e}",
                                 hint="give cdc's Kafka user AlterConfigs on its topics, or set the topic's "
                                      "max.message.bytes yourself") from None


def describe_configs(client: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's effective configuration (its own settings over the broker's defaults)."""
    from confluent_kafka.admin import ConfigResource

    out = {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in sorted(set(topics))]  # once each
    for resource, fut in (client.describe_configs(resources).items() if resources else ()):
        try:
            out[resource.name] = {k: e.value for k, e in fut.result(30).items()}
        except KafkaException as e:
            raise ConnectorError(f"cannot read the configuration of Kafka topic {resource.name}: {e}") from None
    return out


def topic_layout(kafka: Brokers, topics: list[str]) -> dict[str, tuple[int, int]]:
    """(partitions, retention.ms) of each existing topic among `topics`."""
    w = Watched(kafka)
    client = w.admin()
    meta = w.metadata(client).topics
    present = sorted({t for t in topics if t in meta})
    configs = describe_configs(client, present)
    return {t: (len(meta[t].partitions), int(configs[t].get(RETENTION_MS) or -1)) for t in present}


def layout_warnings(shape: TopicSettings, tables: list[tuple[TableRegistration, str]],
                    found: dict[str, tuple[int, int]], new: set[str]) -> list[str]:
    """What `cdc register` warns of a table's topic (`found`: those that exist; the others
    are made as configured): partitions or a retention other than configured, a retention
    below the table's delete_horizon_hours, and a bounded retention where a new table's
    first run reads its snapshot from the topic's earliest record."""
    out = []
    for reg, topic in tables:
        partitions, retention = found.get(topic, (shape.partitions, shape.retention_ms))
        if partitions != shape.partitions:
            out.append(f"topic {topic} has {partitions} partition(s), kafka.topics.partitions says "
                       f"{shape.partitions}: partitions are set when a topic is created")
        if retention != shape.retention_ms:
            out.append(f"topic {topic} keeps changes {_hours(retention)}, kafka.topics.retention_hours says "
                       f"{_hours(shape.retention_ms)}: retention is set when a topic is created; change it with "
                       f"`kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config "
                       f"retention.ms={shape.retention_ms}`")
        if retention == -1:
            continue
        hours = retention / 3_600_000
        if retention < reg.options.delete_horizon_hours * 3_600_000:
            out.append(f"topic {topic} keeps changes {hours:g} h, less than table {reg.name}'s "
                       f"delete_horizon_hours ({reg.options.delete_horizon_hours} h): a job stopped longer than "
                       f"{hours:g} h finds changes gone from Kafka (it stops and says so; `cdc bootstrap` then "
                       f"refills the table); raise kafka.topics.retention_hours or set it to null (for ever)")
        if reg.name in new and reg.options.starting_offsets == "earliest":
            out.append(f"topic {topic} keeps changes {hours:g} h: table {reg.name}'s first `cdc run` reads its "
                       f"snapshot from the topic's earliest record, so run it within {hours:g} h, and "
                       f"`replay --from-earliest` reaches back {hours:g} h only; "
                       f"kafka.topics.retention_hours: null keeps every change")
    return out


def _hours(retention_ms: int) -> str:
    return "for ever" if retention_ms == -1 else f"{retention_ms / 3_600_000:g} h"


def delete_topics(kafka: Brokers, topics: list[str]) -> list[str]:
    """Delete those of `topics` that exist; return them."""
    present = sorted(set(topics) & existing_topics(kafka))
    client = admin(kafka)
    for topic, fut in (client.delete_topics(present).items() if present else ()):
        try:
            fut.result(30)
        except KafkaException as e:
            raise ConnectorError(f"cannot delete Kafka topic {topic}: {e}",
                                 hint="give cdc's Kafka user DeleteTopics on its topics, or delete it yourself") from None
    return present
