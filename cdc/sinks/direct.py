"""The direct path into an Iceberg target (jvm/direct, `cdc.direct.DirectDelta`): a batch's
events deduped, guarded by the delete memory and written as a data file and deletion
vectors in one task, then committed as one RowDelta, with no MERGE planned. It does what
planning/merge.py's MERGE does in upsert mode, and only where that is provably the same
(`refusal`, and the batch's own reasons in jobs/plan.py); everything else goes through the
MERGE."""
from __future__ import annotations

from cdc.sinks.session import jvm_class

HELPER = "cdc.direct.DirectDelta"


def refusal(spark, table, key: tuple[str, ...], columns: tuple[str, ...]) -> str | None:
    """Why the Iceberg `table` (org.apache.iceberg.Table) cannot take a direct write of a batch
    of `columns` keyed by `key`: partitioned, below format version 3, a key type whose values
    do not compare exactly, a column of the batch it lacks or one the batch does not carry
    (None: it can)."""
    return jvm_class(spark, HELPER).refusal(table, list(key), list(columns))


def write(spark, ref: str, memory_ref: str, events, key: tuple[str, ...], columns: tuple[str, ...],
          floor: str | None, props: dict[str, str]) -> int:
    """Apply a batch's change `events` (decoded, of data `columns`) to the Iceberg target `ref`
    in one Spark job: its last change per key, guarded by each key's remembered delete in
    `memory_ref` and by the truncate `floor`, and its delete events appended to that memory;
    then one RowDelta stamped with `props` (none when nothing changes: the caller then commits
    `props` alone). Returns the deletes remembered."""
    summary = spark._jvm.java.util.HashMap()
    for k, v in props.items():
        summary.put(k, v)
    counts = jvm_class(spark, HELPER).applyEvents(spark._jsparkSession, ref, memory_ref, events._jdf, list(key),
                                                  list(columns), floor, summary)
    return int(counts[3])
