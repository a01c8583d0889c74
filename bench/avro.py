"""The apply figure of a topic in Confluent's Avro wire format, next to JSON's: the first
source's connector again, writing Avro through the stack's schema registry, records one
real update; the same changes as the apply section's are produced in its writer schemas
and applied into a table of the same size by `cdc run --available-now`."""
from __future__ import annotations

import io
import json
import struct

import fastavro

from bench import steady
from bench.ladder import ONE_BATCH
from bench.workload import Events, changes, fill, produce, recorded_update, registration, timed
from cdc.decoding.avro import SchemaRegistry, record_value
from cdc.jobs.supervisor import run

AVRO_SOURCE = "bench_avro"  # the first source again, its connector writing Avro through the schema registry


def avro_settings(settings):
    """The section's settings: AVRO_SOURCE alone, with a tables directory of its own (the
    other sections' registrations name the first source)."""
    tables = settings.path(settings.tables_dir).parent / "tables_avro"
    tables.mkdir(parents=True, exist_ok=True)
    source = next(iter(settings.sources.values())).model_copy(update={"format": "avro"})
    return settings.model_copy(update={"tables_dir": tables, "sources": {AVRO_SOURCE: source}})


class AvroEvents(Events):
    """Events in the recorded Avro shape: its writer schemas, in Confluent's wire format
    (a zero byte, the schema id, the Avro body)."""

    def __init__(self, key: bytes, value: bytes, registry: SchemaRegistry):
        (self.key_id, self.key_schema, key_doc), (self.value_id, self.value_schema, value_doc) = (
            _read(key, registry), _read(value, registry))
        if value_doc["op"] != "u":
            raise RuntimeError(f"expected the recorded update, got an event of op {value_doc['op']}")
        super().__init__(key_doc, value_doc)

    def make(self, op: str, row_id: int, v: str) -> tuple[bytes, bytes]:
        value = {**self.value, "source": dict(self.value["source"])}  # the envelope's fields are its payload
        self.change(value, op, row_id, v)
        return (_write(self.key_id, self.key_schema, {**self.key, "id": row_id}),
                _write(self.value_id, self.value_schema, value))


def _read(message: bytes, registry: SchemaRegistry) -> tuple[int, dict, dict]:
    """(schema id, parsed writer schema, document) of a message in Confluent's wire format."""
    if message[:1] != b"\x00":
        raise RuntimeError("the recorded event is not in Confluent's Avro wire format")
    (schema_id,) = struct.unpack(">I", message[1:5])
    schema = fastavro.parse_schema(json.loads(registry.schema(schema_id)))
    return schema_id, schema, fastavro.schemaless_reader(io.BytesIO(message[5:]), schema)


def _write(schema_id: int, schema: dict, doc: dict) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, schema, doc)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def measure(spark, settings, catalog, template, sizes: dict, json_events_per_s: float | None,
            json_steady_cpu_s: float | None = None) -> dict:
    """`apply_avro_events_per_s` (the better of two runs), and `apply_avro_vs_json`
    against the apply section's `apply_events_per_s` (`json_events_per_s`); then the steady
    section over the same Avro events (`steady_avro_*`), and `steady_avro_vs_json_cpu`
    against its `steady_cpu_s_per_batch` (`json_steady_cpu_s`)."""
    if not settings.registry_url:
        raise RuntimeError("the avro section needs a schema registry: stack.registry_port or schema_registry.url")
    settings = avro_settings(settings)
    n, rows = sizes["changes"], sizes["small"]
    registry = SchemaRegistry.of(settings)
    events = AvroEvents(*recorded_update(settings, registration(settings, "recorded_avro", captured=True,
                                                                source=AVRO_SOURCE)), registry)
    times = []
    for attempt in range(2):
        reg = registration(settings, f"avro_{attempt}", source=AVRO_SOURCE, **ONE_BATCH)
        topic = fill(spark, settings, catalog, reg, template, rows)
        events.lsn = 1 << 40  # every run the same positions over a new table
        produce(settings, topic, changes(events, rows, n))
        times.append(timed(lambda: run(settings, [reg], available_now=True)))
        print(f"apply, Avro: {n:,} events in {times[-1]:.1f}s, {n / times[-1]:,.0f} events/s", flush=True)
    figures = {"apply_avro_events_per_s": round(n / min(times))}
    if json_events_per_s:
        figures["apply_avro_vs_json"] = round(figures["apply_avro_events_per_s"] / json_events_per_s, 3)
    figures.update(steady.measure(spark, settings, catalog, template, events, sizes, "steady_avro",
                                  lambda value, offset: record_value(value, offset, registry)["source"]["ts_ms"],
                                  source=AVRO_SOURCE))
    if json_steady_cpu_s:
        figures["steady_avro_vs_json_cpu"] = round(figures["steady_avro_cpu_s_per_batch"] / json_steady_cpu_s, 3)
    return figures
