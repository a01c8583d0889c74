"""How the job reads Kafka: the source's options, a shared query's table's range of a batch,
and how many records a batch takes."""
from __future__ import annotations

import json

from cdc.config.clients import java_kafka_properties
from cdc.config.models import Settings, TableRegistration
from cdc.jobs import shared
from cdc.jobs.backlog import auto_batch_cap
from cdc.log import log
from cdc.sinks.direct import KafkaRecords

FETCH_WAIT_MS = 20  # the longest a task's fetch of its records waits at the broker for more
FETCH_PARTITION_BYTES = 1 << 20  # the most a fetch takes of one partition (Kafka's default)
Range = tuple[dict[int, int], dict[int, int]]  # a topic's start and end offsets, by partition


def batch_cap(reg: TableRegistration, heap_bytes: int, record_bytes: float | None, batches: int) -> int:
    """The most records a batch of the table takes when its registration sets no
    `max_offsets_per_trigger`: sized from the memory and the size of the topic's newest
    records (backlog.py), `batches` under way at once sharing the memory."""
    cap = auto_batch_cap(heap_bytes, record_bytes, batches)
    log(f"batches of at most {cap:,} records"
        + (f" (about {record_bytes:,.0f} bytes a record)" if record_bytes else " (no record to size yet)"),
        table=reg.name, event="batch-cap", records=cap, record_bytes=round(record_bytes or 0))
    return cap


def kafka_options(spark, settings: Settings) -> dict[str, str]:
    """The Kafka source's options as every read of the job sets them (what to read, from
    where, and how much a batch takes are the read's)."""
    return {
        "kafka.bootstrap.servers": settings.kafka_bootstrap,
        **{f"kafka.{k}": v for k, v in java_kafka_properties(settings).items()},
        "failOnDataLoss": "true",
        "includeHeaders": "true",  # a key change's two events carry theirs
        # A fetch that finds no record waits this long at the broker (Kafka's default
        # 500 ms), and a small batch's read met one: a batch of 5 records read in 0.57 s.
        "kafka.fetch.max.wait.ms": str(FETCH_WAIT_MS),
        # What a fetch takes of a partition, and so what each cached consumer holds between
        # batches (the driver's JVM keeps one per partition read): a record bigger than
        # this still comes whole, as the first batch of its fetch.
        "kafka.max.partition.fetch.bytes": str(FETCH_PARTITION_BYTES),
        # A topic with fewer partitions than cores is still read and decoded on every core.
        "minPartitions": str(spark.sparkContext.defaultParallelism),
    }


def kafka_records(spark, settings: Settings, ranges: dict[str, Range]) -> KafkaRecords:
    """The records of each topic of `ranges` (topic -> (start, end), as `kafka_ranges` reads
    them) for the direct path's task to read itself, with one Kafka consumer of the Kafka
    source's settings (`kafka_options`). It is of no group (it commits nothing, and is assigned
    its partitions), so every read of the job shares the consumers the JVM keeps."""
    options = kafka_options(spark, settings)
    consumer = {k.removeprefix("kafka."): v for k, v in options.items() if k.startswith("kafka.")}
    return KafkaRecords(spark, consumer, ranges)


def kafka_range(spark, settings: Settings, topic: str, start: dict[int, int], end: dict[int, int], group: str):
    """The records of `topic` from `start` (a partition it lacks: from its earliest) up to
    `end`, each partition's, as a shared query's table reads its part of a batch: the
    columns of the streaming source's batches. The reads of one `group` share their Kafka
    consumers: the executors keep them cached by group and partition, and a batch read
    otherwise names a new group each time, so each read made (and connected) new ones.
    Partitions are assigned, never subscribed, and no offset is committed to the group."""
    return kafka_ranges(spark, settings, {topic: (start, end)}, group)


def kafka_ranges(spark, settings: Settings, ranges: dict[str, Range], group: str):
    """The records of each topic of `ranges` (topic -> (start, end)), as `kafka_range` reads one."""
    return (spark.read.format("kafka").options(**kafka_options(spark, settings))
            .option("kafka.group.id", group)
            .option("assign", json.dumps({topic: sorted(end) for topic, (_, end) in ranges.items()}))
            .option("startingOffsets", json.dumps({topic: {str(p): start.get(p, shared.EARLIEST) for p in end}
                                                   for topic, (start, end) in ranges.items()}))
            .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in end.items()}
                                                 for topic, (_, end) in ranges.items()}))
            .load())


def spanning(ranges: list[tuple[str, dict[int, int], dict[int, int]]]) -> dict[str, Range]:
    """One read's range of each topic that covers the (topic, start, end) `ranges` of several
    tables: the lowest start (a partition a table's start lacks: from the earliest) and the
    highest end of each partition."""
    out: dict[str, Range] = {}
    for topic, start, end in ranges:
        if topic not in out:
            out[topic] = (dict(start), dict(end))
            continue
        low, high = out[topic]
        for p in set(low) | set(start) | set(end) | set(high):
            if p not in low or p not in start:
                low.pop(p, None)
            else:
                low[p] = min(low[p], start[p])
        for p, o in end.items():
            high[p] = max(o, high.get(p, o))
    return out
