"""The benchmark's change events: the cut-JSON path makes the very bytes of the whole envelope's."""
from __future__ import annotations

import copy
import json

from bench.workload import Events

KEY = {"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}]}, "payload": {"id": 1}}
VALUE = {"schema": {"type": "struct", "fields": []},
         "payload": {"before": None, "after": {"id": 1, "v": "x", "n": "1.25", "at": "2026-01-31T12:00:00Z", "c00": 42},
                     "source": {"lsn": 5, "txId": 3, "ts_ms": 1, "sequence": "[]", "db": "bench"},
                     "op": "u", "ts_ms": 5}}


def test_the_fast_events_are_the_bytes_of_the_serialized_envelope(monkeypatch):
    monkeypatch.setattr("bench.workload.time.time", lambda: 1_700_000_000.123)
    fast, whole = Events(KEY, VALUE), Events(KEY, VALUE)
    for op, row_id, v in [("u", 3, 'with "quotes" and \\'), ("c", 10, "inserted"), ("d", 4, "deleted"),
                          ("u", 5, "ü")]:
        key, value = copy.deepcopy(KEY), copy.deepcopy(VALUE)
        key["payload"] = {"id": row_id}
        whole.change(value["payload"], op, row_id, v)
        expected = (json.dumps(key, separators=(",", ":")).encode(), json.dumps(value, separators=(",", ":")).encode())
        assert fast.make(op, row_id, v) == expected
