"""Flink SQL 2.0 as its documentation writes a Debezium pipeline: a Kafka table in the
`debezium-json` format (schemas included, as Kafka Connect's JSON converter writes them),
bounded to the topic's end offset, upserted by `INSERT INTO` into a primary-key table:
Apache Iceberg's (format 2, `write.upsert.enabled`, a Hadoop catalog) or Apache Paimon's
(its defaults, a filesystem catalog). Both sinks commit on checkpoints; the job ends with
its source, after a final checkpoint. The table is read back with Flink batch SQL.

    python job.py --sink iceberg|paimon --jars DIR --topic T --end OFFSET --table DIR --out FILE [--start OFFSET]

With `--start`, the source starts at that offset and the job writes into the table an earlier
run left.

Prints one JSON line: its start, ready (JVM up) and committed times, events, the table's
snapshots and the checkpoint interval. The JVM logs to `<table>.jvm.log`."""
import argparse
import glob
import json
import os
import shutil
import sys
import time

started = time.time()

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

CHECKPOINT_INTERVAL = "10 s"  # as in Paimon's Flink quick start, for both sinks: each commits on a checkpoint
GROUP = "bench-systems-flink"  # the source commits its offsets to it on each completed checkpoint
HADOOP = ("hadoop-client-api-", "hadoop-client-runtime-", "commons-logging-")
SOURCE = """CREATE TABLE backlog (id BIGINT, v STRING, n DECIMAL(12, 2)) WITH (
  'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
  'properties.group.id' = '{group}', {startup},
  'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = 'partition:0,offset:{end}',
  'format' = 'debezium-json', 'debezium-json.schema-include' = 'true'{lenient})"""
EARLIEST = "'scan.startup.mode' = 'earliest-offset'"
AT_OFFSET = "'scan.startup.mode' = 'specific-offsets', 'scan.startup.specific-offsets' = 'partition:0,offset:{start}'"
IGNORE_PARSE_ERRORS = ", 'debezium-json.ignore-parse-errors' = 'true'"
CATALOGS = {
    "iceberg": "CREATE CATALOG lake WITH ('type' = 'iceberg', 'catalog-type' = 'hadoop', 'warehouse' = '{uri}')",
    "paimon": "CREATE CATALOG lake WITH ('type' = 'paimon', 'warehouse' = '{uri}')",
}
TARGET = "CREATE TABLE IF NOT EXISTS lake.bench.systems (id BIGINT, v STRING, n DECIMAL(12, 2), PRIMARY KEY (id) NOT ENFORCED)"
TABLE_OPTIONS = {"iceberg": " WITH ('format-version' = '2', 'write.upsert.enabled' = 'true')", "paimon": ""}


def classpath(jars: str) -> tuple[list[str], list[str]]:
    """The connector jars (the job's `pipeline.jars`) and the Hadoop client jars, which go on
    the JVM's classpath (`HADOOP_CLASSPATH`) as Flink's Hadoop integration expects."""
    every = sorted(glob.glob(os.path.join(jars, "*.jar")))
    hadoop = [j for j in every if os.path.basename(j).startswith(HADOOP)]
    return [j for j in every if j not in hadoop], hadoop


def environment(connectors: list[str], streaming: bool, sink: str, checkpoint_interval: str = CHECKPOINT_INTERVAL,
                materialize: bool = True):
    """A table environment with the connectors, parallelism 2 and, streaming, checkpoints;
    `materialize` false: no upsert materializer before the sink (Flink's
    `table.exec.sink.upsert-materialize` NONE)."""
    from pyflink.table import EnvironmentSettings, TableEnvironment
    settings = EnvironmentSettings.in_streaming_mode() if streaming else EnvironmentSettings.in_batch_mode()
    env = TableEnvironment.create(settings)
    config = env.get_config()
    config.set("pipeline.jars", ";".join(f"file://{j}" for j in connectors))
    config.set("parallelism.default", "2")
    config.set("restart-strategy.type", "none")  # a failed job fails the run (checkpointing restarts it for ever)
    if streaming:
        config.set("execution.checkpointing.interval", checkpoint_interval)
    if sink == "paimon" or not materialize:  # Paimon's sink refuses Flink's upsert materializer, as its docs say
        config.set("table.exec.sink.upsert-materialize", "NONE")
    return env


