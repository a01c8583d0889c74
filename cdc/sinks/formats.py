"""Which format a registration's target is in, and where its tables are: `open_table`
gives the `SinkTable` (table.py) of its format, so that nothing above sinks/ asks which one.
This module sits above the format modules (iceberg_target.py, delta_target.py), which do
not import each other."""
from __future__ import annotations

from cdc.config.models import Settings, TableRegistration
from cdc.log import log
from cdc.planning import dead_letters
from cdc.planning.dead_letters import SUFFIX as DEAD_LETTERS_SUFFIX
from cdc.planning.merge import DELETES_SUFFIX, MOVED, deletes_table_sql, table_ref
from cdc.planning.sql import q
from cdc.sinks import delta, iceberg_spark
from cdc.sinks.delta_target import DELTA_PREFIX, DeltaTarget
from cdc.sinks.iceberg_target import IcebergTarget
from cdc.sinks.table import SinkTable

# How a format's auxiliary tables (delete memory, dead letters) are created.
TABLE_CLAUSES = {
    "iceberg": f"USING iceberg TBLPROPERTIES ({delta.properties_sql(iceberg_spark.TABLE_PROPERTIES)})",
    "delta": f"USING delta TBLPROPERTIES ({delta.properties_sql(delta.TABLE_PROPERTIES)})",
}


def target_refs(settings: Settings, reg: TableRegistration) -> tuple[str, str, str]:
    """Spark SQL names of a registration's target, delete memory and dead-letter table."""
    suffixes = ("", DELETES_SUFFIX, DEAD_LETTERS_SUFFIX)
    if reg.sink == "delta":
        return tuple(delta.ref(delta.location(settings, reg.target, s)) for s in suffixes)
    return tuple(table_ref(settings.catalog.name, reg.target + s) for s in suffixes)


def table_names(settings: Settings, reg: TableRegistration) -> tuple[str, str, str]:
    """How logs name a registration's target, delete memory and dead-letter table:
    namespace.table (with its suffix), or the Delta table's path."""
    suffixes = ("", DELETES_SUFFIX, DEAD_LETTERS_SUFFIX)
    if reg.sink == "delta":
        return tuple(str(delta.location(settings, reg.target, s)) for s in suffixes)
    return tuple(reg.target + s for s in suffixes)


def missing_table(e: Exception) -> bool:
    """Whether opening a table failed because there is none (py4j wraps Iceberg's
    NoSuchTableException; DeltaTarget raises LookupError)."""
    return any(m in str(e) for m in ("NoSuchTable", "TABLE_OR_VIEW_NOT_FOUND")) or "not found" in str(e).lower()


def storage_location(settings: Settings, reg: TableRegistration | None):
    """Where a registration's tables keep their files: the Delta root, or the catalog's
    warehouse (None: the catalog's default)."""
    if reg is not None and reg.sink == "delta":
        return settings.path(settings.delta.root)
    c = settings.catalog
    return c.warehouse if c.type == "rest" else settings.path(c.warehouse)


def shown_name(settings: Settings, reg: TableRegistration) -> str:
    """How messages name a registration's target: catalog.namespace.table, or the Delta path."""
    if reg.sink == "delta":
        return str(delta.location(settings, reg.target))
    return f"{settings.catalog.name}.{reg.target}"


def side_table_clause(ref: str) -> str:
    """How the delete memory and dead-letter table of the target `ref` are created."""
    return TABLE_CLAUSES[format_of(ref)]


def ready_tables(spark, name: str, target: SinkTable, deletes_ref: str, dead_letters_ref: str | None,
                 key_types: list[tuple[str, str]], format_version: int) -> None:
    """Table `name`'s tables made ready for its job: the target raised to `format_version`,
    its delete memory (keyed by `key_types`, name and Spark type) and dead-letter table (None:
    none) created if missing, and their metadata files bounded as the target's are."""
    clause = side_table_clause(target.ref)
    if target.raise_format_version(format_version):
        log(f"target raised to Iceberg format version {format_version}", table=name, event="format-raised",
            format_version=format_version)
    spark.sql(deletes_table_sql(deletes_ref, key_types, clause))
    if not open_table(spark, deletes_ref).has_column(MOVED):  # a memory made by an older release
        spark.sql(f"ALTER TABLE {deletes_ref} ADD COLUMN {MOVED} STRING")
    if dead_letters_ref:
        spark.sql(dead_letters.table_sql(dead_letters_ref, clause))
    if target.limit_metadata_files():  # a target made by an older release: its side tables' were all kept too
        for ref in filter(None, (deletes_ref, dead_letters_ref)):
            open_table(spark, ref).limit_metadata_files()


def format_of(ref: str) -> str:
    return "delta" if ref.startswith(DELTA_PREFIX) else "iceberg"


def open_table(spark, ref: str) -> SinkTable:
    """The table `ref` names: an Iceberg table of a catalog or a Delta table's path
    (`delta.<quoted path>`), with fresh metadata."""
    return DeltaTarget(spark, ref) if format_of(ref) == "delta" else IcebergTarget(spark, ref)


def add_missing_columns(spark, ref: str, table, columns, masked: tuple[str, ...] = ()) -> list[str]:
    """The source columns (`columns`, in order) the target lacks, added after its last
    source column, before the `_cdc_` ones (a masked one as the string of its hash);
    returns their names."""
    missing = [c for c in columns if not table.has_column(c.name)]
    present = [c.name for c in columns if table.has_column(c.name)]
    last = present[-1] if present else None
    for c in missing:
        kind = "STRING" if c.name in masked else c.spark_type
        spark.sql(f"ALTER TABLE {ref} ADD COLUMN {q(c.name)} {kind}" + (f" AFTER {q(last)}" if last else " FIRST"))
        last = c.name
    if missing:
        table.refresh()
    return [c.name for c in missing]
