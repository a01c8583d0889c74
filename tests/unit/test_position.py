from cdc.planning.position import encode, postgres_position, source_part
from cdc.sources.types import parse_lsn


def pos(seq, op="u", lsn=None, partition=0, offset=0):
    return postgres_position({"sequence": seq, "lsn": lsn}, op, partition, offset)


def test_parse_lsn_forms():
    assert parse_lsn(None) == 0
    assert parse_lsn("26376040") == 26376040
    assert parse_lsn(26376040) == 26376040
    assert parse_lsn("0/1927768") == 0x1927768
    assert parse_lsn("1/0") == 1 << 32


def test_events_sharing_one_lsn_are_ordered_by_kafka_offset():
    a = pos('["100", "200"]', offset=7)
    b = pos('["100", "200"]', offset=8)
    assert a < b
    assert source_part(a) == source_part(b)


def test_interleaved_transactions_order_by_commit_not_by_event_lsn():
    # T1 began first (low event LSNs) but committed after T2: T1's events carry T2's commit
    # as their last committed LSN, and sort after T2's events even though their own LSN is lower.
    t2_event = pos('["1000", "1500"]', offset=1)
    t1_event = pos('["1600", "1200"]', offset=2)
    assert t2_event < t1_event


def test_snapshot_read_sorts_before_streamed_change_at_same_lsn():
    read = pos('[null, "500"]', op="r", lsn=500, offset=99)
    streamed = pos('[null, "500"]', op="u", lsn=500, offset=1)
    assert read < streamed


def test_snapshot_read_sorts_before_any_later_streamed_change():
    read = pos('[null, "500"]', op="r", lsn=500, offset=10)
    streamed = pos('["400", "600"]', op="c", offset=11)
    assert read < streamed


def test_missing_sequence_falls_back_to_lsn():
    assert pos(None, lsn=300) == encode(0, 300, 1, 0, 0)


def test_position_is_fixed_width_and_lexicographic():
    small = encode(1, 2, 1, 0, 9)
    large = encode(1, 2, 1, 0, 10)
    assert len(small) == len(large) and small < large
    assert encode(0xF, 0, 1, 0, 0) < encode(0x10, 0, 1, 0, 0)
