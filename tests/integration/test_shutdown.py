"""A running `cdc run` stopped by a signal to its whole process group, as systemd
(KillMode=control-group), Kubernetes and a terminal's Ctrl-C send it: it stops its query
mid-batch, exits 0 with one line and no traceback, and its driver JVM goes with it. What
it committed, then one `--available-now` run, equals the source, no batch applied twice.
A SIGKILL of the group leaves no JVM behind either."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from cdc.control.commits import BATCH_ID, JOB, parse_offsets
from cdc.control.faults import ENV as CRASH_ENV
from tests.conftest import end_offset, start_driver
from tests.eventually import eventually

TABLES = ("stop_term", "stop_int", "stop_kill")


@pytest.fixture(scope="module")
def senv(it_env):
    s = it_env.schema
    for t in TABLES:
        it_env.sql(f'CREATE TABLE "{s}".{t} (id int PRIMARY KEY, v text, n int)')
        it_env.sql(f'INSERT INTO "{s}".{t} SELECT g, \'v\' || g, g FROM generate_series(1, 20) g')
        # small batches, back to back: a backlog keeps the job mid-batch most of the time
        it_env.register_table(t, options={"max_offsets_per_trigger": 25, "trigger_interval_s": 0.5})
        assert it_env.cdc("register", "--table", f"{s}.{t}") == 0  # the job applies the snapshot too
    return it_env


def backlog(env, table: str) -> None:
    """A few batches' worth of changes, in Kafka before the job starts."""
    s = env.schema
    env.wait_captured(env.transaction(
        f'INSERT INTO "{s}".{table} SELECT g, \'new\', g FROM generate_series(100, 129) g',
        f'UPDATE "{s}".{table} SET v = v || \'+\', n = n + 1 WHERE id % 2 = 0',
        f'DELETE FROM "{s}".{table} WHERE id % 7 = 0'))


def jvm_of(pid: int, deadline_s: float = 120) -> int:
    """The driver's JVM: its child running java (polled until Spark has started it)."""
    def child() -> int | None:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and _ppid(entry) == pid and b"java" in _read(entry / "cmdline").split(b"\0")[0]:
                return int(entry.name)
        return None

    return eventually(child, f"JVM child of driver {pid}", deadline_s, 0.2)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _ppid(proc: Path) -> int | None:
    for line in _read(proc / "status").decode(errors="replace").splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return None


def alive(pid: int) -> bool:
    """Running (a zombie has exited; in a container its new parent may never reap it)."""
    status = _read(Path(f"/proc/{pid}/status")).decode(errors="replace")
    return bool(status) and "\nState:\tZ" not in status


def commits(env, table: str) -> list[tuple[int, str, str]]:
    """(end offset of partition 0, job, batch id) of each data commit, oldest first."""
    topic = f"{env.source}.{env.schema}.{table}"
    return [(parse_offsets(s)[topic][0], s[JOB], s[BATCH_ID]) for s in env.summaries(table)
            if topic in parse_offsets(s)]


def wait_for(condition, what: str, proc, log: Path, timeout: float = 180) -> None:
    eventually(condition, what, timeout, 0.2, alive=lambda: proc.poll() is None,
               detail=lambda: log.read_text()[-3000:])


def kill(proc) -> None:
    """SIGKILL to the driver's group, unless it has exited."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def check_exact(env, table: str, before: list) -> None:
    """Caught up by one more run: the target equals the source, the committed offsets only
    rose, and no batch was committed twice."""
    env.replicate(table)
    env.assert_equal(table)
    history = commits(env, table)
    ends = [end for end, _, _ in history]
    assert ends == sorted(set(ends)), history  # a batch applied twice would repeat its offsets
    assert len({(job, batch) for _, job, batch in history}) == len(history), history
    assert history[:len(before)] == before and len(history) > len(before)
    assert ends[-1] == end_offset(env, f"{env.source}.{env.schema}.{table}")


def check_stopped(proc, log: Path, jvm: int, name: str) -> None:
    out = log.read_text()
    assert proc.returncode == 0, out[-3000:]
    assert f"cdc run: stopped by {name}; 1 table(s) stopped, last commits kept\n" in out, out[-3000:]
    assert "Traceback" not in out and "py4j" not in out.lower(), out[-3000:]
    assert not alive(jvm), f"the driver's JVM {jvm} outlived it"


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_signal_to_the_group_mid_batch_stops_cleanly(senv, tmp_path, name):
    """SIGTERM from the job itself the moment its second batch is about to MERGE (a
    supervisor's stop, exactly mid-batch); SIGINT from outside once batches are running
    (Ctrl-C)."""
    table = "stop_term" if name == "SIGTERM" else "stop_int"
    before = commits(senv, table)
    backlog(senv, table)
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        proc = start_driver(senv, table, out,
                            extra_env={CRASH_ENV: "before-merge:2:SIGTERM"} if name == "SIGTERM" else None)
    try:
        jvm = jvm_of(proc.pid)
        assert os.getsid(jvm) != proc.pid  # its own session: a signal to the driver's group misses it
        if name == "SIGINT":
            wait_for(lambda: " applied in " in log.read_text(), "batch applied", proc, log)
            os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=180)
    finally:
        kill(proc)
    check_stopped(proc, log, jvm, name)
    check_exact(senv, table, before)


def test_sigkill_of_the_group_leaves_no_jvm(senv, tmp_path):
    before = commits(senv, "stop_kill")
    backlog(senv, "stop_kill")
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        proc = start_driver(senv, "stop_kill", out)
    try:
        jvm = jvm_of(proc.pid)
        wait_for(lambda: " applied in " in log.read_text(), "batch applied", proc, log)
    finally:
        kill(proc)
    # The JVM exits when its standard input, a pipe from the driver, closes.
    eventually(lambda: not alive(jvm), f"end of the driver's JVM {jvm} after a SIGKILL of its group", 60, 0.2)
    check_exact(senv, "stop_kill", before)
