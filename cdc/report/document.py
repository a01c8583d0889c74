"""The JSON a command prints (`--json`): `schema_version` first, then the command's fields,
named alike across commands for the same thing (FIELDS). `schema_version` goes up when a
field changes its meaning or goes away."""
from __future__ import annotations

import json

SCHEMA_VERSION = 1

# (field, what it is, the outputs that have it): docs/cli.md's table of names.
FIELDS = (
    ("schema_version", "this document's version: it goes up when a field changes its meaning or goes away", "all"),
    ("ok", "the command's verdict: true when it exits 0", "status, doctor, reconcile, repair"),
    ("table", "a registered table's name (namespace.table, its file tables/<table>.yaml)",
     "tables list, status, doctor, reconcile, repair"),
    ("source", "a source of cdc.yaml", "tables list, status, doctor"),
    ("source_table", "the source's schema.table", "tables list"),
    ("target", "the target: an Iceberg table's name, or a Delta table's path", "tables list, status, reconcile"),
    ("sink", "iceberg or delta", "tables list, status"),
    ("mode", "upsert, history or soft_delete", "tables list, status"),
    ("registered", "whether `cdc register` has created the target", "tables list, status"),
    ("job", 'the table\'s job: {"state": ..., "error": ...}', "tables list, status"),
    ("state", "a table's state (its job's, or capture-stopped); a source's capture: its connector's", "status"),
    ("lag", "records in Kafka the target has not applied", "status, reconcile"),
    ("dead_letters", "records set aside in the table's dead-letter table", "status, reconcile"),
    ("source_commit_time", "the source's commit time of the last change applied (ISO-8601, UTC)",
     "status, reconcile"),
    ("status", "reconcile: OK, DRIFT, IN-FLIGHT or CAPTURE-STOPPED (repair: the compare's before it); doctor: ok, "
               "warn or FAIL", "reconcile, doctor, repair"),
    ("name", "a check's stable id (wal_level, ...); never a table", "doctor"),
    ("problems", "the lines `status --check` prints", "status"),
    ("cut", 'the table in its source\'s consistent cut, as `cdc cut` last found it: {"snapshot_id": the Iceberg '
            'snapshot or Delta version, "transaction": ..., "holds": why it holds the cut back, "left_out": why it '
            'is not in it} (null: no cut)',
     "status"),
    ("found", "the differing keys by kind: missing, extra, different, duplicate", "repair"),
    ("keys", 'the differing keys, each {"kind": ..., "key": {column: value}}', "repair"),
    ("plan", "what the repair does: delete (rows the source does not hold), clear (keys held twice), reread (keys "
             "Debezium reads again)", "repair"),
    ("dry_run", "whether the command only said what it would do", "repair"),
    ("after", "the compare after the repair: its status and the keys still differing by kind", "repair"),
)


def dumps(**fields) -> str:
    return json.dumps({"schema_version": SCHEMA_VERSION, **fields}, indent=2, default=str)
