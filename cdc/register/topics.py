"""Kafka topics of registered tables, created up front so that a job can start on a
table that has no change yet."""
from __future__ import annotations

import re
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cdc.config.clients import KafkaAccess
from cdc.config.models import KafkaSettings, TableRegistration, TopicSettings
from cdc.errors import CdcError, ConfigError, ConnectorError, DependencyError

# Each function takes the brokers as `kafka_access(settings)` gives them, or a bare
# bootstrap string for a PLAINTEXT listener (the local stack's).
Brokers = KafkaAccess | str


def access(kafka: Brokers) -> KafkaAccess:
    return kafka if isinstance(kafka, KafkaAccess) else KafkaAccess(kafka)


class Watched:
    """The clients of one call, with what librdkafka reports beside a failed request: a
    refused login or TLS handshake is a configuration error (exit 2), told in librdkafka's
    words, not a broker that does not answer."""

    REFUSALS = (KafkaError._AUTHENTICATION, KafkaError._SSL)

    def __init__(self, kafka: Brokers):
        self.access = access(kafka)
        self.refused: str | None = None

    def conf(self, **more) -> dict:
        return self.access.client(error_cb=self._seen, log_level=0, **more)

    def admin(self) -> AdminClient:
        return AdminClient(self.conf())

    def _seen(self, err) -> None:
        if err.code() in self.REFUSALS:
            self.refused = re.sub(r" \(after \d+ms in state \w+\)$", "", err.str())

    def failure(self, e: Exception) -> CdcError:
        where = self.access.bootstrap
        if self.refused:
            return ConfigError(f"Kafka at {where} refused cdc: {self.refused}",
                               hint="check kafka.security in cdc.yaml: protocol, sasl_mechanism, username, "
                                    "password, ca_file")
        return DependencyError(f"Kafka at {where} is unreachable: {e}",
                               hint="start it (`cdc stack up`) or set kafka.bootstrap_servers in cdc.yaml")

    def metadata(self, client, topic: str | None = None, timeout_s: float = 15):
        """The cluster's metadata (of `topic` only, if given), asked for in waits of 1 s,
        2 s, 4 s ... until `timeout_s`, so that a refusal ends the wait early and a slow
        cluster still answers."""
        deadline, wait = time.monotonic() + timeout_s, 1.0
        while True:
            try:
                return client.list_topics(topic, timeout=max(0.1, min(wait, deadline - time.monotonic())))
            except KafkaException as e:
                client.poll(0)  # serves error_cb
                if self.refused or time.monotonic() >= deadline:
                    raise self.failure(e) from None
                wait *= 2


def admin(kafka: Brokers) -> AdminClient:
    return Watched(kafka).admin()


def existing_topics(kafka: Brokers, timeout_s: float = 15) -> set[str]:
    w = Watched(kafka)
    return set(w.metadata(w.admin(), timeout_s=timeout_s).topics)


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


def watermarks(kafka: Brokers, topic: str) -> dict[int, tuple[int, int]]:
    """(earliest, end) offset per partition of `topic`."""
    from confluent_kafka import Consumer, TopicPartition

    w = Watched(kafka)
    consumer = Consumer(w.conf(**{"group.id": "cdc-watermarks", "enable.auto.commit": False}))
    try:
        meta = w.metadata(consumer, topic).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15) for p in meta.partitions}
    except KafkaException as e:
        raise w.failure(e) from None
    finally:
        consumer.close()


