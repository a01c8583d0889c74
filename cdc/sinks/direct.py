"""The direct path into an Iceberg target (jvm/direct, `cdc.direct.DirectDelta`): a batch's
events deduped, guarded by the delete memory and written as a data file and deletion
vectors in one task, then committed as one RowDelta, with no MERGE planned; with
`cdc.direct.DirectBatch` (`write_batch`), the same task also decodes and counts the batch's
Kafka records (read by the task itself: `KafkaRecords`), with no query planned at all, and one
task does so for many tables' parts of a batch (`write_parts`). It does what
planning/merge.py's MERGE does in upsert mode, and only where that is provably the same
(`refusal`, and the batch's own reasons in jobs/plan.py); everything else goes through the
MERGE."""
from __future__ import annotations

import json
import time

from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from cdc.sinks.session import jvm_class

HELPER = "cdc.direct.DirectDelta"


def refusal(spark, table, key: tuple[str, ...], columns: tuple[str, ...]) -> str | None:
    """Why the Iceberg `table` (org.apache.iceberg.Table) cannot take a direct write of a batch
    of `columns` keyed by `key`: partitioned, below format version 3, a key type whose values
    do not compare exactly, a column of the batch it lacks or one the batch does not carry
    (None: it can)."""
    return jvm_class(spark, HELPER).refusal(table, list(key), list(columns))


def write(spark, ref: str, memory_ref: str, events, key: tuple[str, ...], columns: tuple[str, ...],
          floor: str | None, props: dict[str, str]) -> int:
    """Apply a batch's change `events` (decoded, of data `columns`) to the Iceberg target `ref`
    in one Spark job: its last change per key, guarded by each key's remembered delete in
    `memory_ref` and by the truncate `floor`, and its delete events appended to that memory;
    then one RowDelta stamped with `props` (none when nothing changes: the caller then commits
    `props` alone). Returns the deletes remembered."""
    summary = spark._jvm.java.util.HashMap()
    for k, v in props.items():
        summary.put(k, v)
    counts = jvm_class(spark, HELPER).applyEvents(spark._jsparkSession, ref, memory_ref, events._jdf, list(key),
                                                  list(columns), floor, summary)
    return int(counts[3])


BATCH_HELPER = "cdc.direct.DirectBatch"
UNSEEN = "a record schema not judged yet"  # DirectBatch.UNSEEN
COLUMNS = "the records' columns differ from the decoding's"  # DirectBatch.COLUMNS


def decoding(spark, decoded, raw_schema, ref: str):
    """A table's decoding kept for its batches (`cdc.direct.DirectBatch.Decoding`): `decoded` is
    the applier's decoding of an empty relation of the Kafka source's `raw_schema`, with the
    stats' columns (`DirectBatch.EXTRAS`); None when it is not a chain of projections."""
    return jvm_class(spark, BATCH_HELPER).compile(spark._jsparkSession, decoded._jdf,
                                                  spark._jsparkSession.parseDataType(raw_schema.json()), ref)


class Batch:
    """A batch decoded, counted and (unless `reason`) written by one task, not yet committed."""

    def __init__(self, spark, pending):
        self.spark, self.pending = spark, pending
        self.reason: str | None = pending.reason()
        self.cpu_s = 0.0

    def task_s(self) -> tuple[float, ...]:
        """Seconds: the task's decoding and counting its records, writing its files, of the
        decoding making its projections; the driver's preparing it; the task's reading the
        batch's records (of every part); of the writing, finding the current rows."""
        return tuple(n / 1e9 for n in self.pending.taskNanos())

    def stats(self) -> list[dict]:
        """Its stats per Kafka partition (jobs/plan.py's PartitionStats fields)."""
        return json.loads(self.pending.stats())

    def commit(self, props: dict[str, str]) -> int:
        """Its delete memory's file appended, then the target's RowDelta stamped with `props`
        (none when nothing changes: the caller then commits `props` alone); returns the deletes
        remembered. `cpu_s` is then the driver's CPU seconds of the commit: this Python
        thread's and the JVM thread's that committed."""
        began = time.thread_time()
        summary = self.spark._jvm.java.util.HashMap()
        for k, v in props.items():
            summary.put(k, v)
        counts = self.pending.commit(summary)
        self.cpu_s = time.thread_time() - began + counts[4] / 1e9
        return int(counts[3])

    def discard(self) -> None:
        """Delete the files it wrote (the batch then takes a query)."""
        self.pending.discard()


