"""Names shared by the SQL the planner writes and the Spark decoder: pure, no Spark."""
from __future__ import annotations

TOMBSTONE = "tombstone"  # the `_op` of a Kafka record with a null value
VALUES_AT = "_values_at"  # soft_delete: the position of the upsert whose values a key's batch row carries


def q(name: str) -> str:
    """A Spark SQL identifier, quoted."""
    return "`" + name.replace("`", "``") + "`"
