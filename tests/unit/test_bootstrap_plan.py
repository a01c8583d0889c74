import pytest

from cdc.bootstrap.load import Progress
from cdc.errors import ApplyError
from cdc.planning.bootstrap import (DONE, PROPERTY, RUNNING, Bootstrap, Chunk, SourceSnapshot, check_not_running,
                                chunk_count, plan_chunks)


def test_snapshot_horizon_is_parsed_to_debezium_xids():
    s = SourceSnapshot.parse("4294967300:4294967310:4294967302,4294967305", "0/2D622B0")
    assert (s.xmin, s.xmax, s.xip) == (4, 14, (6, 9))
    assert s.lsn == 0x2D622B0
    assert s.position == f"{0x2D622B0:016x}" + "0" * 41


def test_snapshot_sees_committed_transactions_only():
    s = SourceSnapshot(lsn=1000, xmin=100, xmax=110, xip=(103, 107))
    assert s.sees(99, 900) and s.sees(104, 900)  # committed before the snapshot
    assert not s.sees(103, 900) and not s.sees(107, 900)  # running when it was taken
    assert not s.sees(110, 900) and not s.sees(200, 900)  # started after it
    assert not s.sees(99, 1001)  # its previous commit lies past the snapshot: newer whatever its id


def test_snapshot_visibility_survives_xid_wraparound():
    s = SourceSnapshot(lsn=1000, xmin=(1 << 32) - 5, xmax=3, xip=((1 << 32) - 2,))
    assert s.sees((1 << 32) - 10, 10)
    assert s.sees((1 << 32) - 3, 10) and s.sees(1, 10)
    assert not s.sees((1 << 32) - 2, 10) and not s.sees(3, 10) and not s.sees(50, 10)


def covering(chunks, key):
    return [c for c in chunks if (c.lo is None or key >= c.lo) and (c.hi is None or key < c.hi)]


def test_chunks_cut_the_key_at_its_quantiles_and_cover_every_key_once():
    cuts = [10, 20, 30, 40, 50, 60, 70]  # 8 ranges: 2 chunks of 4 parallel reads
    chunks = plan_chunks(cuts, chunks=2)
    assert chunks == [Chunk(None, 40, (10, 20, 30)), Chunk(40, None, (50, 60, 70))]
    for key in (-5, 9, 10, 39, 40, 70, 10**12):
        (chunk,) = covering(chunks, key)
        parts = [i for i, (lo, hi) in enumerate(zip([chunk.lo, *chunk.splits], [*chunk.splits, chunk.hi]))
                 if (lo is None or key >= lo) and (hi is None or key < hi)]
        assert len(parts) == 1
    assert plan_chunks([5, 5, 9], chunks=4) == [Chunk(None, 5), Chunk(5, 9), Chunk(9, None)]
    assert plan_chunks([], chunks=3) == [Chunk()]
    assert Chunk(5, 9).where_sql("id") == "`id` >= 5 AND `id` < 9" and Chunk().where_sql("id") == "TRUE"
    assert Chunk(None, 9, (5,)).parts_sql("id") == ["`id` < 5", "`id` >= 5 AND `id` < 9"]
    assert chunk_count(1000, 300) == 4 and chunk_count(0, 300) == 1


def test_bootstrap_state_round_trips_and_names_the_snapshot_per_chunk():
    a, b = SourceSnapshot(10, 5, 7, (6,)), SourceSnapshot(20, 8, 9)
    boot = Bootstrap("x1", "jdbc", DONE, {0: 42, 1: 7}, "tid", "id", [Chunk(None, 100, (50,)), Chunk(100, None)],
                     {0: a, 1: b})
    assert Bootstrap.from_json(boot.to_json()) == boot
    held = boot.held_sql()
    assert held.startswith("(CASE WHEN `id` < 100 THEN") and "WHEN `id` >= 100 THEN" in held
    one = Bootstrap("x2", "jdbc", DONE, {0: 1}, chunks=[Chunk(None, 5), Chunk(5, None)], snapshots={0: a, 1: a})
    assert one.held_sql() == a.sees_sql("_txid", "substring(_position, 1, 16)")
    assert Bootstrap("x3", "debezium", DONE, {0: 1}).held_sql() is None


def test_an_unfinished_bootstrap_stops_the_job_and_names_the_resume():
    running = Bootstrap("x1", "jdbc", RUNNING, {0: 1})
    with pytest.raises(ApplyError, match=r"(?s)jdbc bootstrap \(x1\) is in progress.*cdc bootstrap --table a.b"):
        check_not_running("a.b", {PROPERTY: running.to_json()})
    assert check_not_running("a.b", {}) is None
    done = Bootstrap("x1", "jdbc", DONE, {0: 1})
    assert check_not_running("a.b", {PROPERTY: done.to_json()}) == done


def test_progress_reports_rate_and_time_left(capsys):
    import io

    out, now = io.StringIO(), iter([0.0, 10.0, 20.0])
    p = Progress("a.b", chunks=4, estimate=4000, already=2, out=out, clock=lambda: next(now))
    p.chunk_done(2, 1000)
    assert "chunk 3/4, 1,000 rows, 100 rows/s, about 10s left" in out.getvalue()
    p.chunk_done(3, 1000)
    assert "chunk 4/4, 2,000 rows" in out.getvalue() and "about 0s left" in out.getvalue()


def test_progress_of_a_snapshot_counted_in_rows():
    import io

    out, now = io.StringIO(), iter([0.0, 10.0, 40.0])
    p = Progress("a.b", chunks=1, estimate=4000, out=out, clock=lambda: next(now))
    p.rows_read(1000)
    assert "[#######" in out.getvalue() and "1,000 of about 4,000 rows, 100 rows/s, about 30s left" in out.getvalue()
    p.rows_read(4400)  # streamed changes count too: past the estimate is done
    assert "4,400 of about 4,000 rows, 110 rows/s, about 0s left" in out.getvalue()
