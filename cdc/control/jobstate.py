"""Each table's job state in a small JSON file under the state directory, so `cdc status`
can tell running, stopped, failed and killed jobs apart."""
from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

RUNNING, STOPPED, FAILED, CAUGHT_UP, DEAD = "running", "stopped", "failed", "caught-up", "dead"


def _file(state_dir: Path, table: str) -> Path:
    return state_dir / "jobs" / f"{table}.json"


def record(state_dir: Path, table: str, state: str, error: str | None = None, now: dt.datetime | None = None) -> None:
    f = _file(state_dir, table)
    f.parent.mkdir(parents=True, exist_ok=True)
    doc = {"state": state, "pid": os.getpid(), "updated_at": (now or dt.datetime.now(dt.timezone.utc)).isoformat()}
    if error:
        doc["error"] = error[:2000]
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(f)


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
