"""The JSON a command prints (`--json`, `reconcile --format json`): `schema_version` first,
then the command's fields, named alike across commands for the same thing (`table` a
registration's name, `target`, `lag`, `dead_letters`, `source_commit_time`, `ok`).
`schema_version` goes up when a field changes its meaning or goes away."""
from __future__ import annotations

import json

SCHEMA_VERSION = 1


def dumps(**fields) -> str:
    return json.dumps({"schema_version": SCHEMA_VERSION, **fields}, indent=2, default=str)
