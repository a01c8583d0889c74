from cdc.jobs.apply import compaction_due
from cdc.jobs.maintenance import expire_before

HOUR = 3_600_000


def test_expiry_never_passes_the_newest_snapshot_with_offsets():
    now = 100 * HOUR
    # a compaction after the last batch carries no offsets: the batch's snapshot stays
    assert expire_before([(10 * HOUR, True), (90 * HOUR, True), (99 * HOUR, False)], 24, now) == 76 * HOUR
    assert expire_before([(10 * HOUR, True), (50 * HOUR, True), (99 * HOUR, False)], 24, now) == 50 * HOUR
    assert expire_before([(99 * HOUR, False)], 24, now) == 76 * HOUR  # no offsets at all: the retention alone


def test_a_running_job_rewrites_once_a_partition_or_the_delete_memory_gathered_its_files():
    assert not compaction_due(15, 1, 0, 16) and compaction_due(16, 1, 0, 16)  # unpartitioned: files added
    assert not compaction_due(127, 8, 0, 16) and compaction_due(128, 8, 0, 16)  # 8 buckets: 16 files each
    assert not compaction_due(20, 8, 15, 16) and compaction_due(20, 8, 16, 16)  # or 16 inserts into the memory
    assert compaction_due(1, 0, 0, 1)  # a spec read as no partitions counts as one


def test_one_process_at_a_time_holds_a_table(tmp_path):
    import subprocess
    import sys

    import pytest

    from cdc.control.jobstate import exclusive
    from cdc.errors import IN_FLIGHT, Busy

    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from cdc.control.jobstate import exclusive\n"
        f"with exclusive(Path({str(tmp_path)!r}), ['a.b']):\n"
        "    print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Busy, match=f"another process \\(pid {holder.pid}\\)") as busy:
            with exclusive(tmp_path, ["a.c", "a.b"]):
                pass
        assert busy.value.exit_code == IN_FLIGHT  # a scheduler runs it again later
        with exclusive(tmp_path, ["a.c"]), exclusive(tmp_path, ["a.c"]):  # re-entrant in one process
            pass
    finally:
        holder.kill()
        holder.wait()
    with exclusive(tmp_path, ["a.b"]):  # a lock dies with its process
        pass
