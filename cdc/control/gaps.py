"""Checks of a table's committed offsets against what Kafka still holds. No I/O here."""
from __future__ import annotations

from cdc.errors import ApplyError

REFILL = ("re-fill the table from the source with `cdc bootstrap --table {table}` (it empties the target, reads "
          "the source at a consistent position and streams on from Kafka's current end)")


def check_offsets_available(table: str, topic: str, committed: dict[int, int],
                            watermarks: dict[int, tuple[int, int]], committed_topic_id: str | None = None,
                            current_topic_id: str | None = None) -> None:
    """Fail when data the table has not applied is gone (retention), or when the topic was
    recreated (a new topic id, or offsets that went backwards). Never skip data silently."""
    if committed and committed_topic_id and current_topic_id and committed_topic_id != current_topic_id:
        raise ApplyError(f"table {table}: topic {topic} was recreated (topic id {current_topic_id}, the table's "
                         f"offsets belong to {committed_topic_id}); its offsets mean nothing to this table",
                         hint=REFILL.format(table=table))
    for p, next_offset in sorted(committed.items()):
        if p not in watermarks:
            raise ApplyError(f"table {table}: topic {topic} has no partition {p}, but the table has applied "
                             f"offsets of it up to {next_offset - 1}; the topic was recreated or shrunk",
                             hint=REFILL.format(table=table))
        low, high = watermarks[p]
        if next_offset < low:
            raise ApplyError(f"table {table}: topic {topic} partition {p} no longer holds offsets "
                             f"{next_offset}..{low - 1}, which the table has not applied (retention deleted them)",
                             hint="the gap cannot be replayed from Kafka; " + REFILL.format(table=table))
        if next_offset > high:
            raise ApplyError(f"table {table}: topic {topic} partition {p} ends at offset {high}, but the table has "
                             f"applied up to {next_offset - 1}; the topic was recreated (offsets went backwards)",
                             hint=REFILL.format(table=table))
