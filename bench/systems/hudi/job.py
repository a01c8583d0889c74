"""Apache Hudi 1.2.0 on Spark 3.5 as its Debezium ingestion configures it: the topic read as
a batch (in chunks of `--batch` offsets, each one Hudi commit), the envelope flattened as
Hudi's `PostgresDebeziumSource` flattens it (`after.*`, or `before.*` for a delete, beside
`_change_operation_type`, `_event_lsn` and the other Debezium columns), and upserted with
the payload class `PostgresDebeziumAvroPayload` ordered by `_event_lsn`.

    python job.py --jars DIR --topic T --end OFFSET --table DIR --out DIR [--table-type MERGE_ON_READ]

Prints one JSON line: its start, ready (session up) and committed times, events, commits."""
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
    args = parser.parse_args()
    spark = session(args.jars, args.memory)
    spark.sparkContext.setLogLevel("WARN")
    ready = time.time()
    shutil.rmtree(args.table, ignore_errors=True)
    opts = options("systems_hudi", args.table_type)
    commits = 0
    if args.precreate:
        (flattened(spark, args.bootstrap, args.topic, 0, 0)
         .write.format("hudi").options(**opts).mode("append").save(args.table))
    for start in range(0, args.end, args.batch):
        (flattened(spark, args.bootstrap, args.topic, start, min(start + args.batch, args.end))
         .write.format("hudi").options(**opts).mode("append").save(args.table))
        commits += 1
    committed = time.time()
    shutil.rmtree(args.out, ignore_errors=True)
    spark.read.format("hudi").load(args.table).select("id", "v", "n").write.parquet(args.out)
    print(json.dumps({"started": started, "ready": ready, "committed": committed, "events": args.end,
                      "batches": commits, "table_config": merge_config(args.table)}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
