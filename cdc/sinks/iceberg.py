"""Iceberg targets through pyiceberg: creation from the source's columns (with the
properties of targets.py), and their properties set."""
from __future__ import annotations

import json

from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import (BinaryType, BooleanType, DateType, DecimalType, DoubleType, FloatType, IntegerType,
                             ListType, LongType, NestedField, StringType, TimestampType, TimestamptzType)

from cdc.config.models import Settings, TableRegistration
from cdc.errors import ConfigError
from cdc.planning.merge import table_ref
from cdc.planning.protect import check_mask_key
from cdc.sinks import iceberg_spark
from cdc.sinks.session import get_session
from cdc.sinks.targets import (METADATA_COLUMNS, MODE_COLUMNS, PROP_KEY, PROP_SNAPSHOT, check_owner, check_protection,
                               protection_properties, target_properties)
from cdc.sources.types import Column


def live_rows_filter(mode: str):
    """LIVE_ROWS as a pyiceberg row filter."""
    from pyiceberg.expressions import AlwaysTrue, EqualTo

    return {"soft_delete": EqualTo("_cdc_deleted", False), "history": EqualTo("_cdc_current", True)}.get(
        mode, AlwaysTrue())


TABLE_PROPERTIES = {**iceberg_spark.TABLE_PROPERTIES, "write.parquet.compression-codec": "zstd"}


SIMPLE_TYPES = {
    "int": IntegerType(), "long": LongType(), "float": FloatType(), "double": DoubleType(),
    "boolean": BooleanType(), "string": StringType(), "date": DateType(),
    "timestamp_ms": TimestampType(), "timestamp_us": TimestampType(), "timestamptz": TimestamptzType(),
    "binary": BinaryType(), "time_us": StringType(), "time_ms": StringType(), "timetz": StringType(),
    "interval": StringType(), "duration_us": StringType(), "bits": BinaryType(),
}


def iceberg_type(col: Column, next_id=None):
    """The Iceberg type of a column; `next_id` numbers the element field of a list."""
    if col.kind == "array":
        return ListType(element_id=next_id(), element_type=SIMPLE_TYPES[col.element], element_required=False)
    if col.kind == "decimal":
        return DecimalType(col.precision, col.scale)
    return SIMPLE_TYPES[col.kind]


def build_schema(columns: tuple[Column, ...], key: tuple[str, ...], mode: str = "upsert",
                 masked: tuple[str, ...] = ()) -> Schema:
    """The target's schema: the source's columns (a masked one as the string of its hash),
    the `_cdc_*` metadata columns and those of the mode. The key is the identifier, but in
    history mode, where a key has many versions."""
    extra = METADATA_COLUMNS + MODE_COLUMNS[mode]
    ids = iter(range(len(columns) + len(extra) + 1, 1 << 30))  # list elements after the fields
    fields = [NestedField(i, c.name, StringType() if c.name in masked else iceberg_type(c, lambda: next(ids)),
                          required=not c.nullable)
              for i, c in enumerate(columns, start=1)]
    n = len(fields)
    fields += [NestedField(n + i, name, SIMPLE_TYPES[kind], required=False, doc=doc)
               for i, (name, kind, doc) in enumerate(extra, start=1)]
    ids = [f.field_id for f in fields if f.name in key] if mode != "history" else []
    return Schema(*fields, identifier_field_ids=ids)


def partition_spec(schema: Schema, key: tuple[str, ...], buckets: int) -> PartitionSpec:
    if buckets == 0:
        return PartitionSpec()
    source = schema.find_field(key[0])
    return PartitionSpec(PartitionField(source_id=source.field_id, field_id=1000,
                                        transform=BucketTransform(buckets), name=f"{key[0]}_bucket"))


def ensure_table(catalog, reg: TableRegistration, columns: tuple[Column, ...], key: tuple[str, ...],
                 topic: str, dry_run: bool = False, settings: Settings | None = None,
                 mask_key: bytes | None = None) -> bool:
    """Create the target if it is missing (at format version 2, which pyiceberg writes; its
    job raises it, see CatalogSettings.format_version). True when created (with `dry_run`:
    when it would be, and nothing changes). An existing target must have been registered
    with the same key; its properties are brought up to date (`settings` opens Spark for a
    target at format version 3)."""
    try:
        table = catalog.load_table(reg.target)
    except NoSuchTableError:
        table = None
    columns, props = target_properties(reg, columns, key, topic, mask_key)
    if table is not None:
        check_owner(reg, table.properties, topic, f"{catalog.name}.{reg.target}")
        check_mask_key(reg, table.properties, mask_key)
        existing = json.loads(table.properties.get(PROP_KEY, "null"))
        if existing != list(key):
            raise ConfigError(f"target {reg.target} exists with key {existing}, but {reg.name} now has key {list(key)}",
                              hint="drop the target table and register again, or keep the original key")
        check_protection(reg, table.properties)
        if any(table.properties.get(k) != v for k, v in props.items()) and not dry_run:
            set_properties(table, reg.target, props, settings)
        return False
    if dry_run:
        return True
    ensure_namespace(catalog, reg.namespace)
    schema = build_schema(columns, key, reg.mode, reg.mask)
    catalog.create_table(reg.target, schema=schema,
                         partition_spec=partition_spec(schema, key, reg.partitioning.buckets),
                         properties={**TABLE_PROPERTIES, **props, **protection_properties(reg)})
    return True


def ensure_namespace(catalog, namespace: str) -> None:
    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        pass


def snapshot_pending(catalog, tables: list[TableRegistration]) -> list[TableRegistration]:
    """Registered tables with a target whose source rows Debezium has not snapshotted yet."""
    pending = []
    for t in tables:
        try:
            if not catalog.load_table(t.target).properties.get(PROP_SNAPSHOT):
                pending.append(t)
        except NoSuchTableError:
            continue  # not registered yet: its snapshot comes when it is
    return pending


def mark_snapshotted(catalog, reg: TableRegistration, how: str, settings: Settings | None = None) -> None:
    set_properties(catalog.load_table(reg.target), reg.target, {PROP_SNAPSHOT: how}, settings)


def set_properties(table, ident: str, props: dict[str, str], settings: Settings | None) -> None:
    """Set properties of a pyiceberg `table`. pyiceberg cannot write format version 3
    metadata, so a v3 table's are set through Spark's Iceberg (the Java API)."""
    if table.metadata.format_version < 3:
        with table.transaction() as tx:
            tx.set_properties(props)
        return
    if settings is None:
        raise ConfigError(f"target {ident} is at Iceberg format version 3: its properties are set through Spark")
    table = iceberg_spark.load_table(get_session(settings), table_ref(settings.catalog.name, ident))
    iceberg_spark.set_properties(table, props)
