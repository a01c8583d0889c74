"""Debezium JSON-converter records as Kafka delivers them, for tests that feed batches
straight into the apply step."""
from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class Topic:
    """Builds records of one topic with increasing offsets on one partition."""

    name: str = "src.public.t"
    partition: int = 0
    next_offset: int = 0
    key_columns: tuple[str, ...] = ("id",)
    records: list = field(default_factory=list)

    def _add(self, key: dict | None, value: dict | None, offset: int | None = None,
             headers: list | None = None) -> tuple:
        off = self.next_offset if offset is None else offset
        self.next_offset = max(self.next_offset, off + 1)
        rec = (None if key is None else json.dumps({"schema": {"type": "struct"}, "payload": key}).encode(),
               None if value is None else json.dumps({"schema": {"type": "struct"}, "payload": value}).encode(),
               self.name, self.partition, off) + ((headers,) if headers else ())
        self.records.append(rec)
        return rec

    def key_change(self, old: dict, new: dict, commit_lsn: int | None, lsn: int, ts_ms: int = 1_700_000_000_000,
                   before: dict | None = None) -> None:
        """A key change as Debezium writes it: a delete of the old key (with the row's `before`
        under REPLICA IDENTITY FULL, else only its key), a tombstone, and a create of `new`,
        at one source position, with the `__debezium.newkey`/`oldkey` headers."""
        old_key = {k: old[k] for k in self.key_columns}
        new_key = {k: new[k] for k in self.key_columns}
        moved_to = [("__debezium.newkey", json.dumps(new_key).encode())]
        self.change("d", before or old_key, commit_lsn, lsn, ts_ms, headers=moved_to)
        self._add(old_key, None, headers=moved_to)
        self.change("c", new, commit_lsn, lsn, ts_ms, headers=[("__debezium.oldkey", json.dumps(old_key).encode())])

    def change(self, op: str, row: dict, commit_lsn: int | None, lsn: int, ts_ms: int = 1_700_000_000_000,
               offset: int | None = None, headers: list | None = None,
               transaction: tuple[str, int] | None = None) -> tuple:
        """A change; `transaction`: its id and the table's order of the change in it."""
        key = {k: row[k] for k in self.key_columns}
        value = {
            "before": row if op == "d" else None,
            "after": None if op == "d" else row,
            "source": {"lsn": lsn, "ts_ms": ts_ms,
                       "sequence": json.dumps([None if commit_lsn is None else str(commit_lsn), str(lsn)])},
            "op": op, "ts_ms": ts_ms,
        }
        if transaction:
            value["transaction"] = {"id": transaction[0], "total_order": transaction[1],
                                    "data_collection_order": transaction[1]}
        return self._add(key, value, offset, headers)

    def tombstone(self, key: dict, offset: int | None = None) -> tuple:
        return self._add(key, None, offset)

    def truncate(self, commit_lsn: int, lsn: int, ts_ms: int = 1_700_000_000_000) -> tuple:
        value = {"before": None, "after": None, "op": "t",
                 "source": {"lsn": lsn, "ts_ms": ts_ms, "sequence": json.dumps([str(commit_lsn), str(lsn)])}}
        return self._add(None, value)

    def raw(self, key: bytes | None, value: bytes | None) -> tuple:
        rec = (key, value, self.name, self.partition, self.next_offset)
        self.next_offset += 1
        self.records.append(rec)
        return rec

    def take(self) -> list:
        out, self.records = self.records, []
        return out
