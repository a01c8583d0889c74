"""Each table's job state in a small JSON file under the state directory, so `cdc status`
can tell running, stopped, failed and killed jobs apart; each table's lock, so one
process at a time runs, replays or bootstraps a table; and the hand-over of one table by a
running job: a command that needs a table a continuous job holds asks for it (a request
file), the job stops that table alone and lets its lock go, and takes it back once the
command has ended; and the continuous jobs running, each with the tables it follows, so
that `cdc status` can tell a registered table that no running job applies (`not-running`)."""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import threading
from contextlib import contextmanager
from fnmatch import fnmatchcase
from pathlib import Path

from cdc.errors import Busy
from cdc.log import log
from cdc.waiting import poll_until

RUNNING, STOPPED, FAILED, CAUGHT_UP, DEAD = "running", "stopped", "failed", "caught-up", "dead"
HANDED_OVER = "handed-over"  # a continuous job lent the table to a command (bootstrap, replay, ...)
NEVER_RUN = "never-run"  # no job has run the table yet
NOT_RUNNING = "not-running"  # never run or stopped, while a continuous job runs whose --table leaves it out
HANDS_OVER = "hands-over"  # in a lock file, after the pid: its holder lends the table on request
HANDOVER_WAIT_S = 120.0  # how long a command waits for a running job to hand a table over


def _file(state_dir: Path, table: str) -> Path:
    return state_dir / "jobs" / f"{table}.json"


def record(state_dir: Path, table: str, state: str, error: str | None = None, now: dt.datetime | None = None,
           query: str | None = None, remedy: str | None = None) -> None:
    """The table's state (and its error with what to do about it, `remedy`; `query`: the
    shared query that reads it)."""
    f = _file(state_dir, table)
    f.parent.mkdir(parents=True, exist_ok=True)
    doc = {"state": state, "pid": os.getpid(), "updated_at": (now or dt.datetime.now(dt.timezone.utc)).isoformat()}
    if error:
        doc["error"] = error[:2000]
    if remedy:
        doc["remedy"] = remedy[:2000]
    if query:
        doc["query"] = query
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(f)


def forget(state_dir: Path, table: str) -> None:
    """No state recorded for the table any more (taken out of capture)."""
    _file(state_dir, table).unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Whether process `pid` runs (one of another user counts)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def read(state_dir: Path, table: str) -> dict:
    """The last recorded state; `running` with a dead process reads as `dead`; never run or
    stopped while continuous jobs run and none of them takes the table, `not-running`, with
    why as its error."""
    try:
        doc = json.loads(_file(state_dir, table).read_text())
    except (FileNotFoundError, ValueError):
        doc = {"state": NEVER_RUN}
    if doc.get("state") == RUNNING and not alive(int(doc.get("pid", 0))):
        doc["state"] = DEAD
    if doc.get("state") in (NEVER_RUN, STOPPED):
        jobs = runs(state_dir)
        if jobs and not any(follows(table, selection) for selection in jobs.values()):
            shown = "; ".join(f"pid {pid} runs --table {' --table '.join(selection)}"
                              for pid, selection in sorted(jobs.items()))
            doc = {**doc, "state": NOT_RUNNING, "error": f"no running job applies it ({shown})",
                   "remedy": f"run it: add --table {table} to that job's command and restart it, or start "
                             f"`cdc run --table {table}` beside it"}
    return doc


def _runs_dir(state_dir: Path) -> Path:
    return state_dir / "runs"


@contextmanager
def following(state_dir: Path, selection: list[str] | None):
    """For the block, a continuous job that follows the registrations `selection` names
    (`cdc run --table`, names or patterns; None: every table) is recorded as running (`runs`)."""
    f = _runs_dir(state_dir) / f"{os.getpid()}.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    for old in f.parent.glob("*.json"):  # of jobs killed before they could remove theirs
        if old != f and old.stem.isdigit() and not alive(int(old.stem)):
            old.unlink(missing_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "tables": None if selection is None else list(selection)}))
    tmp.replace(f)
    try:
        yield
    finally:
        f.unlink(missing_ok=True)


def runs(state_dir: Path) -> dict[int, list[str] | None]:
    """The live continuous jobs, each with the tables it follows (None: every table)."""
    found = {}
    for f in sorted(_runs_dir(state_dir).glob("*.json")):
        try:
            doc = json.loads(f.read_text())
            pid, selection = int(doc["pid"]), doc.get("tables")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if alive(pid):
            found[pid] = selection
    return found


