"""Each table's job state in a small JSON file under the state directory, so `cdc status`
can tell running, stopped, failed and killed jobs apart; and each table's lock, so one
process at a time runs, replays or bootstraps a table."""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path

from cdc.errors import Busy

RUNNING, STOPPED, FAILED, CAUGHT_UP, DEAD = "running", "stopped", "failed", "caught-up", "dead"


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def read(state_dir: Path, table: str) -> dict:
    """The last recorded state; `running` with a dead process reads as `dead`."""
    try:
        doc = json.loads(_file(state_dir, table).read_text())
    except (FileNotFoundError, ValueError):
        return {"state": "never-run"}
    if doc.get("state") == RUNNING and not _alive(int(doc.get("pid", 0))):
        doc["state"] = DEAD
    return doc


_held: dict[str, list[int]] = {}  # table -> [fd, depth]: locks this process holds
_held_guard = threading.Lock()


@contextmanager
def exclusive(state_dir: Path, tables: list[str]):
    """Hold the tables' locks for the block (re-entrant within a process); a table another
    process holds is refused with that process's pid. A lock dies with its process."""
    taken = []
    try:
        for table in tables:
            _acquire(state_dir, table)
            taken.append(table)
        yield
    finally:
        for table in reversed(taken):
            _release(table)


def _acquire(state_dir: Path, table: str) -> None:
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
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise Busy(f"table {table} is being run, replayed or bootstrapped by another process (pid {holder})",
                             hint="stop that process first: one process at a time writes a table", table=table) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        _held[table] = [fd, 1]


def _release(table: str) -> None:
    with _held_guard:
        entry = _held[table]
        entry[1] -= 1
        if entry[1] == 0:
            del _held[table]
            os.close(entry[0])  # closing the descriptor releases the lock
