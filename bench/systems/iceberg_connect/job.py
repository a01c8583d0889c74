"""Apache Iceberg's Kafka Connect sink as its documentation sets it up for Debezium: a Connect
worker of its own (standalone, on the Kafka Connect runtime the stack runs) with the sink
connector over the topic, Iceberg's `DebeziumTransform` making each change event a row of
the changed table with a `_cdc` column (op, offset, source), into a table the sink creates
(`iceberg.tables.auto-create-enabled`) in a Hadoop catalog, committed every
`--commit-interval-ms` (the sink's default: 300,000, five minutes). The sink appends: an
update or a delete is one more row, never a change of one. Its control topic is made by the
broker on first use.

    python job.py --jars DIR --kafka-jars DIR --bootstrap HOST:PORT --topic T --end OFFSET --table DIR --out FILE

Prints a line `{"visible", "next"}` for each snapshot as it appears (`next`: the records it
holds, one row each), then one JSON line: its start, ready (the sink's task running) and
committed (the snapshot holding every record up to `--end`) times, events, snapshots. It
fails when the sink commits nothing for three commit intervals (at least 120 s) with records
of the topic left out. The worker logs to `<table>.connect.log`."""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

started = time.time()

import pyarrow.parquet as pq  # noqa: E402
from pyiceberg.table import StaticTable  # noqa: E402

TABLE = ("bench", "systems")
COMMIT_INTERVAL_MS = 300_000  # the sink's default
POLL_S = 0.1
LOG_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_properties(path: str, props: dict) -> None:
    with open(path, "w") as f:
        for k, v in props.items():
            f.write(f"{k}={str(v).replace(chr(92), chr(92) * 2)}\n")


def current_metadata(warehouse: str) -> str | None:
    """The path of the table's current metadata file, or None before the table exists."""
    meta = os.path.join(warehouse, *TABLE, "metadata")
    try:
        with open(os.path.join(meta, "version-hint.text")) as f:
            version = f.read().strip()
    except FileNotFoundError:
        return None
    path = os.path.join(meta, f"v{version}.metadata.json")
    return path if version and os.path.exists(path) else None


def snapshots(path: str) -> list[tuple[float, int]]:
    """(commit time in seconds, records in the table) of each snapshot, oldest first."""
    with open(path) as f:
        doc = json.load(f)
    return sorted((s["timestamp-ms"] / 1000, int(s["summary"].get("total-records", 0)))
                  for s in doc.get("snapshots", []))


def task_running(port: int, name: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/connectors/{name}/status", timeout=2) as r:
            status = json.load(r)
    except OSError:
        return False
    states = [t["state"] for t in status.get("tasks", [])]
    if "FAILED" in states:
        raise SystemExit(f"the sink's task failed: {status['tasks'][0].get('trace', '')[:2000]}")
    return bool(states) and all(s == "RUNNING" for s in states)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jars", required=True, help="the plugin.path holding the sink's plugin directory")
    parser.add_argument("--kafka-jars", required=True, help="the Kafka Connect runtime's jars")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--end", type=int, required=True, help="the topic's end offset (partition 0)")
    parser.add_argument("--table", required=True, help="the Hadoop catalog's warehouse directory")
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, help="unused: the sink commits on its interval")
    parser.add_argument("--commit-interval-ms", type=int, default=COMMIT_INTERVAL_MS)
    parser.add_argument("--memory", default="1g")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    warehouse, work = os.path.abspath(args.table), os.path.abspath(args.table) + ".connect"
    for d in (warehouse, work):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(work)
    port, name = free_port(), f"bench-systems-iceberg-{int(started * 1000)}"
    write_properties(os.path.join(work, "worker.properties"), {
        "bootstrap.servers": args.bootstrap,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "true", "value.converter.schemas.enable": "true",
        "offset.storage.file.filename": os.path.join(work, "offsets"),
        "plugin.path": os.path.abspath(args.jars), "listeners": f"http://127.0.0.1:{port}"})
    write_properties(os.path.join(work, "connector.properties"), {
        "name": name, "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector", "tasks.max": "1",
        "topics": args.topic,
        "transforms": "debezium",
        "transforms.debezium.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
        "iceberg.tables": ".".join(TABLE), "iceberg.tables.auto-create-enabled": "true",
        "iceberg.catalog.type": "hadoop", "iceberg.catalog.warehouse": f"file://{warehouse}",
        "iceberg.control.topic": f"{name}-control",
        "iceberg.control.commit.interval-ms": str(args.commit_interval_ms)})
    log = open(args.table.rstrip("/") + ".connect.log", "w")
    worker = subprocess.Popen(
        ["java", f"-Xmx{args.memory}", f"-Dlog4j2.configurationFile={LOG_CONFIG}",
         "-cp", os.path.join(os.path.abspath(args.kafka_jars), "*"),
         "org.apache.kafka.connect.cli.ConnectStandalone", os.path.join(work, "worker.properties"),
         os.path.join(work, "connector.properties")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + args.timeout
        while not task_running(port, name):
            if worker.poll() is not None or time.time() > deadline:
                raise SystemExit(f"the Connect worker did not start the sink (exit {worker.poll()})")
            time.sleep(POLL_S)
        ready, seen, committed, last = time.time(), 0, None, time.time()
        stall_s = max(120.0, 3 * args.commit_interval_ms / 1000)
        while committed is None:
            if worker.poll() is not None or time.time() > deadline:
                raise SystemExit(f"the sink did not commit offset {args.end} (worker exit {worker.poll()})")
            if seen and time.time() - last > stall_s:
                raise SystemExit(f"the sink committed nothing for {stall_s:.0f}s with {args.end - seen:,} records of "
                                 f"the topic not committed ({seen:,} of {args.end:,} are)")
            path = current_metadata(warehouse)
            for at, records in snapshots(path) if path else []:
                if records > seen:
                    print(json.dumps({"visible": at, "next": records}), flush=True)
                    seen, last = records, time.time()
                if records >= args.end and committed is None:
                    committed, metadata = at, path
            time.sleep(POLL_S)
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
    table = StaticTable.from_metadata(metadata)
    pq.write_table(table.scan(selected_fields=("id", "v", "n")).to_arrow(), args.out)
    print(json.dumps({"started": started, "ready": ready, "committed": committed, "events": args.end,
                      "snapshots": len(table.snapshots()), "rows": seen,
                      "commit_interval_ms": args.commit_interval_ms}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
