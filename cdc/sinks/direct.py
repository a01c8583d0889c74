"""The direct path into an Iceberg target (jvm/direct, `cdc.direct.DirectDelta`): a batch's
last change per key written as a data file and deletion vectors and committed as one
RowDelta, with no MERGE planned. It does what planning/merge.py's MERGE does in upsert mode,
and only where that is provably the same (`refusal`, and the batch's own reasons in
jobs/plan.py); everything else goes through the MERGE."""
from __future__ import annotations

from cdc.sinks.session import jvm_class

HELPER = "cdc.direct.DirectDelta"


def refusal(spark, table, key: tuple[str, ...], columns: tuple[str, ...]) -> str | None:
    """Why the Iceberg `table` (org.apache.iceberg.Table) cannot take a direct write of a batch
    of `columns` keyed by `key`: partitioned, below format version 3, a key type whose values
    do not compare exactly, a column of the batch it lacks or one the batch does not carry
    (None: it can)."""
    return jvm_class(spark, HELPER).refusal(table, list(key), list(columns))


def write(spark, ref: str, changes, key: tuple[str, ...], columns: tuple[str, ...], floor: str | None,
          props: dict[str, str]) -> None:
    """Write `changes` (the MERGE's batch view of data `columns`: one row per key) to the
    Iceberg target `ref` in one Spark job and commit one RowDelta stamped with `props`; no
    commit when nothing changes (the caller then commits `props` alone)."""
    summary = spark._jvm.java.util.HashMap()
    for k, v in props.items():
        summary.put(k, v)
    jvm_class(spark, HELPER).applyOne(spark._jsparkSession, ref, changes._jdf, list(key), list(columns), floor,
                                      summary)


def remember(spark, memory_ref: str, deletes) -> int:
    """Append the `deletes` events (key columns, `_position`, `_source_ts`, `_moved`) to the
    Iceberg delete memory `memory_ref` in one Spark job and one append, without an INSERT
    planned; returns the rows appended."""
    return jvm_class(spark, HELPER).remember(spark._jsparkSession, memory_ref, deletes._jdf)
