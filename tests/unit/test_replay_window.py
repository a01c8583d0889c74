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


def test_a_start_kafka_cannot_serve_is_refused_before_spark_starts():
    from cdc.control.replay import check_start

    marks = {0: (10, 50), 1: (0, 5)}
    check_start("t", marks, offsets='{"0": 10, "1": 5}')  # from the earliest to the end: fine
    for offsets, words in (('{"0": -1}', "negative"), ('{"0": 9}', "no longer in Kafka (the earliest it holds is 10)"),
                           ('{"1": 6}', "past the end of topic t (5)"), ('{"2": 0}', "not a partition of topic t")):
        with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
            check_start("t", marks, offsets=offsets)
    with pytest.raises(ConfigError, match="past the end"):
        check_start("t", marks, position=encode(10, 20, 1, 0, 51))
    check_start("t", marks, timestamp="1700000000000", offsets_at=lambda ms: {0: 42, 1: None})
    with pytest.raises(ConfigError, match="holds no record at or after 2023-11-14T22:13:20"):
        check_start("t", marks, timestamp="1700000000000", offsets_at=lambda ms: {0: None, 1: None})
