"""Kafka's topics, offsets and records as cdc reads them: which topics exist, each
partition's watermarks, end offsets and offsets by time, a topic's id, and its newest
records (their size, their times). Reads only: what creates or deletes a topic is
register/topics.py's."""
from __future__ import annotations

import re
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from cdc.config.clients import KafkaAccess
from cdc.errors import CdcError, ConfigError, DependencyError

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


# What a partition answers while its leader is elected (a topic just created, a broker
# restarting): asked again, for a while, rather than taken for a broker that is down.
ELECTING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)


def while_electing(ask, timeout_s: float = 15, clock=time.monotonic, sleep=time.sleep):
    """`ask()`'s answer, asked again in waits of 0.1 s, 0.2 s ... up to `timeout_s` while
    it raises a KafkaException of a partition whose leader is being elected."""
    deadline, wait = clock() + timeout_s, 0.1
    while True:
        try:
            return ask()
        except KafkaException as e:
            if e.args[0].code() not in ELECTING or clock() + wait > deadline:
                raise
            sleep(wait)
            wait = min(wait * 2, 2.0)


def checked(partitions: list) -> list:
    """`partitions` (TopicPartitions a request answered), or the first one's error raised."""
    for tp in partitions:
        if tp.error is not None:
            raise KafkaException(tp.error)
    return partitions


def watermarks(kafka: Brokers, topic: str) -> dict[int, tuple[int, int]]:
    """(earliest, end) offset per partition of `topic`."""
    from confluent_kafka import Consumer, TopicPartition

    w = Watched(kafka)
    consumer = Consumer(w.conf(**{"group.id": "cdc-watermarks", "enable.auto.commit": False}))
    try:
        meta = w.metadata(consumer, topic).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        return {p: while_electing(lambda tp=TopicPartition(topic, p): consumer.get_watermark_offsets(tp, timeout=15))
                for p in meta.partitions}
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

    def ask() -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for tp, found in client.list_offsets({tp: OffsetSpec.latest() for tp in wanted},
                                             request_timeout=15).items():
            out.setdefault(tp.topic, {})[tp.partition] = found.result().offset
        return out

    try:
        return while_electing(ask)
    except KafkaException as e:
        raise w.failure(e) from None


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
        found = while_electing(lambda: checked(consumer.offsets_for_times(
            [TopicPartition(topic, p, ms) for p in meta.partitions], timeout=15)))
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


def tail_record_bytes(kafka: Brokers, topic: str, per_partition: int = 50, timeout_s: float = 10,
                      marks: dict[int, tuple[int, int]] | None = None) -> float | None:
    """The mean size (key, value and headers, in bytes) of the newest records of `topic`, up
    to `per_partition` of each partition (`marks`: its watermarks, if read already); None
    when the topic holds none."""
    marks = watermarks(kafka, topic) if marks is None else marks
    starts = {p: max(lo, hi - per_partition) for p, (lo, hi) in marks.items() if hi > lo}
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
    from confluent_kafka import Consumer, TopicPartition

    w = Watched(kafka)
    # A fetch at a partition's end returns at once (the broker's default wait is 500 ms): the
    # end is what tells that a partition has no more records to read.
    consumer = Consumer(w.conf(**{"group.id": "cdc-read-records", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "enable.partition.eof": True,
                                  "fetch.wait.max.ms": 10}))
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


class RecordProbe:
    """One consumer that reads single records of a topic at chosen offsets (a binary search's
    few reads: control/barrier.py `first_uncounted`)."""

    def __init__(self, kafka: Brokers, topic: str, timeout_s: float = 15):
        from confluent_kafka import Consumer

        self.topic, self.timeout_s, self.watched = topic, timeout_s, Watched(kafka)
        self.consumer = Consumer(self.watched.conf(**{
            "group.id": "cdc-probe-records", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": True, "fetch.wait.max.ms": 10}))

    def __enter__(self) -> "RecordProbe":
        return self

    def __exit__(self, *exc) -> None:
        self.consumer.close()

    def at(self, partition: int, offset: int):
        """The record at `offset` of the partition, or the first one kept after it; None at
        the partition's end."""
        from confluent_kafka import TopicPartition

        try:
            self.consumer.assign([TopicPartition(self.topic, partition, offset)])
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline:
                msg = self.consumer.poll(0.5)
                if msg is None or msg.partition() != partition:
                    continue
                if msg.error() is None:
                    if msg.offset() >= offset:
                        return msg
                    continue
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return None
                raise DependencyError(f"Kafka at {self.watched.access.bootstrap}: cannot read {self.topic}: "
                                      f"{msg.error()}")
        except KafkaException as e:
            raise self.watched.failure(e) from None
        raise DependencyError(f"Kafka at {self.watched.access.bootstrap}: no record of {self.topic} partition "
                              f"{partition} at offset {offset} within {self.timeout_s:.0f} s",
                              hint="check the broker's health (`cdc stack status`)")
