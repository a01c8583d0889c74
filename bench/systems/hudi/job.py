"""Apache Hudi 1.2.0 on Spark 3.5 as its Debezium ingestion configures it: the topic read as
a batch (in chunks of `--batch` offsets, each one Hudi commit), the envelope flattened as
Hudi's `PostgresDebeziumSource` flattens it (`after.*`, or `before.*` for a delete, beside
`_change_operation_type`, `_event_lsn` and the other Debezium columns), and upserted with
the payload class `PostgresDebeziumAvroPayload` ordered by `_event_lsn`.

    python job.py --jars DIR --topic T --end OFFSET --table DIR --out DIR [--table-type MERGE_ON_READ] [--start OFFSET]

With `--start`, it reads from that offset into the table an earlier run left.

With `--follow`, it follows the topic as it is written until `--end`: each commit takes what
the topic holds beyond the last one (at most `--batch` offsets), and a line
`{"visible": <time>, "next": <offset>}` is printed after it. Prints one JSON line at the end:
its start, ready (session up) and committed times, events, commits."""
import argparse
import glob
import json
import os
import shutil
import time

started = time.time()

from pyspark.sql import SparkSession  # noqa: E402

PAYLOAD = "org.apache.hudi.common.model.debezium.PostgresDebeziumAvroPayload"
ROW = "STRUCT<id: BIGINT, v: STRING, n: STRING, at: STRING>"
ENVELOPE = (f"STRUCT<payload: STRUCT<before: {ROW}, after: {ROW}, op: STRING, ts_ms: BIGINT, "
            "source: STRUCT<name: STRING, schema: STRING, ts_ms: BIGINT, txId: BIGINT, lsn: BIGINT, xmin: BIGINT>>>")
META = ["p.op AS _change_operation_type", "p.ts_ms AS _upstream_event_processed_ts_ms",
        "p.source.name AS db_shard_source_partition", "p.source.schema AS db_schema_source_partition",
        "p.source.ts_ms AS _event_origin_ts_ms", "p.source.txId AS _event_tx_id",
        "p.source.lsn AS _event_lsn", "p.source.xmin AS _event_xmin"]


MERGE_WORDS = ("merge", "payload", "partial", "ordering", "precombine", "version", "delete")


def options(name: str, table_type: str) -> dict:
    return {
        "hoodie.table.name": name,
        "hoodie.datasource.write.table.type": table_type,
        "hoodie.datasource.write.operation": "upsert",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "_event_lsn",
        "hoodie.datasource.write.payload.class": PAYLOAD,
        "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
        "hoodie.datasource.write.partitionpath.field": "",
        "hoodie.upsert.shuffle.parallelism": "2",
        "hoodie.insert.shuffle.parallelism": "2",
    }


def session(jars: str, memory: str) -> SparkSession:
    return (SparkSession.builder.master("local[2]").appName("bench-systems-hudi")
            .config("spark.driver.memory", memory)
            .config("spark.jars", ",".join(sorted(glob.glob(os.path.join(jars, "*.jar")))))
            .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
            .config("spark.kryo.registrator", "org.apache.spark.HoodieSparkKryoRegistrar")
            .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.enabled", "false")
            .getOrCreate())


def flattened(spark, bootstrap: str, topic: str, start: int, end: int):
    raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", json.dumps({topic: {"0": start}}))
           .option("endingOffsets", json.dumps({topic: {"0": end}})).load())
    events = raw.where("value IS NOT NULL").selectExpr(f"from_json(CAST(value AS STRING), '{ENVELOPE}').payload AS p")
    upserts = events.where("p.op <> 'd'").selectExpr(*META, "p.after.*")
    deletes = events.where("p.op = 'd'").selectExpr(*META, "p.before.*")
    return upserts.unionByName(deletes)


def end_offsets(spark, bootstrap: str, topic: str):
    """A function giving the topic's end offset now (partition 0), by the JVM's Kafka client."""
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    props.put("bootstrap.servers", bootstrap)
    for k in ("key.deserializer", "value.deserializer"):
        props.put(k, "org.apache.kafka.common.serialization.ByteArrayDeserializer")
    consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)
    partition = jvm.java.util.Collections.singletonList(jvm.org.apache.kafka.common.TopicPartition(topic, 0))
    return lambda: consumer.endOffsets(partition).get(partition.get(0))


def chunks(spark, args):
    """The offset ranges of the commits: `--batch` offsets each; following, what is there."""
    if not args.follow:
        yield from ((s, min(s + args.batch, args.end)) for s in range(args.start, args.end, args.batch))
        return
    end_now, start = end_offsets(spark, args.bootstrap, args.topic), args.start
    while start < args.end:
        high = min(end_now(), args.end, start + args.batch)
        if high > start:
            yield start, high
            start = high
        else:
            time.sleep(0.05)


def merge_config(table: str) -> dict:
    """The table's settings that decide how it merges, as Hudi wrote them in hoodie.properties."""
    with open(os.path.join(table, ".hoodie", "hoodie.properties")) as f:
        pairs = (line.split("=", 1) for line in f.read().splitlines() if "=" in line and not line.startswith("#"))
        return {k: v for k, v in pairs if any(w in k for w in MERGE_WORDS)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jars", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--end", type=int, required=True, help="the topic's end offset (partition 0)")
    parser.add_argument("--table", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--table-type", default="COPY_ON_WRITE", choices=["COPY_ON_WRITE", "MERGE_ON_READ"])
    parser.add_argument("--memory", default="3g")
    parser.add_argument("--precreate", action="store_true",
                        help="create the table with an empty commit before the first batch")
    parser.add_argument("--follow", action="store_true", help="follow the topic as it is written until --end")
    parser.add_argument("--start", type=int, default=0, help="read from this offset into the table left before")
    args = parser.parse_args()
    spark = session(args.jars, args.memory)
    spark.sparkContext.setLogLevel("WARN")
    ready = time.time()
    if not args.start:
        shutil.rmtree(args.table, ignore_errors=True)
    opts = options("systems_hudi", args.table_type)
    commits = 0
    if args.precreate and not args.start:
        (flattened(spark, args.bootstrap, args.topic, 0, 0)
         .write.format("hudi").options(**opts).mode("append").save(args.table))
    for start, end in chunks(spark, args):
        (flattened(spark, args.bootstrap, args.topic, start, end)
         .write.format("hudi").options(**opts).mode("append").save(args.table))
        commits += 1
        if args.follow:
            print(json.dumps({"visible": time.time(), "next": end}), flush=True)
    committed = time.time()
    shutil.rmtree(args.out, ignore_errors=True)
    spark.read.format("hudi").load(args.table).select("id", "v", "n").write.parquet(args.out)
    print(json.dumps({"started": started, "ready": ready, "committed": committed, "events": args.end - args.start,
                      "batches": commits, "table_config": merge_config(args.table)}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