def root_cause(error: Exception) -> str:
    """The innermost `Caused by:` of a Java exception's text (its first line)."""
    causes = [line for line in str(error).splitlines() if line.startswith("Caused by: ")]
    return (causes[-1] if causes else str(error).splitlines()[0])[:2000]


def read_back(env) -> tuple[pa.Table, int]:
    """The table's rows (id, v, n) and its snapshots (commits), read with Flink batch SQL."""
    ids, vs, ns = [], [], []
    with env.execute_sql("SELECT id, v, n FROM lake.bench.systems").collect() as rows:
        for row in rows:
            ids.append(row[0])
            vs.append(row[1])
            ns.append(row[2])
    with env.execute_sql("SELECT count(*) FROM lake.bench.`systems$snapshots`").collect() as rows:
        snapshots = next(iter(rows))[0]
    table = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(vs, pa.string()),
                      "n": pa.array(ns, pa.decimal128(12, 2))})
    return table, snapshots


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sink", required=True, choices=sorted(CATALOGS))
    parser.add_argument("--jars", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--end", type=int, required=True, help="the topic's end offset (partition 0)")
    parser.add_argument("--table", required=True, help="the catalog's warehouse directory")
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, help="unused: the sinks commit on checkpoints")
    parser.add_argument("--memory", default="3g")
    parser.add_argument("--checkpoint-interval", default=CHECKPOINT_INTERVAL,
                        help="how often the sinks commit (Flink's `execution.checkpointing.interval`)")
    parser.add_argument("--ignore-parse-errors", action="store_true",
                        help="'debezium-json.ignore-parse-errors': skip the records the format cannot read")
    parser.add_argument("--start", type=int, default=0, help="read from this offset into the table left before")
    parser.add_argument("--no-upsert-materialize", action="store_true",
                        help="'table.exec.sink.upsert-materialize' NONE (Paimon's sink always has it)")
    args = parser.parse_args()
    connectors, hadoop = classpath(args.jars)
    os.environ["HADOOP_CLASSPATH"] = ":".join(hadoop)
    os.environ["JVM_ARGS"] = f"-Xmx{args.memory}"
    os.environ["LOG4J_PROPERTIES"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j.properties")
    os.environ["FLINK_PEER_LOG"] = os.path.abspath(args.table) + ".jvm.log"
    if not args.start:
        shutil.rmtree(args.table, ignore_errors=True)
    env = environment(connectors, True, args.sink, args.checkpoint_interval, not args.no_upsert_materialize)
    ready = time.time()
    catalog = CATALOGS[args.sink].format(uri=f"file://{os.path.abspath(args.table)}")
    env.execute_sql(catalog)
    env.execute_sql("CREATE DATABASE IF NOT EXISTS lake.bench")
    env.execute_sql(TARGET + TABLE_OPTIONS[args.sink])
    env.execute_sql(SOURCE.format(topic=args.topic, bootstrap=args.bootstrap, end=args.end, group=GROUP,
                                  startup=AT_OFFSET.format(start=args.start) if args.start else EARLIEST,
                                  lenient=IGNORE_PARSE_ERRORS if args.ignore_parse_errors else ""))
    try:
        env.execute_sql("INSERT INTO lake.bench.systems SELECT id, v, n FROM backlog").wait()
    except Exception as e:  # the Java trace is long: end the log with its cause
        print(f"the Flink job failed: {root_cause(e)}", file=sys.stderr, flush=True)
        raise SystemExit(1)
    committed = time.time()
    batch = environment(connectors, False, args.sink)
    batch.execute_sql(catalog)
    result, snapshots = read_back(batch)
    pq.write_table(result, args.out)
    print(json.dumps({"started": started, "ready": ready, "committed": committed, "events": args.end - args.start,
                      "snapshots": snapshots, "checkpoint_interval": args.checkpoint_interval}), flush=True)


if __name__ == "__main__":
    main()
