import json

import pytest

from cdc.decoding.envelope import Operation, decode, last_per_key
from cdc.errors import DecodeError

KEY = ("id",)


def record(op, after=None, before=None, seq='["10", "20"]', lsn=20):
    body = {"before": before, "after": after, "op": op,
            "source": {"lsn": lsn, "sequence": seq, "ts_ms": 1700000000000}}
    return json.dumps({"schema": {}, "payload": body})


def key(i):
    return json.dumps({"schema": {}, "payload": {"id": i}})


def ev(op, i, offset, seq='["10", "20"]', **row):
    after = {"id": i, **row} if op in "cur" else None
    before = {"id": i} if op == "d" else None
    return decode(key(i), record(op, after, before, seq), 0, offset, KEY)


def test_operation_of_unknown_code_raises():
    with pytest.raises(DecodeError, match="unknown Debezium op 'x'"):
        Operation.of("x")


def test_decode_create_update_delete():
    c = ev("c", 1, 0, v="a")
    assert c.op is Operation.CREATE and c.row == {"id": 1, "v": "a"} and c.key == {"id": 1}
    d = ev("d", 1, 1)
    assert d.op is Operation.DELETE and d.row == {"id": 1}


def test_tombstone_has_no_op():
    t = decode(key(1), None, 0, 5, KEY)
    assert t.is_tombstone and t.position is None


def test_bad_records_raise():
    with pytest.raises(DecodeError, match="not JSON"):
        decode(key(1), b"\x00garbage", 0, 0, KEY)
    with pytest.raises(DecodeError, match="no key"):
        decode(None, record("c", {"id": 1}), 0, 0, KEY)
    with pytest.raises(DecodeError, match="no source position"):
        decode(key(1), record("c", {"id": 1}, seq=None, lsn=None), 0, 0, KEY)
    with pytest.raises(DecodeError, match="unknown Debezium op"):
        decode(key(1), record("z", {"id": 1}), 0, 0, KEY)
    with pytest.raises(DecodeError, match="has no 'after'"):
        decode(key(1), record("u", None), 0, 0, KEY)


def test_truncate_has_no_key():
    t = decode(None, record("t"), 0, 3, KEY)
    assert t.op is Operation.TRUNCATE and t.key == {}


def test_last_per_key_picks_highest_position_not_last_offset():
    newer = ev("u", 1, 0, seq='["10", "30"]', v="new")
    redelivered_older = ev("u", 1, 1, seq='["10", "20"]', v="old")
    out = last_per_key([newer, redelivered_older])
    assert out[(("id", 1),)].row["v"] == "new"


def test_tombstone_after_delete_is_a_delete():
    d = ev("d", 1, 4, seq='["10", "40"]')
    t = decode(key(1), None, 0, 5, KEY)
    out = last_per_key([ev("c", 1, 3, seq='["10", "30"]'), d, t])
    assert out[(("id", 1),)].op is Operation.DELETE


def test_reinsert_after_tombstone_wins():
    events = [ev("d", 1, 4, seq='["10", "40"]'), decode(key(1), None, 0, 5, KEY),
              ev("c", 1, 6, seq='["50", "60"]', v="back")]
    out = last_per_key(events)
    assert out[(("id", 1),)].op is Operation.CREATE and out[(("id", 1),)].row["v"] == "back"


def test_lone_tombstone_stays_a_tombstone():
    out = last_per_key([decode(key(2), None, 0, 9, KEY)])
    assert out[(("id", 2),)].is_tombstone


def test_non_data_messages_decode_to_nothing():
    from tests.spark.test_decode import NON_DATA_MESSAGES

    for k, v in NON_DATA_MESSAGES:
        assert decode(json.dumps({"schema": {}, "payload": k}), json.dumps({"schema": {}, "payload": v}), 0, 1,
                      KEY) is None
    assert last_per_key([None, ev("c", 1, 0, v="a")])[(("id", 1),)].row == {"id": 1, "v": "a"}


def envelope(payload) -> str:
    return json.dumps({"schema": {}, "payload": payload})


def null_key_change(op, row):
    return envelope({"op": op, "before": row if op == "d" else None, "after": None if op == "d" else row,
                     "source": {"lsn": 20, "sequence": '["10", "20"]', "ts_ms": 1700000000000}})


def test_a_key_with_a_null_part_is_no_missing_key():
    key = ("a", "b")
    with pytest.raises(DecodeError, match=r"offset 3: key column a is NULL$"):
        decode(envelope({"a": None, "b": "y"}), null_key_change("c", {"a": None, "b": "y"}), 0, 3, key)
    with pytest.raises(DecodeError, match=r"key column b is NULL$"):
        decode(envelope({"a": 2, "b": None}), null_key_change("d", {"a": 2, "b": None}), 0, 4, key)
    with pytest.raises(DecodeError, match=r"key columns a, b are NULL$"):
        decode(envelope({"a": None, "b": None}), null_key_change("u", {"a": None, "b": None}), 0, 5, key)
    with pytest.raises(DecodeError, match=r"key column b is NULL$"):  # a tombstone: its key alone
        decode(envelope({"a": 2, "b": None}), None, 0, 6, key)
    # A record that has no key still says so: none at all, or one of other columns than its row's NULLs.
    with pytest.raises(DecodeError, match=r"has no key \['a', 'b'\]"):
        decode(None, null_key_change("c", {"a": None, "b": "y"}), 0, 7, key)
    with pytest.raises(DecodeError, match=r"has no key \['a', 'b'\]"):
        decode(envelope({"id": 1}), null_key_change("c", {"a": 1, "b": "y"}), 0, 8, key)
