"""delta-rs as its documentation writes an upsert: a confluent-kafka consumer reads the
topic in batches of `--batch` records, flattens the Debezium envelope (`after`, or `before` for a delete), keeps
the last change per key by offset, and `DeltaTable.merge` applies it: matched and a delete,
delete; matched, update all; not matched and not a delete, insert all.

    python job.py --bootstrap HOST:PORT --topic T --table DIR --out result.parquet [--end OFFSET]
        [--start OFFSET] [--until OFFSET]

With `--start`, it reads from that offset into the table an earlier run left; with `--until`,
up to that offset rather than the topic's end.

With `--end`, it follows the topic as it is written until that offset, merging what each
poll got (at most `--batch` records or `--poll-s` seconds of them) and printing a line
`{"visible": <time>, "next": <offset>}` after each commit. Prints one JSON line at the end:
its start, ready (imports done) and committed times, events, batches."""
import argparse
import json
import shutil
import time

started = time.time()

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.string()), ("at", pa.string()),
                    ("_op", pa.string()), ("_lsn", pa.int64()), ("_offset", pa.int64())])


def flatten(offset: int, value: bytes) -> dict | None:
    payload = json.loads(value)["payload"]
    op = payload["op"]
    row = payload["before"] if op == "d" else payload["after"]
    if row is None:
        return None
    return {"id": row["id"], "v": row.get("v"), "n": row.get("n"), "at": row.get("at"), "_op": op,
            "_lsn": payload["source"].get("lsn"), "_offset": offset}


def batches(bootstrap: str, topic: str, size: int, end: int | None = None, poll_s: float = 5, start: int = 0,
            until: int | None = None):
    """(the last change per key, next offset) of each batch from offset `start`: `size`
    records each up to `until` (None: the topic's end now), or, following up to `end`, what
    each poll got."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-systems-deltars",
                         "enable.auto.commit": False, "fetch.max.bytes": 64 << 20})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    high, low = until or (high if end is None else end), max(low, start)
    consumer.assign([TopicPartition(topic, 0, low)])
    position, last, read = low, {}, 0
    while position < high:
        for msg in consumer.consume(num_messages=min(10_000, size - read), timeout=poll_s):
            if msg.error():
                raise RuntimeError(f"reading {topic}: {msg.error()}")
            position, read = msg.offset() + 1, read + 1
            if msg.value() is not None and (row := flatten(msg.offset(), msg.value())) is not None:
                last[row["id"]] = row  # the last change per key, by offset
            if read >= size or position >= high:
                break
        if read and (read >= size or position >= high or end is not None):
            yield pa.Table.from_pylist(list(last.values()), schema=SCHEMA), position
            last, read = {}, 0
    consumer.close()


def upsert(table: DeltaTable, source: pa.Table) -> dict:
    return (table.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_delete(predicate="s._op = 'd'")
            .when_matched_update_all()
            .when_not_matched_insert_all(predicate="s._op <> 'd'")
            .execute())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--end", type=int, help="follow the topic up to this offset, merging what each poll got")
    parser.add_argument("--poll-s", type=float, default=0.2, help="following, the longest a poll waits")
    parser.add_argument("--start", type=int, default=0, help="read from this offset into the table left before")
    parser.add_argument("--until", type=int, help="read up to this offset, not the topic's end")
    args = parser.parse_args()
    ready = time.time()
    if not args.start:
        shutil.rmtree(args.table, ignore_errors=True)
        write_deltalake(args.table, SCHEMA.empty_table())
    table = DeltaTable(args.table)
    events, merged = args.start, 0
    follow = args.end is not None
    for source, events in batches(args.bootstrap, args.topic, args.batch, args.end, args.poll_s if follow else 5,
                                  args.start, args.until):
        upsert(table, source)
        merged += 1
        if follow:
            print(json.dumps({"visible": time.time(), "next": events}), flush=True)
    committed = time.time()
    result = DeltaTable(args.table).to_pyarrow_table(columns=["id", "v", "n"])
    pq.write_table(result, args.out)
    print(json.dumps({"started": started, "ready": ready, "committed": committed, "events": events - args.start,
                      "batches": merged, "version": DeltaTable(args.table).version()}), flush=True)


if __name__ == "__main__":
    main()
