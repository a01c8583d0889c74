"""Delta Lake targets (`sink: delta`): where they live, their creation from the source's
columns (through Spark, which writes the table features the job needs), and what the
commands that read metadata only (register, status, reconcile) see of them through
delta-rs (the `deltalake` package), the second reader."""
from __future__ import annotations

import json
from pathlib import Path

from cdc.config.models import Settings, TableRegistration
from cdc.control.commits import OFFSETS
from cdc.errors import ApplyError, ConfigError
from cdc.planning.protect import check_mask_key
from cdc.planning.sql import q
from cdc.sinks.session import get_session
from cdc.sinks.targets import (LIVE_ROWS, METADATA_COLUMNS, MODE_COLUMNS, PROP_KEY, PROP_SNAPSHOT, check_owner,
                               check_protection, protection_properties, target_properties)
from cdc.sources.types import Column

# Deletes and updates mark rows in deletion vectors instead of rewriting files.
TABLE_PROPERTIES = {"delta.enableDeletionVectors": "true"}
# Spark SQL types of the kinds of the `_cdc_*` columns.
SPARK_TYPES = {"string": "STRING", "timestamptz": "TIMESTAMP", "int": "INT", "long": "BIGINT", "boolean": "BOOLEAN"}


def location(settings: Settings, target: str, suffix: str = "") -> Path:
    """<delta.root>/<namespace>/<table><suffix>."""
    namespace, table = target.split(".")
    return settings.path(settings.delta.root) / namespace / (table + suffix)


def ref(path: Path) -> str:
    """The Spark SQL name of the Delta table at `path`."""
    return "delta." + q(str(path))


def properties_sql(props: dict[str, str]) -> str:
    return ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in props.items())


def _literal(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_sql(table_ref: str, columns: tuple[Column, ...], mode: str, masked: tuple[str, ...],
               props: dict[str, str]) -> str:
    """CREATE TABLE of a target: the source's columns (a masked one as the string of its
    hash), the `_cdc_*` metadata columns and those of the mode, unpartitioned."""
    cols = [f"{q(c.name)} {'STRING' if c.name in masked else c.spark_type}{'' if c.nullable else ' NOT NULL'}"
            for c in columns]
    cols += [f"{q(name)} {SPARK_TYPES[kind]} COMMENT {_literal(doc)}"
             for name, kind, doc in METADATA_COLUMNS + MODE_COLUMNS[mode]]
    return (f"CREATE TABLE {table_ref} ({', '.join(cols)}) USING delta "
            f"TBLPROPERTIES ({properties_sql({**TABLE_PROPERTIES, **props})})")


def open_table(path: Path):
    """The deltalake.DeltaTable at `path`, or None when there is none."""
    from deltalake import DeltaTable

    return DeltaTable(str(path)) if DeltaTable.is_deltatable(str(path)) else None


def properties(table) -> dict[str, str]:
    return dict(table.metadata().configuration)


def committed_summary(commits) -> dict | None:
    """The cdc keys (userMetadata) of the newest commit with offsets whose data the table
    still holds, from its commits newest first (dicts with version, operation,
    operationParameters and userMetadata). Maintenance commits carry no offsets; a RESTORE
    undoes the commits after the version it restored, so their offsets no longer count."""
    below = None  # after a RESTORE: only commits up to the version it restored
    for commit in commits:
        version = int(commit["version"])
        if below is not None and version > below:
            continue
        if commit.get("operation") == "RESTORE":
            params = commit.get("operationParameters") or {}
            if params.get("version") in (None, "", "null"):
                raise ApplyError("the Delta table was restored to a timestamp; cdc cannot tell which of its "
                                 "commits' offsets it still holds", hint="re-apply the topic: `cdc replay --table "
                                 "<name> --from-earliest`")
            below = int(params["version"])
            continue
        meta = commit.get("userMetadata")
        if meta and OFFSETS in (summary := json.loads(meta)):
            return summary
    return None


def last_committed(table) -> dict | None:
    """`committed_summary` of a deltalake.DeltaTable."""
    return committed_summary(table.history())


def live_rows(table, mode: str) -> int:
    """The rows that mirror source rows (LIVE_ROWS of the mode), counted by delta-rs."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    result = QueryBuilder().register("t", table).execute(f"SELECT count(*) AS n FROM t WHERE {LIVE_ROWS[mode]}")
    return int(pa.table(result.read_all()).column("n")[0].as_py())


def ensure_table(settings: Settings, reg: TableRegistration, columns: tuple[Column, ...], key: tuple[str, ...],
                 topic: str, dry_run: bool = False, mask_key: bytes | None = None) -> bool:
    """Create the target if it is missing (True; with `dry_run`: when it would be, and
    nothing changes). An existing target must have been registered with the same key."""
    path = location(settings, reg.target)
    table = open_table(path)
    columns, props = target_properties(reg, columns, key, topic, mask_key)
    if table is not None:
        recorded = properties(table)
        check_owner(reg, recorded, topic, str(path))
        check_mask_key(reg, recorded, mask_key)
        existing = json.loads(recorded.get(PROP_KEY, "null"))
        if existing != list(key):
            raise ConfigError(f"target {path} exists with key {existing}, but {reg.name} now has key {list(key)}",
                              hint="delete the target's directory and register again, or keep the original key")
        check_protection(reg, recorded)
        changed = {k: v for k, v in props.items() if recorded.get(k) != v}
        if changed and not dry_run:
            set_properties(settings, path, changed)
        return False
    if dry_run:
        return True
    get_session(settings).sql(create_sql(ref(path), columns, reg.mode, reg.mask, {**props, **protection_properties(reg)}))
    return True


def set_properties(settings: Settings, path: Path, props: dict[str, str]) -> None:
    get_session(settings).sql(f"ALTER TABLE {ref(path)} SET TBLPROPERTIES ({properties_sql(props)})")


def snapshot_pending(settings: Settings, tables: list[TableRegistration]) -> list[TableRegistration]:
    """Registered tables with a target whose source rows Debezium has not snapshotted yet."""
    pending = []
    for t in tables:
        table = open_table(location(settings, t.target))
        if table is not None and not properties(table).get(PROP_SNAPSHOT):
            pending.append(t)
    return pending


def mark_snapshotted(settings: Settings, reg: TableRegistration, how: str) -> None:
    set_properties(settings, location(settings, reg.target), {PROP_SNAPSHOT: how})
