"""Reading a Structured Streaming checkpoint's offset log (no Spark needed), and deciding
how a table's job starts from it and from the table's own history."""
from __future__ import annotations

import json
from pathlib import Path

from cdc.errors import ApplyError


def _batch_ids(d: Path) -> list[int]:
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def batch_end_offsets(checkpoint: Path, batch_id: int) -> dict[str, dict[int, int]] | None:
    """The end offsets (next offset to read) of one planned batch: `offsets/<id>` is
    written before the batch runs. None when the log is not readable here."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 3 or not lines[2].strip().startswith("{"):
        return None
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in json.loads(lines[2]).items()}


def committed_end_offsets(checkpoint: Path) -> dict[str, dict[int, int]] | None:
    """End offsets of the newest batch the checkpoint marks committed, or None."""
    done = _batch_ids(checkpoint / "commits")
    return batch_end_offsets(checkpoint, done[-1]) if done else None


def checkpoint_is_stale(table: str, topic: str, table_offsets: dict[int, int],
                        checkpoint_offsets: dict[str, dict[int, int]] | None) -> bool:
    """Whether the job must move its checkpoint aside (it belongs to another topic). The
    table's history is the truth: a checkpoint behind it is fine (what the table holds is
    skipped); one ahead of it means the table was rolled back, which only a replay can
    repair, so that raises."""
    if checkpoint_offsets is None:
        return False
    if set(checkpoint_offsets) != {topic}:
        return True
    behind = rolled_back(table, topic, table_offsets, checkpoint_offsets[topic])
    if behind is not None:
        raise behind
    return False


def rolled_back(table: str, topic: str, table_offsets: dict[int, int], start: dict[int, int]) -> ApplyError | None:
    """The error of a table whose committed offsets are behind `start`, where its job goes on
    from (its checkpoint): the table was rolled back, restored, or lost commits, and only a
    replay of the missing window repairs it; None when it is not behind."""
    ahead = {p: (table_offsets.get(p, 0), o) for p, o in start.items() if o > table_offsets.get(p, 0)}
    if not ahead:
        return None
    detail = ", ".join(f"partition {p}: table at {t}, checkpoint at {c}" for p, (t, c) in sorted(ahead.items()))
    return ApplyError(f"table {table}: its checkpoint is ahead of the table's committed offsets ({detail}); "
                      f"the table was rolled back or lost commits",
                      hint=f"re-apply the missing window with `cdc replay --table {table} --from-offsets "
                           f"'{json.dumps({topic: {str(p): t for p, (t, _) in sorted(ahead.items())}})}'`")
