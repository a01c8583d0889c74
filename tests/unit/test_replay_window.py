import json

import pytest

from cdc.control.replay import window
from cdc.errors import ConfigError
from cdc.planning.position import encode


def test_earliest():
    assert window("t", [0], earliest=True) == {"startingOffsets": "earliest"}


def test_offsets_fill_missing_partitions_with_earliest():
    opts = window("t", [0, 1], offsets='{"t": {"1": 40}}')
    assert json.loads(opts["startingOffsets"]) == {"t": {"0": -2, "1": 40}}
    assert json.loads(window("t", [0], offsets='{"0": 7}')["startingOffsets"]) == {"t": {"0": 7}}


def test_timestamp_forms():
    assert window("t", [0], timestamp="1700000000000") == {"startingTimestamp": "1700000000000"}
    assert window("t", [0], timestamp="2023-11-14T22:13:20Z") == {"startingTimestamp": "1700000000000"}


def test_position_points_at_its_kafka_record():
    pos = encode(10, 20, 1, 0, 1234)
    assert json.loads(window("t", [0], position=pos)["startingOffsets"]) == {"t": {"0": 1234}}


def test_exactly_one_choice_and_clear_errors():
    with pytest.raises(ConfigError, match="exactly one"):
        window("t", [0])
    with pytest.raises(ConfigError, match="exactly one"):
        window("t", [0], earliest=True, offsets='{"0": 1}')
    with pytest.raises(ConfigError, match="not JSON"):
        window("t", [0], offsets="zero")
    with pytest.raises(ConfigError, match="not a cdc position"):
        window("t", [0], position="xyz")
    with pytest.raises(ConfigError, match="ISO-8601"):
        window("t", [0], timestamp="yesterday")
