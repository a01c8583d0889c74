"""The MERGE statement of one micro-batch, built from names alone (no Spark needed).

The batch view holds one row per key (the last change, see `dedupe`), with `_op` one of
c, u, r (upsert), d (delete) or `tombstone`, and the `_cdc_*` values of that change.
Every branch is guarded by position, so an older change never overwrites newer state
and re-applying a batch changes nothing.
"""
from __future__ import annotations

from cdc.planning.sql import TOMBSTONE, VALUES_AT, q

DELETES_SUFFIX = "__cdc_deletes"
MOVED = "_cdc_moved"  # the delete memory's copy of a moved row's values (planning/unchanged.py)

METADATA = {
    "_cdc_op": "_op",
    "_cdc_position": "_position",
    "_cdc_source_ts": "_source_ts",
    "_cdc_kafka_partition": "_partition",
    "_cdc_kafka_offset": "_offset",
}


KEY_BUCKETS = 1 << 16  # buckets of a key's hash (`key_bucket`)
EXACT_HASH = ("ARRAY", "MAP", "STRUCT", "FLOAT", "DOUBLE")  # types whose equal values may hash apart (-0.0, NaN)


def key_bucket(key: dict[str, str], alias: str | None = None) -> str | None:
    """A key's bucket among KEY_BUCKETS: a hash of its columns, each cast to its target type
    (`key`: name -> Spark type), so that equal keys share a bucket on both sides of a MERGE;
    None when a key type could hash equal values apart."""
    if any(t.upper().startswith(EXACT_HASH) for t in key.values()):
        return None
    prefix = f"{alias}." if alias else ""
    cols = ", ".join(f"CAST({prefix}{q(k)} AS {t})" for k, t in key.items())
    return f"pmod(xxhash64({cols}), {KEY_BUCKETS})"


def merge_sql(target: str, batch_view: str, key: tuple[str, ...], columns: tuple[str, ...],
              floor: str | None = None, toastable: tuple[str, ...] = (), mode: str = "upsert",
              buckets: tuple[str, tuple[int, ...]] | None = None) -> str:
    """MERGE INTO `target` USING `batch_view`: delete on `d`, update when newer, insert
    when absent and newer than the key's remembered delete (`_deleted_position` of the
    batch view) and than the last truncate (`floor`); a lone tombstone deletes only a row
    written earlier in its partition. In `soft_delete` mode a delete marks the row
    (`_cdc_deleted`, with the delete's position, so older changes still lose) instead, and a
    key created and deleted within the batch is inserted marked (`_inserted`). `buckets`
    (the target's `key_bucket` and the buckets of the batch's keys) keeps only the target's
    rows that can match before the join: a small batch does not move the whole table."""
    # A row without a position (written by another tool) yields to any change. Kafka's
    # (partition, offset) ends the position, so a redelivered event rewrites its own row
    # with the same values; events sharing one LSN still apply in log order across batches.
    newer = "(t._cdc_position IS NULL OR s._position > t._cdc_position)"
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in key)
    if buckets:
        on += f" AND {buckets[0]} IN ({', '.join(str(int(b)) for b in buckets[1])})"
    assign = _assignments(columns, mode)
    # A toastable column the batch carries no value for keeps the stored one.
    kept = {q(c): f"CASE WHEN s._has_{i} THEN s.{q(c)} ELSE t.{q(c)} END" for i, c in enumerate(toastable)}
    set_clause = ", ".join(f"t.{name} = {kept.get(name, value)}" for name, value in assign
                           if name not in {q(k) for k in key})
    insert_cols = ", ".join(name for name, _ in assign)
    insert_vals = ", ".join(value for _, value in assign)
    tomb = (f"s._op = '{TOMBSTONE}' AND s._partition = t._cdc_kafka_partition"
            f" AND s._offset > t._cdc_kafka_offset")
    if mode == "soft_delete":
        # The deleted row keeps the newest values the batch's changes carried before the
        # delete (`_values_at`: their position) when they are newer than the stored ones.
        fresh = f"(s.{VALUES_AT} IS NOT NULL AND (t._cdc_position IS NULL OR s.{VALUES_AT} > t._cdc_position))"
        values = ", ".join(
            f"t.{name} = CASE WHEN {fresh}{' AND s._has_' + str(toastable.index(c)) if c in toastable else ''} "
            f"THEN s.{name} ELSE t.{name} END" for c in columns if c not in key for name in [q(c)])
        delete = (f"UPDATE SET {values + ', ' if values else ''}t._cdc_deleted = true, t._cdc_op = 'd', "
                  "t._cdc_position = s._position, t._cdc_source_ts = s._source_ts, "
                  "t._cdc_kafka_partition = s._partition, t._cdc_kafka_offset = s._offset")
        tomb_delete = ("UPDATE SET t._cdc_deleted = true, t._cdc_op = 'd', t._cdc_kafka_offset = s._offset")
        tomb += " AND NOT t._cdc_deleted"
    else:
        delete = tomb_delete = "DELETE"
    return (
        f"MERGE INTO {target} t USING {q(batch_view)} s ON {on}\n"
        f"WHEN MATCHED AND s._op = 'd' AND {newer} THEN {delete}\n"
        f"WHEN MATCHED AND {tomb} THEN {tomb_delete}\n"
        f"WHEN MATCHED AND s._op IN ('c', 'u', 'r') AND {newer} THEN UPDATE SET {set_clause}\n"
        f"WHEN NOT MATCHED AND {_inserted(mode)} AND {_insert_guard(floor)} "
        f"THEN INSERT ({insert_cols}) VALUES ({insert_vals})"
    )


