from cdc.jobs.maintenance import expire_before

HOUR = 3_600_000


def test_expiry_never_passes_the_newest_snapshot_with_offsets():
    now = 100 * HOUR
    # a compaction after the last batch carries no offsets: the batch's snapshot stays
    assert expire_before([(10 * HOUR, True), (90 * HOUR, True), (99 * HOUR, False)], 24, now) == 76 * HOUR
    assert expire_before([(10 * HOUR, True), (50 * HOUR, True), (99 * HOUR, False)], 24, now) == 50 * HOUR
    assert expire_before([(99 * HOUR, False)], 24, now) == 76 * HOUR  # no offsets at all: the retention alone


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
