"""The Debezium envelope rules, in plain Python.

The row path runs the same rules as Spark expressions (`spark_decode`); this module is
their readable reference, used by unit tests and by tools that look at single records.
"""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from cdc.errors import DecodeError
from cdc.planning.position import mariadb_position, postgres_position


class Operation(str, enum.Enum):
    """Debezium's `op` codes. Unknown codes raise: they are bad records, never a guess."""

    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"  # snapshot read
    TRUNCATE = "t"

    @classmethod
    def of(cls, code: Any) -> "Operation":
        try:
            return cls(code)
        except ValueError:
            raise DecodeError(f"unknown Debezium op {code!r}; expected one of c, u, d, r, t") from None


BEFORE, AFTER, SOURCE, OP, TS_MS, TRANSACTION = "before", "after", "source", "op", "ts_ms", "transaction"


@dataclass(frozen=True)
class ChangeEvent:
    """One decoded Kafka record of a table topic. `op` is None for a tombstone."""

    key: dict
    op: Operation | None
    row: dict | None  # `after` for c/u/r, `before` (possibly only the key) for d
    position: str | None
    source_ts_ms: int | None
    partition: int
    offset: int

    @property
    def is_tombstone(self) -> bool:
        return self.op is None


def payload_of(message: bytes | str | None) -> dict | None:
    """The payload of a JSON-converter message, with or without the schema wrapper."""
    if message is None:
        return None
    try:
        doc = json.loads(message)
    except (ValueError, UnicodeDecodeError) as e:
        raise DecodeError(f"value is not JSON: {e}") from None
    if not (isinstance(doc, dict) and "payload" in doc and "schema" in doc):
        raise DecodeError("value is not a JSON-converter message with schema and payload")
    doc = doc["payload"]
    if not isinstance(doc, dict):
        raise DecodeError(f"payload is not a JSON object: {str(doc)[:80]!r}")
    return doc


def is_non_data(body: dict) -> bool:
    """A heartbeat, a transaction marker or a schema change: recognised and ignored."""
    if body.get(OP) is not None:
        return False
    return (body.get("status") in ("BEGIN", "END") and body.get("id") is not None
            or body.get("ddl") is not None or body.get("tableChanges") is not None
            or set(body) == {TS_MS})


def decode(key: bytes | str | None, value: bytes | str | None, partition: int, offset: int,
           key_columns: tuple[str, ...], kind: str = "postgresql") -> ChangeEvent | None:
    """Decode one record of a table topic (None for a non-data message), or raise DecodeError.
    Whatever the bytes, nothing else is raised."""
    try:
        return _decode(key, value, partition, offset, key_columns, kind)
    except DecodeError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError) as e:
        raise DecodeError(f"record at partition {partition} offset {offset} is a malformed envelope: "
                          f"{type(e).__name__}: {str(e)[:200]}") from None


def _decode(key, value, partition: int, offset: int, key_columns: tuple[str, ...], kind: str) -> ChangeEvent | None:
    body = payload_of(value)
    if body is not None and is_non_data(body):
        return None
    op = Operation.of(body.get(OP)) if body is not None else None
    source = (body or {}).get(SOURCE) or {}
    position_of = mariadb_position if kind == "mariadb" else postgres_position
    position = position_of(source, op.value, partition, offset) if op else None
    if position is not None and position[16:32] == "0" * 16:
        raise DecodeError(f"record at partition {partition} offset {offset} has no source position")
    if op is Operation.TRUNCATE:  # a truncate has no key: it applies to the whole table
        return ChangeEvent({}, op, None, position, source.get("ts_ms"), partition, offset)
    key_doc = payload_of(key)
    if key_doc is None or any(key_doc.get(c) is None for c in key_columns):
        row = (body or {}).get(BEFORE if op is Operation.DELETE else AFTER)
        nulls = [c for c in key_columns if (key_doc or {}).get(c) is None]
        if key is not None and (all(row.get(c) is None for c in nulls) if isinstance(row, dict)
                                else key_doc is not None):
            # a key with a NULL part (a key column the source allows NULL in), as its row shows
            raise DecodeError(f"record at partition {partition} offset {offset}: key column"
                              f"{'s' if len(nulls) > 1 else ''} {', '.join(nulls)} "
                              f"{'are' if len(nulls) > 1 else 'is'} NULL")
        raise DecodeError(f"record at partition {partition} offset {offset} has no key {list(key_columns)}")
    key_values = {c: key_doc[c] for c in key_columns}
    if op is None:
        return ChangeEvent(key_values, None, None, None, None, partition, offset)
    if op is Operation.DELETE:
        row = body.get(BEFORE) or dict(key_values)
    else:
        row = body.get(AFTER)
        if row is None:
            raise DecodeError(f"op {op.value!r} at partition {partition} offset {offset} has no 'after'")
    differ = [c for c in key_columns if isinstance(row, dict) and row.get(c) != key_values[c]]
    if differ:  # the Kafka key decides where a change goes: its row must say the same
        raise DecodeError(f"record at partition {partition} offset {offset}: the record's Kafka key and its row "
                          f"disagree on key column(s) {', '.join(differ)}")
    return ChangeEvent(key_values, op, row, position, source.get("ts_ms"), partition, offset)


def last_per_key(events: list[ChangeEvent | None]) -> dict[tuple, ChangeEvent]:
    """Rules 3 and 5 for one batch: the last change per key by position; a tombstone wins
    only over changes that precede it in its partition (it follows a delete, so nothing
    newer than it can have a lower offset)."""
    winners: dict[tuple, ChangeEvent] = {}
    tombstones: dict[tuple, ChangeEvent] = {}
    for e in events:
        if e is None:  # a non-data message
            continue
        k = tuple(sorted(e.key.items()))
        if e.is_tombstone:
            if k not in tombstones or e.offset > tombstones[k].offset:
                tombstones[k] = e
        elif k not in winners or e.position > winners[k].position:
            winners[k] = e
    result = dict(winners)
    for k, t in tombstones.items():
        w = winners.get(k)
        if w is None:
            result[k] = t
        elif t.partition == w.partition and t.offset > w.offset:
            result[k] = ChangeEvent(w.key, Operation.DELETE, w.key, w.position, w.source_ts_ms,
                                    w.partition, w.offset)
    return result


def row_fields(value) -> list[dict]:
    """The fields of the row (`after`) in a JSON converter message's schema: field, type,
    name and parameters each; none when the message has no such schema."""
    try:
        fields = json.loads(value)["schema"]["fields"]
        row = next(f for f in fields if isinstance(f, dict) and f.get("field") == "after")
        return [{k: f.get(k) for k in ("field", "type", "name", "parameters")} for f in row.get("fields") or []
                if isinstance(f, dict)]
    except (ValueError, TypeError, KeyError, StopIteration, AttributeError):
        return []