def append_sql(target: str, batch_view: str, columns: tuple[str, ...], floor: str | None = None,
               mode: str = "upsert") -> str:
    """The batch into an empty target: a bulk append of what the MERGE would insert (no
    row can match, so there is nothing to update or delete)."""
    assign = _assignments(columns, mode)
    return (f"INSERT INTO {target} ({', '.join(name for name, _ in assign)}) "
            f"SELECT {', '.join(value for _, value in assign)} FROM {q(batch_view)} s "
            f"WHERE {_inserted(mode)} AND {_insert_guard(floor)}")


def history_merge_sql(target: str, batch_view: str, key: tuple[str, ...], columns: tuple[str, ...]) -> str:
    """History mode's one MERGE (the batch view of `planning/history.py`): a CLOSE row ends
    the key's open version at the key's first new change; VERSION rows are inserted. Each
    key has one CLOSE row and at most one open version, so no target row matches twice."""
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in key)
    assign = _assignments(columns, "history")
    return (f"MERGE INTO {target} t USING {q(batch_view)} s ON {on} AND s._role = 'c' AND t._cdc_current\n"
            f"WHEN MATCHED THEN UPDATE SET t._cdc_valid_to = s._source_ts, t._cdc_current = false\n"
            f"WHEN NOT MATCHED AND s._role = 'v' THEN INSERT ({', '.join(n for n, _ in assign)}) "
            f"VALUES ({', '.join(v for _, v in assign)})")


MODE_VALUES = {  # what a new or updated row's mode columns get
    "upsert": {},
    "soft_delete": {"_cdc_deleted": "s._op = 'd'"},
    "history": {"_cdc_valid_from": "s._source_ts", "_cdc_valid_to": "s._valid_to", "_cdc_current": "s._last"},
}


def _assignments(columns: tuple[str, ...], mode: str = "upsert") -> list[tuple[str, str]]:
    """(target column, batch view expression) for the data, `_cdc_*` and mode columns."""
    return ([(q(c), f"s.{q(c)}") for c in columns] + [(q(m), f"s.{q(src)}") for m, src in METADATA.items()]
            + [(q(m), value) for m, value in MODE_VALUES[mode].items()])


def _inserted(mode: str) -> str:
    """The batch rows that insert a row their key lacks: its upserts, and in soft_delete mode
    a key created and deleted within the batch too (kept, marked deleted, with the values
    its changes carried), so that a soft-delete target holds every key the source held,
    however the changes were cut into batches."""
    upsert = "s._op IN ('c', 'u', 'r')"
    return f"({upsert} OR (s._op = 'd' AND s.{VALUES_AT} IS NOT NULL))" if mode == "soft_delete" else upsert


