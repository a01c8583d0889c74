"""A reconciler's barrier: where a job cuts a batch, the request's life, and the binary
search for where a count ends in a partition (control/barrier.py, planning/counted.py)."""
import os
import subprocess
import sys

from cdc.control import barrier
from cdc.control.barrier import at_barrier, first_uncounted, missed, split_at
from cdc.planning.counted import CountPoint


def test_a_batch_that_spans_the_barrier_is_cut_there():
    assert split_at({0: 10}, {0: 20}, {0: 15}) == {0: 15}
    # several partitions: each cut at the barrier, one with nothing new kept where it is
    assert split_at({0: 10, 1: 5}, {0: 20, 1: 5}, {0: 15, 1: 5}) == {0: 15, 1: 5}
    # a partition the batch does not reach yet is cut at the batch's end (the commit misses it)
    assert split_at({0: 10, 1: 5}, {0: 20, 1: 7}, {0: 15, 1: 9}) == {0: 15, 1: 7}


def test_no_cut_when_the_batch_ends_before_the_barrier_or_the_table_is_at_or_past_it():
    assert split_at({0: 10}, {0: 15}, {0: 15}) is None  # its own commit ends at the barrier
    assert split_at({0: 10}, {0: 12}, {0: 15}) is None  # ends before it: a later batch is cut
    assert split_at({0: 15}, {0: 20}, {0: 15}) is None  # the last commit is at it already
    assert split_at({0: 16}, {0: 20}, {0: 15}) is None  # past it: the reconciler counts again
    assert split_at({}, {0: 20}, {0: 0}) is None  # an empty partition at offset 0


def test_a_commit_at_the_barrier_and_one_past_it():
    assert at_barrier({0: 15, 1: 3}, {0: 15, 1: 3}) and at_barrier({}, {0: 0})
    assert not at_barrier({0: 15}, {0: 15, 1: 3})
    assert missed({0: 16, 1: 0}, {0: 15, 1: 3}) and not missed({0: 15, 1: 2}, {0: 15, 1: 3})


def test_the_first_record_a_count_does_not_hold_is_found_in_log_reads():
    reads = []

    def counted(offset):
        reads.append(offset)
        return offset < 700_001

    assert first_uncounted(0, 1_000_000, counted) == 700_001
    assert len(reads) <= 21
    assert first_uncounted(5, 5, counted) == 5
    assert first_uncounted(0, 10, lambda o: True) == 10 and first_uncounted(3, 10, lambda o: False) == 3


def test_a_postgres_count_holds_the_transactions_its_snapshot_sees():
    # xmin 100, xmax 105, 102 still running when the count was taken; LSN 0/5000
    point = CountPoint.of((0x5000,), "100:105:102", "0/5000")
    seq = '["20000", "20480"]'  # the previous commit at LSN 0x4E20, before the count
    assert point.holds({"txId": 99, "sequence": seq}, "c")
    assert point.holds({"txId": 101, "sequence": seq}, "u")
    assert not point.holds({"txId": 102, "sequence": seq}, "u")  # in progress then
    assert not point.holds({"txId": 105, "sequence": seq}, "d")  # began after it
    # a commit after the count's LSN precedes it: newer whatever its id
    assert not point.holds({"txId": 101, "sequence": '["30000", "30100"]'}, "c")
    # snapshot reads: by the last commit before them
    assert point.holds({"sequence": None}, "r") and not point.holds({"sequence": '["30000", null]'}, "r")


def test_a_mariadb_count_holds_the_binary_log_up_to_its_position():
    point = CountPoint((3, 1200))
    assert point.holds({"file": "mysql-bin.000003", "pos": 1100, "row": 4}, "c")
    assert not point.holds({"file": "mysql-bin.000003", "pos": 1200, "row": 0}, "u")
    assert not point.holds({"file": "mysql-bin.000004", "pos": 4, "row": 0}, "d")


def test_a_job_waits_for_a_request_to_be_placed_and_takes_its_offsets(tmp_path):
    assert barrier.placed(tmp_path, "s.t") is None  # none filed
    request = barrier.hold(tmp_path, "s.t", hold_s=30)
    now = [0.0]

    def sleep(s):  # the reconciler places it while the job waits
        now[0] += s
        if now[0] > 0.2:
            barrier.place(tmp_path, "s.t", request, {0: 7})

    assert barrier.placed(tmp_path, "s.t", clock=lambda: 0.0, sleep=sleep) == {0: 7}
    barrier.withdraw(tmp_path, "s.t", request)
    assert barrier.read(tmp_path, "s.t") is None


def test_a_request_not_placed_in_time_or_left_by_a_dead_process_is_not_honoured(tmp_path):
    barrier.hold(tmp_path, "s.t", hold_s=1, now=0)
    assert barrier.placed(tmp_path, "s.t", clock=lambda: 5.0, sleep=lambda s: None) is None
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    request = barrier.hold(tmp_path, "s.t", hold_s=60)
    barrier._write(tmp_path, "s.t", barrier.Barrier(request.id, pid, request.hold_until, {0: 1}))
    assert barrier.read(tmp_path, "s.t") is None
    assert os.getpid() != pid


def test_withdrawing_leaves_a_newer_request_alone(tmp_path):
    old = barrier.hold(tmp_path, "s.t")
    new = barrier.hold(tmp_path, "s.t")
    barrier.withdraw(tmp_path, "s.t", old)
    assert barrier.read(tmp_path, "s.t").id == new.id
