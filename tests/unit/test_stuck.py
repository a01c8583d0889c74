"""A capture stuck on one table's change: the slot's transactions read from pgoutput's
messages, and where the connector resumes, decided without a database."""
from __future__ import annotations

import struct

from cdc.register.stuck import Transaction, lsn_text, moved_offset, plan_skip, transactions


def begin(xid: int) -> bytes:
    return b"B" + struct.pack(">qqI", 0, 0, xid)


def relation(relid: int, schema: str, table: str) -> bytes:
    return b"R" + struct.pack(">I", relid) + schema.encode() + b"\0" + table.encode() + b"\0" + b"d\0\0"


def change(kind: bytes, relid: int) -> bytes:
    return kind + struct.pack(">I", relid) + b"N\0\0"


def truncate(*relids: int) -> bytes:
    return b"T" + struct.pack(">IB", len(relids), 0) + struct.pack(f">{len(relids)}I", *relids)


def commit(lsn: int, end: int) -> bytes:
    return b"C" + struct.pack(">bqqq", 0, lsn, end, 0)


def test_transactions_name_the_tables_they_change():
    messages = [begin(7), relation(1, "shop", "a"), change(b"I", 1), relation(2, "shop", "b"), change(b"U", 2),
                commit(100, 120), begin(8), change(b"D", 1), truncate(2), commit(200, 220)]
    got = transactions(messages)
    assert [(t.xid, t.commit_lsn, t.end_lsn, sorted(t.tables)) for t in got] == [
        (7, 100, 120, ["shop.a", "shop.b"]), (8, 200, 220, ["shop.a", "shop.b"])]


def test_the_connector_resumes_past_the_last_transaction_that_changes_the_stuck_table():
    txs = [Transaction(1, 100, 110, {"s.ok"}), Transaction(2, 200, 210, {"s.stuck"}),
           Transaction(3, 300, 310, {"s.ok", "s.other"}), Transaction(4, 400, 410, {"s.stuck", "s.ok"}),
           Transaction(5, 500, 510, {"s.ok"})]
    skip = plan_skip(txs, committed_lsn=100, table="s.stuck")
    assert (skip.to_lsn, skip.skipped, skip.others) == (410, 3, ("s.ok", "s.other"))  # 2, 3 and 4; not 1 nor 5
    assert plan_skip(txs, committed_lsn=400, table="s.stuck") is None  # nothing of it left to pass
    assert plan_skip(txs, committed_lsn=0, table="s.absent") is None


def test_the_moved_offset_streams_from_the_new_position():
    offset = {"lsn_proc": 10, "lsn_commit": 10, "lsn": 10, "messageType": "COMMIT", "txId": 5, "ts_usec": 1}
    skip = plan_skip([Transaction(6, 20, 0x1_0000_0030, {"s.t"})], 10, "s.t")
    assert moved_offset(offset, skip) == {"lsn": 0x1_0000_0030, "txId": 5, "ts_usec": 1}
    assert lsn_text(skip.to_lsn) == "1/30"