def _insert_guard(floor: str | None) -> str:
    """A change inserts only when newer than the key's remembered delete and the last truncate."""
    guard = "(s._deleted_position IS NULL OR s._position > s._deleted_position)"
    if floor:
        guard += f" AND s._position > '{check_position(floor)}'"
    return guard


def remember_deletes_sql(deletes: str, batch_view: str, key: tuple[str, ...]) -> str:
    """Append the batch's deletes (key, position, source time, and for a key change whose
    create is in a later batch the moved row's unchanged values, `_moved`: planning/unchanged.py)
    to the table's delete memory:
    one file and one commit, whatever the memory's size (every batch reads the memory, and
    a file costs more to open than its few rows to read). A key deleted again gets a second
    entry; readers take the newest position per key (`remembered_deletes_sql`)."""
    cols = ", ".join([q(k) for k in key] + ["_cdc_position", "_cdc_source_ts", MOVED])
    vals = ", ".join([q(k) for k in key] + ["_position", "_source_ts", "_moved"])
    return f"INSERT INTO {deletes} ({cols}) SELECT /*+ COALESCE(1) */ {vals} FROM {q(batch_view)} WHERE _op = 'd'"


def remembered_deletes_sql(deletes: str, key: tuple[str, ...], version: int | None = None) -> str:
    """The newest remembered delete position per key, as `_deleted_<i>` key columns and
    `_deleted_position`; as of the memory's `version` (an Iceberg snapshot id or a Delta
    version) when given."""
    keys = ", ".join(q(k) for k in key)
    aliased = ", ".join(f"{q(k)} AS `_deleted_{i}`" for i, k in enumerate(key))
    at = "" if version is None else f" VERSION AS OF {int(version)}"
    return (f"SELECT {aliased}, max(_cdc_position) AS _deleted_position FROM {deletes}{at} GROUP BY {keys}")


def forget_deletes_sql(deletes: str, horizon_hours: int) -> str:
    """Drop remembered deletes older than the horizon (by source commit time)."""
    return (f"DELETE FROM {deletes} WHERE _cdc_source_ts < "
            f"current_timestamp() - make_dt_interval(0, {int(horizon_hours)}, 0, 0)")


def deletes_table_sql(deletes: str, key_types: list[tuple[str, str]], clause: str) -> str:
    """The delete memory's CREATE TABLE; `clause` gives its format (USING ... TBLPROPERTIES ...)."""
    cols = ", ".join(f"{q(k)} {t} NOT NULL" for k, t in key_types)
    return (f"CREATE TABLE IF NOT EXISTS {deletes} ({cols}, _cdc_position STRING, _cdc_source_ts TIMESTAMP, "
            f"{MOVED} STRING) {clause}")


def check_position(position: str) -> str:
    if not position or not all(ch in "0123456789abcdef" for ch in position):
        raise ValueError(f"not a position: {position!r}")
    return position


def truncate_sql(target: str, position: str, mode: str = "upsert", at_ms: int | None = None) -> str:
    """Rows written before a truncate at `position` go; later ones stay. In soft_delete mode
    they are marked deleted at the truncate's position; in history mode their open versions
    end at the truncate's source commit time (`at_ms`, epoch milliseconds)."""
    before = f"(_cdc_position IS NULL OR _cdc_position < '{check_position(position)}')"
    if mode == "soft_delete":
        return (f"UPDATE {target} SET _cdc_deleted = true, _cdc_op = 't', _cdc_position = '{position}' "
                f"WHERE NOT _cdc_deleted AND {before}")
    if mode == "history":
        return (f"UPDATE {target} SET _cdc_valid_to = timestamp_millis({int(at_ms or 0)}), _cdc_current = false "
                f"WHERE _cdc_current AND {before}")
    return f"DELETE FROM {target} WHERE {before}"


def table_ref(catalog: str, target: str) -> str:
    """`catalog`.`namespace`.`table`, quoted."""
    return ".".join(q(p) for p in (catalog, *target.split(".")))


def deletes_ref(catalog: str, target: str) -> str:
    """The delete memory of a target: `<namespace>.<table>__cdc_deletes`."""
    return table_ref(catalog, target + DELETES_SUFFIX)
