"""A continuous job lends one of its tables to a command that asks for it (bootstrap,
replay, tables remove) and takes it back after; any other holder refuses at once."""
import subprocess
import sys
import textwrap

import pytest

from cdc.control import jobstate
from cdc.errors import Busy

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from cdc.control import jobstate
    state, lends = Path(sys.argv[1]), sys.argv[2] == "lends"
    if lends:
        lent = jobstate.Lent(state)
        lent.take("s.a")
    else:
        jobstate._acquire(state, "s.a")
    print("held", flush=True)
    while lends and "s.a" not in jobstate.handover_requests(state):
        time.sleep(0.05)
    if lends:
        lent.lend("s.a")
        print("lent", flush=True)
        while "s.a" in jobstate.handover_requests(state):
            time.sleep(0.05)
        while True:
            try:
                lent.take("s.a")
                break
            except jobstate.Busy:
                time.sleep(0.05)
        print("taken back", flush=True)
    else:
        time.sleep(30)
""")


def holder(state, how: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(state), how], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_table_a_continuous_job_holds_is_handed_over_and_taken_back(tmp_path, capsys):
    job = holder(tmp_path, "lends")
    try:
        with jobstate.exclusive(tmp_path, ["s.a"], wait_s=30):
            assert job.stdout.readline().strip() == "lent"
            assert "asking the continuous job (pid" in capsys.readouterr().err
        assert not jobstate.handover_requests(tmp_path)  # withdrawn after the block
        assert job.stdout.readline().strip() == "taken back"
    finally:
        job.kill()
        job.wait()


def test_a_table_another_command_holds_is_refused_at_once(tmp_path):
    other = holder(tmp_path, "keeps")
    try:
        with pytest.raises(Busy, match=rf"pid {other.pid}\)"):
            with jobstate.exclusive(tmp_path, ["s.a"], wait_s=30):
                pass
        assert not jobstate.handover_requests(tmp_path)
    finally:
        other.kill()
        other.wait()


def test_a_job_that_does_not_hand_over_in_time_is_named(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from cdc.control import jobstate
        jobstate.Lent(Path(sys.argv[1])).take("s.a")
        print("held", flush=True)
        time.sleep(30)
    """), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "held"
    try:
        with pytest.raises(Busy, match=r"did not hand it over within 1 s"):
            with jobstate.exclusive(tmp_path, ["s.a"], wait_s=1):
                pass
        assert not jobstate.handover_requests(tmp_path)  # the request goes with the refusal
    finally:
        job.kill()
        job.wait()
