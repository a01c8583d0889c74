"""The MERGE statement of one micro-batch, built from names alone (no Spark needed).

The batch view holds one row per key (the last change, see `dedupe`), with `_op` one of
c, u, r (upsert), d (delete) or `tombstone`, and the `_cdc_*` values of that change.
Every branch is guarded by position, so an older change never overwrites newer state
and re-applying a batch changes nothing.
"""
from __future__ import annotations

from cdc.decoding.spark_decode import TOMBSTONE, q

METADATA = {
    "_cdc_op": "_op",
    "_cdc_position": "_position",
    "_cdc_source_ts": "_source_ts",
    "_cdc_kafka_partition": "_partition",
    "_cdc_kafka_offset": "_offset",
}


def merge_sql(target: str, batch_view: str, key: tuple[str, ...], columns: tuple[str, ...]) -> str:
    """MERGE INTO `target` USING `batch_view`: delete on `d`, update when newer, insert
    when absent; a lone tombstone deletes only a row written earlier in its partition."""
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in key)
    assign = [(q(c), f"s.{q(c)}") for c in columns] + [(q(m), f"s.{q(src)}") for m, src in METADATA.items()]
    set_clause = ", ".join(f"t.{name} = {value}" for name, value in assign if name not in {q(k) for k in key})
    insert_cols = ", ".join(name for name, _ in assign)
    insert_vals = ", ".join(value for _, value in assign)
    return (
        f"MERGE INTO {target} t USING {q(batch_view)} s ON {on}\n"
        f"WHEN MATCHED AND s._op = 'd' AND s._position > t._cdc_position THEN DELETE\n"
        f"WHEN MATCHED AND s._op = '{TOMBSTONE}' AND s._partition = t._cdc_kafka_partition"
        f" AND s._offset > t._cdc_kafka_offset THEN DELETE\n"
        f"WHEN MATCHED AND s._op IN ('c', 'u', 'r') AND s._position > t._cdc_position THEN UPDATE SET {set_clause}\n"
        f"WHEN NOT MATCHED AND s._op IN ('c', 'u', 'r') THEN INSERT ({insert_cols}) VALUES ({insert_vals})"
    )


def truncate_sql(target: str, position: str) -> str:
    """Rows written before a truncate at `position` go; later ones stay."""
    if not all(ch in "0123456789abcdef" for ch in position):
        raise ValueError(f"not a position: {position!r}")
    return f"DELETE FROM {target} WHERE _cdc_position < '{position}'"


def table_ref(catalog: str, target: str) -> str:
    """`catalog`.`namespace`.`table`, quoted."""
    return ".".join(q(p) for p in (catalog, *target.split(".")))