READ_TIMEOUT_MS = 120_000  # the longest the task's read waits for a partition's next record (Spark's own)
# The Kafka source's columns with its headers (Spark's KafkaRecordToRowConverter): the rows of
# a KafkaRecords read.
KAFKA_SOURCE_SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
    StructField("partition", IntegerType()), StructField("offset", LongType()),
    StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())])))])


class KafkaRecords:
    """The Kafka records of topics' `ranges` (topic -> (start, end): each partition's start
    offset, none: its first, up to its end) that the direct path's task reads itself with one
    Kafka consumer of `consumer` properties (jvm/direct, KafkaRead), where the Kafka source
    reads each partition apart after asking Kafka for their offsets in the driver. `schema`
    is the Kafka source's, as a DataFrame of its rows has it."""

    schema = KAFKA_SOURCE_SCHEMA

    def __init__(self, spark, consumer: dict[str, str], ranges: dict):
        self.jvm = jvm_class(spark, "cdc.direct.KafkaRead").of(
            consumer, {topic: [start, end] for topic, (start, end) in ranges.items()}, READ_TIMEOUT_MS)


def write_batch(spark, decoder, batch, ref: str, memory_ref: str, key: tuple[str, ...], columns: tuple[str, ...],
                floor: str | None, committed: dict[int, int], known: set[int] | None, toast: bool,
                limit: int, max_bytes: int = 0) -> Batch:
    """Decode the Kafka records `batch` (a KafkaRecords, or a DataFrame of the Kafka source's
    rows) with `decoder` (`decoding`) and write them to the Iceberg target `ref` as `write`
    does, in one Spark job of one task, leaving out each partition's records before its
    `committed` offset; the task writes nothing, and says why, at a record that needs a query
    (bad, a truncate, with `toast` a lacking unchanged value or a key change, a schema
    fingerprint not in `known`, more than `limit` records or `max_bytes` of them decoded, 0: an
    eighth of the heap) or for a target the direct path refuses."""
    pending = jvm_class(spark, BATCH_HELPER).run(spark._jsparkSession, decoder, *_source(spark, batch), ref,
                                                 memory_ref, list(key), list(columns), floor, dict(committed),
                                                 None if known is None else list(known), toast, limit, max_bytes)
    return Batch(spark, pending)


def part(spark, decoder, ref: str, memory_ref: str, topic: str, key: tuple[str, ...], columns: tuple[str, ...],
         floor: str | None, start: dict[int, int], end: dict[int, int], known: set[int] | None, toast: bool,
         limit: int):
    """Table `ref`'s part of a batch of many tables' records, for `write_parts`: the records of
    `topic` from `start` up to `end` (each partition's; one `start` lacks: from the first, one
    `end` lacks: to the last), decoded with `decoder` and written as `write_batch` does."""
    return jvm_class(spark, BATCH_HELPER).part(decoder, ref, memory_ref, topic, list(key), list(columns), floor,
                                               dict(start), dict(end), None if known is None else list(known),
                                               toast, limit)


def write_parts(spark, records, parts: list, max_bytes: int = 0) -> list[Batch]:
    """Decode and write the `parts` (`part`) of one batch, the `records` of their topics (a
    KafkaRecords, or a DataFrame of the Kafka source's rows), in one Spark job of one task:
    each part's Batch, in order, uncommitted. A part that needs a query says why
    (`Batch.reason`) and the others go on."""
    pending = jvm_class(spark, BATCH_HELPER).runAll(spark._jsparkSession, *_source(spark, records), parts, max_bytes)
    return [Batch(spark, p) for p in pending]


def _source(spark, records) -> tuple:
    """The arguments of the batch helper's records: a KafkaRecords's read and schema, or a DataFrame."""
    if isinstance(records, KafkaRecords):
        return records.jvm, spark._jsparkSession.parseDataType(records.schema.json())
    return (records._jdf,)
