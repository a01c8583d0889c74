"""cdc's operational log lines, on stderr: `<time> <LEVEL> <table>: <message>` as text, or
one JSON object per line (`cdc --log-format json`, or CDC_LOG_FORMAT=json) with the time,
level, table, event, message and the event's fields, for a log shipper to parse. Times are
UTC. Reports and command output go to stdout and are not log lines."""
from __future__ import annotations

import datetime as dt
import json
import os
import sys

FORMATS = ("text", "json")
_format = {"value": os.environ.get("CDC_LOG_FORMAT", "text")}


def set_format(name: str) -> None:
    if name not in FORMATS:
        raise ValueError(f"log format {name!r}: expected one of {', '.join(FORMATS)}")
    _format["value"] = name


def log(message: str, *, table: str | None = None, event: str | None = None, level: str = "info",
        stream=None, **fields) -> None:
    """One log line. `event` names what happened (`batch-applied`, `table-failed`, ...), and
    `fields` carry its figures, for machines; `message` says it for people."""
    out = stream or sys.stderr
    now = dt.datetime.now(dt.timezone.utc)
    if _format["value"] == "json":
        doc = {"time": now.isoformat(timespec="milliseconds"), "level": level,
               "table": table, "event": event, "message": message, **fields}
        out.write(json.dumps({k: v for k, v in doc.items() if v is not None}, default=str) + "\n")
    else:
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
        out.write(f"{stamp} {level.upper():7} " + (f"{table}: {message}" if table else message) + "\n")
    out.flush()
