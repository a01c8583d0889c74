"""The benchmark's workload: a change event recorded from the real Debezium connector,
change streams in exactly that shape produced straight into Kafka, and targets of a
given size written in bulk."""
from __future__ import annotations

import copy
import json
import random
import re
import shutil
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import functions as F

from cdc.config.clients import kafka_access
from cdc.config.models import TableRegistration
from cdc.planning.merge import DELETES_SUFFIX, table_ref
from cdc.register.connector import ConnectClient, connector_name, topic_for
from cdc.register.registrar import register
from cdc.control.kafka import watermarks
from cdc.register.topics import ensure_topics
from cdc.sinks.iceberg import ensure_table
from cdc.sinks.targets import table_columns
from cdc.sources import postgres

SCHEMA = "bench"
COLUMNS_SQL = "(id bigint PRIMARY KEY, v text, n numeric(12,2), at timestamptz)"
# Columns a wider shape adds after the benchmark's four, each with a value in the recorded row.
EXTRA_COLUMNS = ("integer DEFAULT 42", "text DEFAULT 'a text of some forty characters, as a name'",
                 "boolean DEFAULT true", "double precision DEFAULT 3.25", "date DEFAULT '2026-01-31'",
                 "timestamptz DEFAULT '2026-01-31 12:00:00+00'", "numeric(10,3) DEFAULT 1234.567",
                 "bigint DEFAULT 9000000000", "varchar(64) DEFAULT 'short'", "smallint DEFAULT 7")
WIDTHS = (4, 12, 36)  # the shapes of the many-tables section: columns of a table


def bench_settings(settings, work: Path):
    """cdc.yaml's settings with a tables directory of the benchmark's own, holding the
    project's registrations too (so registering keeps them captured)."""
    tables = work / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    for f in settings.path(settings.tables_dir).glob("*.yaml"):
        if not f.name.startswith(f"{SCHEMA}."):
            (tables / f.name).write_text(f.read_text())
    return settings.model_copy(update={"tables_dir": tables})


def registration(settings, name: str, captured: bool = False, source: str | None = None,
                 **options) -> TableRegistration:
    """A registration of `bench.<name>` (of the first source unless `source` is named). A
    `captured` one has a source table the connector captures, and its file goes into the
    benchmark's tables directory; the others are targets whose topics the benchmark fills itself."""
    source = source or next(iter(settings.sources))
    reg = TableRegistration(name=f"{SCHEMA}.{name}", source={"name": source, "schema": SCHEMA, "table": name},
                            options=options)
    if captured:
        text = f"name: {reg.name}\nsource:\n  name: {source}\n  schema: {SCHEMA}\n  table: {name}\n"
        if options:
            text += "options:\n" + "".join(f"  {k}: {v}\n" for k, v in options.items())
        (settings.path(settings.tables_dir) / f"{reg.name}.yaml").write_text(text)
    return reg


def columns_sql(width: int = 4) -> str:
    """The columns of a source table of `width` columns: the benchmark's four, then
    EXTRA_COLUMNS' types in turn."""
    extra = [f"c{i:02d} {EXTRA_COLUMNS[i % len(EXTRA_COLUMNS)]}" for i in range(width - 4)]
    return COLUMNS_SQL if not extra else COLUMNS_SQL[:-1] + ", " + ", ".join(extra) + ")"


def create_source_table(settings, reg: TableRegistration, rows: int = 0, width: int = 4) -> None:
    """The source table of `width` columns (columns_sql), emptied, holding `rows` rows."""
    with postgres.connect(settings, reg.source.name) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{SCHEMA}"')
        conn.execute(f'CREATE TABLE IF NOT EXISTS {postgres.qualified(reg)} {columns_sql(width)}')
        conn.execute(f"TRUNCATE {postgres.qualified(reg)}")
        if rows:
            conn.execute(f"INSERT INTO {postgres.qualified(reg)} SELECT g, md5(g::text), (g % 100000) + 0.25, "
                         f"now() FROM generate_series(0, {rows - 1}) g")


def template_name(width: int = 4) -> str:
    """The name of the registration whose target and recorded event give a shape's."""
    return "recorded" if width == 4 else f"recorded_w{width}"


