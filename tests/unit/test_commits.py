import json
from itertools import chain

from cdc.control.commits import (OFFSETS, PartitionRange, merged_offsets, newest_with_offsets, parse_offsets,
                                 summary_properties)


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


def _history(*snapshots):
    """A lookup of (id, summary, parent id) snapshots, as one metadata file holds them."""
    held = {sid: (summary, parent) for sid, summary, parent in snapshots}
    return held.get


def test_newest_with_offsets_walks_the_current_ancestry_past_rewrites():
    batch, rewrite = {OFFSETS: "b2"}, {}
    current = _history((1, {OFFSETS: "b1"}, None), (2, batch, 1), (3, rewrite, 2), (9, {OFFSETS: "other branch"}, 2))
    assert newest_with_offsets(3, [current]) == batch
    assert newest_with_offsets(None, [current]) is None  # no snapshot yet
    assert newest_with_offsets(3, [_history((3, {}, None))]) is None  # a history with no offsets


def test_newest_with_offsets_reads_older_metadata_only_when_an_expiry_broke_the_ancestry():
    """After a rewrite (3) and an expiry of all but it, its parent (2, the last batch) is
    found in the metadata file written before the expiry; older files are never read."""
    read = []

    def files():
        for name, history in (("before expiry", _history((2, {OFFSETS: "b2"}, 1), (1, {OFFSETS: "b1"}, None))),
                              ("older", _history((1, {OFFSETS: "b1"}, None)))):
            read.append(name)
            yield history

    assert newest_with_offsets(3, [_history((3, {}, 2))]) is None  # no older file to look in
    assert newest_with_offsets(3, chain([_history((3, {}, 2))], files())) == {OFFSETS: "b2"}
    assert read == ["before expiry"]
    read.clear()
    assert newest_with_offsets(3, chain([_history((3, {OFFSETS: "b3"}, 2))], files())) == {OFFSETS: "b3"}
    assert read == []  # the current ancestry holds them: no older file is read
    # A rewrite, a delete and another rewrite, then two expiries: its ancestors spread over two files.
    spread = [_history((5, {}, 4)), _history((4, {}, 3), (3, {}, 2)), _history((3, {}, 2), (2, {OFFSETS: "b2"}, 1))]
    assert newest_with_offsets(5, spread) == {OFFSETS: "b2"}
    assert newest_with_offsets(5, spread[:2]) is None  # beyond the files read: not found
