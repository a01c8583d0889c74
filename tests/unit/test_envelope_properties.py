"""Properties of the pure decoder (hypothesis): arbitrary input never crashes it (a bad
record is a DecodeError, nothing else), and valid envelopes round-trip."""
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cdc.decoding.envelope import ChangeEvent, Operation, decode
from cdc.errors import DecodeError
from cdc.planning.position import encode

KEY = ("id",)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
envelope_like = st.fixed_dictionaries({}, optional={
    "op": st.sampled_from(["c", "u", "d", "r", "t", "x"]) | scalars,
    "before": json_values, "after": json_values, "ts_ms": scalars,
    "source": st.fixed_dictionaries({}, optional={"lsn": scalars, "sequence": scalars | st.just('["1", "2"]'),
                                                  "ts_ms": scalars}) | json_values,
})


def wrap(payload) -> bytes:
    return json.dumps({"schema": {}, "payload": payload}).encode()


def outcome(key, value):
    try:
        return decode(key, value, 0, 7, KEY)
    except DecodeError as e:
        return e


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.none(), st.binary(max_size=64) | st.none())
def test_arbitrary_bytes_never_crash_the_decoder(key, value):
    assert outcome(key, value) is None or isinstance(outcome(key, value), (ChangeEvent, DecodeError))


@settings(max_examples=300, deadline=None)
@given(json_values, envelope_like | json_values)
def test_arbitrary_json_never_crashes_the_decoder(key_payload, value_payload):
    result = outcome(wrap(key_payload), wrap(value_payload))
    assert result is None or isinstance(result, (ChangeEvent, DecodeError))


@settings(max_examples=200, deadline=None)
@given(op=st.sampled_from(["c", "u", "d", "r"]), key=st.integers(-2**31, 2**31 - 1),
       row=st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k != "id"), scalars, max_size=5),
       commit=st.integers(0, 2**62), lsn=st.integers(1, 2**62), partition=st.integers(0, 100),
       offset=st.integers(0, 2**40))
def test_valid_envelopes_round_trip(op, key, row, commit, lsn, partition, offset):
    full = {"id": key, **row}
    body = {"before": full if op == "d" else None, "after": None if op == "d" else full, "op": op,
            "source": {"lsn": lsn, "sequence": json.dumps([str(commit), str(lsn)]), "ts_ms": 1}}
    e = decode(wrap({"id": key}), wrap(body), partition, offset, KEY)
    assert e.op is Operation(op) and e.key == {"id": key} and e.row == full
    assert e.position == encode(commit, lsn, 0 if op == "r" else 1, partition, offset)
    assert e.source_ts_ms == 1 and (e.partition, e.offset) == (partition, offset)