def record_template(settings, width: int = 4) -> tuple[dict, dict]:
    """One real update event of a table of `width` columns (key and value documents),
    captured by the real connector."""
    key, value = recorded_update(settings, registration(settings, template_name(width), captured=True), width)
    key_doc, value_doc = json.loads(key), json.loads(value)
    if value_doc["payload"]["op"] != "u":
        raise RuntimeError(f"expected the recorded update, got an event of op {value_doc['payload']['op']}")
    return key_doc, value_doc


def recorded_update(settings, reg: TableRegistration, width: int = 4) -> tuple[bytes, bytes]:
    """The key and value, as Kafka holds them, of an update of `reg`'s source table (made
    for it, with one row, of `width` columns) captured by the real connector of its source."""
    create_source_table(settings, reg, rows=1, width=width)
    register(settings, [reg])
    with postgres.connect(settings, reg.source.name) as conn:
        conn.execute(f"UPDATE {postgres.qualified(reg)} SET v = md5(random()::text), n = n + 1 WHERE id = 0")
        marker = postgres.write_marker(conn, settings.sources[reg.source.name].signal_table)
    ConnectClient.of(settings).wait_captured(connector_name(reg.source.name), marker)
    topic = topic_for(reg.source.name, reg)
    consumer = Consumer(kafka_access(settings).client(**{"group.id": "cdc-bench",
                         "enable.auto.commit": False}))
    end = watermarks(kafka_access(settings), topic)[0][1]
    consumer.assign([TopicPartition(topic, 0, end - 1)])
    msg = consumer.poll(30)
    consumer.close()
    if msg is None or msg.value() is None:
        raise RuntimeError(f"expected the recorded update as the last event of {topic}, found none")
    return msg.key(), msg.value()


class Events:
    """Events in the recorded shape, with increasing LSNs and source times."""

    def __init__(self, key: dict, value: dict):
        self.key, self.value, self.lsn = key, value, 1 << 40
        self.now_ms = lambda: int(time.time() * 1000)  # an event's source time (`source.ts_ms`)
        self.texts: dict[str, list[str]] = {}  # an op's value JSON cut around its varying fields

    def make(self, op: str, row_id: int, v: str, before: str | None = None) -> tuple[bytes, bytes]:
        """Change `op` of row `row_id` to `v`; with `before`, the old row's `v`, the whole old
        row is the event's `before` (as with PostgreSQL's `REPLICA IDENTITY FULL`)."""
        if before is None:  # the same bytes as below, from the op's cut JSON (`fast`)
            return self.fast(op, row_id, v)
        key = copy.deepcopy(self.key)
        key["payload"] = {"id": row_id}
        value = copy.deepcopy(self.value)
        self.change(value["payload"], op, row_id, v)
        if before is not None:
            value["payload"]["before"] = {**(value["payload"]["after"] or value["payload"]["before"]), "v": before}
        return (json.dumps(key, separators=(",", ":")).encode(),  # compact, as the JSON converter writes
                json.dumps(value, separators=(",", ":")).encode())

    def fast(self, op: str, row_id: int, v: str) -> tuple[bytes, bytes]:
        """`make` without copying and serializing the whole envelope again: a wide table's
        event is tens of kilobytes, and the load of a hundred tables must not take the
        machine's cores from the job it measures."""
        if op not in self.texts:
            value = copy.deepcopy(self.value)
            p = value["payload"]
            row = {**p["after"], "id": "@@id@@", "v": "@@v@@", "n": "@@n@@"}
            p["before"], p["after"], p["op"] = (row, None, "d") if op == "d" else (None, row, op)
            p["source"].update(lsn="@@lsn@@", txId="@@tx@@", ts_ms="@@ts@@", sequence="@@seq@@")
            self.texts[op] = re.split(r'"@@(\w+)@@"', json.dumps(value, separators=(",", ":")))
            key = copy.deepcopy(self.key)
            key["payload"] = {"id": "@@id@@"}
            self.texts["key"] = re.split(r'"@@(\w+)@@"', json.dumps(key, separators=(",", ":")))
        self.lsn += 8
        fields = {"id": str(row_id), "v": json.dumps(v), "n": f'"{row_id % 100000}.25"', "lsn": str(self.lsn),
                  "tx": str(self.lsn % (1 << 31)), "ts": str(self.now_ms()),
                  "seq": json.dumps(json.dumps([str(self.lsn - 4), str(self.lsn)]))}

        def filled(parts: list[str]) -> bytes:
            return "".join(fields[part] if i % 2 else part for i, part in enumerate(parts)).encode()
        return filled(self.texts["key"]), filled(self.texts[op])

    def change(self, p: dict, op: str, row_id: int, v: str) -> None:
        """The envelope `p` (a copy of the recorded one's payload) made into change `op` of row
        `row_id`, at the next position."""
        self.lsn += 8
        row = {**p["after"], "id": row_id, "v": v, "n": f"{row_id % 100000}.25"}
        p["before"], p["after"], p["op"] = (row, None, "d") if op == "d" else (None, row, op)
        p["source"].update(lsn=self.lsn, txId=self.lsn % (1 << 31), ts_ms=self.now_ms(),
                           sequence=json.dumps([str(self.lsn - 4), str(self.lsn)]))


