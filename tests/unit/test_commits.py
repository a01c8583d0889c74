import json

from cdc.control.commits import OFFSETS, PartitionRange, merged_offsets, parse_offsets, summary_properties


def test_offsets_round_trip_through_summary():
    props = summary_properties("t", {0: 10, 2: 5}, 7, "job", "00ab", 123)
    assert json.loads(props[OFFSETS]) == {"t": {"0": 10, "2": 5}}
    assert parse_offsets(props) == {"t": {0: 10, 2: 5}}
    assert props["cdc.batch-id"] == "7" and props["cdc.position"] == "00ab" and props["cdc.source-ts-ms"] == "123"


def test_merged_offsets_never_go_backwards():
    assert merged_offsets({0: 10, 1: 4}, [PartitionRange(0, 3, 5), PartitionRange(1, 4, 8)]) == {0: 10, 1: 9}


def test_parse_offsets_without_summary():
    assert parse_offsets(None) == {} and parse_offsets({"other": "x"}) == {}


def test_position_never_goes_backwards():
    prev = summary_properties("t", {0: 5}, 1, "j", "00bb", 200)
    props = summary_properties("t", {0: 9}, 2, "j", "00aa", 100, previous=prev)
    assert (props["cdc.position"], props["cdc.source-ts-ms"]) == ("00bb", "200")
    props = summary_properties("t", {0: 9}, 2, "j", None, None, previous=prev)
    assert props["cdc.position"] == "00bb"
    props = summary_properties("t", {0: 9}, 2, "j", "00cc", 300, previous=prev)
    assert (props["cdc.position"], props["cdc.source-ts-ms"]) == ("00cc", "300")


def test_the_transaction_of_the_last_change_goes_with_its_position():
    from cdc.control.commits import parse_transaction

    first = summary_properties("t", {0: 5}, 1, "j", "00bb", 200, transaction=("571:90", 2))
    assert parse_transaction(first) == ("571:90", 2)
    older = summary_properties("t", {0: 9}, 2, "j", "00aa", 100, previous=first, transaction=("570:80", 1))
    assert parse_transaction(older) == ("571:90", 2)  # a replayed older change keeps the later mark
    quiet = summary_properties("t", {0: 9}, 3, "j", None, None, previous=first)
    assert parse_transaction(quiet) == ("571:90", 2)
    read = summary_properties("t", {0: 9}, 4, "j", "00cc", 300, previous=first)  # a snapshot read: no transaction
    assert parse_transaction(read) is None and parse_transaction(None) is None