def end_offsets(kafka: Brokers, topics: list[str]) -> dict[str, dict[int, int]]:
    """The end offset of each partition of each of `topics` that exists, in one metadata
    request and one offsets request, whatever the number of topics."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    w = Watched(kafka)
    client = w.admin()
    meta = w.metadata(client).topics  # the whole cluster's: asking for a topic by name may create it
    wanted = [TopicPartition(t, p) for t in sorted(set(topics))
              if t in meta and meta[t].error is None for p in meta[t].partitions]
    if not wanted:
        return {}
    out: dict[str, dict[int, int]] = {}
    try:
        for tp, found in client.list_offsets({tp: OffsetSpec.latest() for tp in wanted},
                                             request_timeout=15).items():
            out.setdefault(tp.topic, {})[tp.partition] = found.result().offset
    except KafkaException as e:
        raise w.failure(e) from None
    return out


def offsets_at(kafka: Brokers, topic: str, ms: int) -> dict[int, int | None]:
    """Each partition's first offset whose record time is at or after `ms` (epoch
    milliseconds); None where no record is."""
    from confluent_kafka import Consumer, TopicPartition

    w = Watched(kafka)
    consumer = Consumer(w.conf(**{"group.id": "cdc-replay-window", "enable.auto.commit": False}))
    try:
        meta = w.metadata(consumer, topic).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        found = consumer.offsets_for_times([TopicPartition(topic, p, ms) for p in meta.partitions], timeout=15)
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in found}
    except KafkaException as e:
        raise w.failure(e) from None
    finally:
        consumer.close()


def record_times(kafka: Brokers, topic: str, offsets: dict[int, int], timeout_s: float = 15) -> dict[int, int | None]:
    """The time (epoch milliseconds) of the record at each partition's offset, or of the
    first one kept after it; None where no record was read within `timeout_s`."""
    found = {p: records[0].timestamp()[1] if records else None
             for p, records in read_records(kafka, topic, offsets, 1, timeout_s).items()}
    return {p: found.get(p) for p in offsets}


def tail_record_bytes(kafka: Brokers, topic: str, per_partition: int = 50, timeout_s: float = 10) -> float | None:
    """The mean size (key, value and headers, in bytes) of the newest records of `topic`, up
    to `per_partition` of each partition; None when the topic holds none."""
    starts = {p: max(lo, hi - per_partition) for p, (lo, hi) in watermarks(kafka, topic).items() if hi > lo}
    records = [m for found in read_records(kafka, topic, starts, per_partition, timeout_s).values() for m in found]
    if not records:
        return None
    sizes = [len(m.key() or b"") + len(m.value() or b"") + sum(len(k) + len(v or b"") for k, v in m.headers() or [])
             for m in records]
    return sum(sizes) / len(sizes)


def read_records(kafka: Brokers, topic: str, offsets: dict[int, int], per_partition: int,
                 timeout_s: float = 15) -> dict[int, list]:
    """Up to `per_partition` records of each partition from its offset (or the first one kept
    after it), read until each partition has them or ends, or `timeout_s` passes."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    w = Watched(kafka)
    consumer = Consumer(w.conf(**{"group.id": "cdc-read-records", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "enable.partition.eof": True}))
    found: dict[int, list] = {p: [] for p in offsets}
    done: set[int] = set()
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
        deadline = time.monotonic() + timeout_s
        while len(done) < len(offsets) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.partition() in done:
                continue
            if msg.error() is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                raise DependencyError(f"Kafka at {w.access.bootstrap}: cannot read {topic}: {msg.error()}")
            if msg.error() is None:
                found[msg.partition()].append(msg)
            if msg.error() is not None or len(found[msg.partition()]) >= per_partition:
                done.add(msg.partition())
                consumer.pause([TopicPartition(topic, msg.partition())])
    except KafkaException as e:
        raise w.failure(e) from None
    finally:
        consumer.close()
    return found


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


def topic_id(kafka: Brokers, topic: str) -> str | None:
    """Kafka's id of the topic (a recreated topic gets a new one), or None if unknown."""
    from confluent_kafka import TopicCollection

    w = Watched(kafka)
    client = w.admin()
    try:
        desc = client.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(30)
    except KafkaException as e:
        if "UNKNOWN_TOPIC" in str(e):
            return None
        raise w.failure(e) from None
    return str(desc.topic_id) if getattr(desc, "topic_id", None) is not None else None