def changes(ev: Events, rows: int, count: int, seed: int = 7):
    """Updates (70%), inserts of new keys (20%) and deletes (10%) over a table of `rows` keys."""
    rng = random.Random(seed)
    new = rows
    for _ in range(count):
        r = rng.random()
        if r < 0.7:
            yield ev.make("u", rng.randrange(rows), "updated")
        elif r < 0.9:
            new += 1
            yield ev.make("c", new, "inserted")
        else:
            yield ev.make("d", rng.randrange(rows), "deleted")


def produce(settings, topic: str, events) -> int:
    producer = Producer(kafka_access(settings).client(**{"linger.ms": 50, "batch.size": 1 << 20,
                         "compression.type": "lz4"}))
    n = 0
    for n, (k, v) in enumerate(events, start=1):
        while True:
            try:
                producer.produce(topic, key=k, value=v)
                break
            except BufferError:
                producer.poll(0.1)
        if n % 10000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"could not deliver every event to {topic}")
    return n


def initial_rows(spark, rows: int, extra: tuple = ()):
    """`rows` rows of the benchmark shape with the `_cdc_*` columns of a bulk load; the
    `extra` columns (sources/types.Column) of a wider shape are null."""
    return spark.range(rows).select(
        F.col("id"), F.lit("initial").alias("v"), (F.col("id") % 100000 + F.lit(0.25)).cast("decimal(12,2)").alias("n"),
        F.current_timestamp().alias("at"), *[F.lit(None).cast(c.spark_type).alias(c.name) for c in extra],
        F.lit("r").alias("_cdc_op"),
        F.lit("0" * 57).alias("_cdc_position"), F.current_timestamp().alias("_cdc_source_ts"),
        F.lit(None).cast("int").alias("_cdc_kafka_partition"), F.lit(None).cast("bigint").alias("_cdc_kafka_offset"))


def fill(spark, settings, catalog, reg: TableRegistration, template: TableRegistration, rows: int,
         topic: str | None = None, offset: int = 0) -> str:
    """A target of `rows` rows written in bulk (as a bootstrap writes it), reading `topic`
    or a new, empty topic of its own (for a backlog produced straight into it) from `offset`."""
    columns, key, _ = table_columns(catalog.load_table(template.target).properties)
    if topic is None:
        topic = f"_cdc_bench.{reg.name}.{int(time.time())}"
        ensure_topics(kafka_access(settings), [topic], settings.kafka)
    drop_target(settings, catalog, reg)
    ensure_table(catalog, reg, columns, key, topic)
    extra = [c for c in columns if c.name not in ("id", "v", "n", "at")]
    (initial_rows(spark, rows, tuple(extra)).writeTo(table_ref(settings.catalog.name, reg.target))
     .option("snapshot-property.cdc.offsets", json.dumps({topic: {"0": offset}})).append())
    return topic


def drop_target(settings, catalog, reg: TableRegistration) -> None:
    """No target, delete memory nor checkpoint left of an earlier run."""
    for ident in (reg.target, reg.target + DELETES_SUFFIX):
        if catalog.table_exists(ident):
            catalog.drop_table(ident)
    shutil.rmtree(settings.path(settings.spark.checkpoint_dir) / reg.name, ignore_errors=True)


def jvm_pid(spark) -> int:
    """The process id of the driver's JVM."""
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())


def timed(fn) -> float:
    started = time.monotonic()
    fn()
    return time.monotonic() - started