def follows(table: str, selection: list[str] | None) -> bool:
    """Whether a job run with `--table` `selection` (names or fnmatch patterns; None: every
    table) takes `table`, now or once it is registered."""
    return selection is None or any(fnmatchcase(table, s) if any(c in s for c in "*?[") else table == s
                                    for s in selection)


_held: dict[str, list[int]] = {}  # table -> [fd, depth]: locks this process holds
_held_guard = threading.Lock()


@contextmanager
def exclusive(state_dir: Path, tables: list[str], wait_s: float = HANDOVER_WAIT_S):
    """Hold the tables' locks for the block (re-entrant within a process). A table a
    continuous job holds is asked of it and waited for up to `wait_s` (the job takes it back
    after the block); one another process holds is refused with that process's pid. A lock
    dies with its process."""
    taken = []
    try:
        for table in tables:
            _take(state_dir, table, wait_s)
            taken.append(table)
        yield
    finally:
        for table in reversed(taken):
            _release(table)
            _request_file(state_dir, table).unlink(missing_ok=True)


def _take(state_dir: Path, table: str, wait_s: float) -> None:
    """The table's lock, asked of the continuous job that holds it if one does."""
    try:
        _acquire(state_dir, table)
        return
    except Busy as busy:
        pid, lends = _holder(state_dir, table)
        if not lends:
            raise
        refused = busy
    request = _request_file(state_dir, table)
    request.parent.mkdir(parents=True, exist_ok=True)
    request.write_text(json.dumps({"pid": os.getpid()}))
    log(f"asking the continuous job (pid {pid}) to hand the table over; it takes it back when this command ends",
        table=table, event="handover-asked", pid=pid)

    def acquired() -> bool:
        try:
            _acquire(state_dir, table)
            return True
        except Busy:
            return False

    if not poll_until(acquired, wait_s, 0.2):
        request.unlink(missing_ok=True)
        raise Busy(f"table {table} is run by a continuous job (pid {pid}) that did not hand it over "
                   f"within {wait_s:.0f} s", hint="check that job's log; or stop it, then run this again",
                   table=table) from refused


def _holder(state_dir: Path, table: str) -> tuple[str, bool]:
    """The pid holding the table's lock, and whether it lends the table on request."""
    try:
        words = (state_dir / "locks" / f"{table}.lock").read_text().split()
    except OSError:
        words = []
    return (words[0] if words else "unknown"), HANDS_OVER in words[1:]


def _request_file(state_dir: Path, table: str) -> Path:
    return state_dir / "handover" / f"{table}.json"


def handover_requests(state_dir: Path) -> dict[str, int]:
    """The tables a live process has asked a continuous job to hand over, with its pid."""
    asked = {}
    for f in sorted((state_dir / "handover").glob("*.json")):
        try:
            pid = int(json.loads(f.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if alive(pid):
            asked[f.name.removesuffix(".json")] = pid
    return asked


class Lent:
    """The locks of a continuous job's tables, each lent on request (handover_requests)
    and taken back when the command is done."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.held: set[str] = set()

    def take(self, table: str) -> None:
        """The table's lock (Busy while another process holds it)."""
        if table not in self.held:
            _acquire(self.state_dir, table, HANDS_OVER)
            self.held.add(table)

    def lend(self, table: str) -> None:
        if table in self.held:
            self.held.discard(table)
            _release(table)

    def release_all(self) -> None:
        for table in sorted(self.held):
            self.lend(table)


@contextmanager
def lending(state_dir: Path, tables: list[str]):
    """The tables' locks, held for a continuous job (Lent): all or none."""
    lent = Lent(state_dir)
    try:
        for table in tables:
            lent.take(table)
        yield lent
    finally:
        lent.release_all()


def _acquire(state_dir: Path, table: str, note: str = "") -> None:
    with _held_guard:
        if table in _held:
            _held[table][1] += 1
            return
        path = state_dir / "locks" / f"{table}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").split()
            os.close(fd)
            raise Busy(f"table {table} is being run, replayed or bootstrapped by another process "
                       f"(pid {holder[0] if holder else 'unknown'})",
                       hint="stop that process first: one process at a time writes a table", table=table) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {note}".strip().encode(), 0)
        _held[table] = [fd, 1]


def _release(table: str) -> None:
    with _held_guard:
        entry = _held[table]
        entry[1] -= 1
        if entry[1] == 0:
            del _held[table]
            os.close(entry[0])  # closing the descriptor releases the lock
