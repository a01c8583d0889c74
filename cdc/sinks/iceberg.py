"""Iceberg targets: creation from the source's columns, and the properties that tell a
job how to decode the table's topic."""
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
from cdc.planning.protect import PROP_MASK_KEY, check_mask_key, key_fingerprint, protected_columns
from cdc.sources.types import Column

# Metadata columns every target carries, after the source's columns.
METADATA_COLUMNS = (
    ("_cdc_op", StringType(), "operation of the last applied change: c, u or r"),
    ("_cdc_position", StringType(), "source position of the last applied change (see planning/position.py)"),
    ("_cdc_source_ts", TimestamptzType(), "source commit time of the last applied change"),
    ("_cdc_kafka_partition", IntegerType(), "Kafka partition of the last applied change"),
    ("_cdc_kafka_offset", LongType(), "Kafka offset of the last applied change"),
)

# Columns of the modes other than upsert, after the metadata columns.
MODE_COLUMNS = {
    "upsert": (),
    "soft_delete": (("_cdc_deleted", BooleanType(), "true once the row is deleted at the source (soft_delete mode)"),),
    "history": (
        ("_cdc_valid_from", TimestamptzType(), "source commit time from which this version holds (history mode)"),
        ("_cdc_valid_to", TimestamptzType(), "source commit time of the next change of the key; null: current"),
        ("_cdc_current", BooleanType(), "true for the key's current version (history mode)"),
    ),
}

# The rows that mirror the source's current rows, per mode (Spark SQL): what reconciliation counts.
LIVE_ROWS = {"upsert": "true", "soft_delete": "NOT _cdc_deleted", "history": "_cdc_current"}


def live_rows_filter(mode: str):
    """LIVE_ROWS as a pyiceberg row filter."""
    from pyiceberg.expressions import AlwaysTrue, EqualTo

    return {"soft_delete": EqualTo("_cdc_deleted", False), "history": EqualTo("_cdc_current", True)}.get(
        mode, AlwaysTrue())


PROP_COLUMNS = "cdc.columns"
PROP_MODE = "cdc.mode"  # the registration's mode, masked and excluded columns, as created
PROP_MASKED = "cdc.masked"
PROP_EXCLUDED = "cdc.excluded"
PROP_KEY = "cdc.key"
PROP_TOPIC = "cdc.topic"
PROP_OWNER = "cdc.registration"  # the registration that created the target: the only one that writes it
PROP_SNAPSHOT = "cdc.source-snapshot"  # how the target's existing rows were captured ("": to capture anew)
PROP_CAPTURE_REMOVED = "cdc.capture-removed"  # when `cdc tables remove` took the table out of capture

TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.parquet.compression-codec": "zstd",
}


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
    fields += [NestedField(n + i, name, typ, required=False, doc=doc)
               for i, (name, typ, doc) in enumerate(extra, start=1)]
    ids = [f.field_id for f in fields if f.name in key] if mode != "history" else []
    return Schema(*fields, identifier_field_ids=ids)


def protection_properties(reg: TableRegistration) -> dict[str, str]:
    return {PROP_MODE: reg.mode, PROP_MASKED: json.dumps(sorted(reg.mask)),
            PROP_EXCLUDED: json.dumps(sorted(reg.exclude))}


def check_protection(reg: TableRegistration, properties: dict) -> None:
    """The registration's mode, masked and excluded columns must be those the target was
    created with: a target never changes mode, nor holds a column in clear it once masked."""
    recorded = {PROP_MODE: "upsert", PROP_MASKED: "[]", PROP_EXCLUDED: "[]"}
    recorded.update({k: properties[k] for k in recorded if k in properties})
    wanted = protection_properties(reg)
    changed = [f"{k[4:]} {recorded[k]} -> {wanted[k]}" for k in wanted if recorded[k] != wanted[k]]
    if changed:
        raise ConfigError(f"table {reg.name}: its target {reg.target} was created with other settings: "
                          f"{'; '.join(changed)}", table=reg.name,
                          hint="keep the registration as it was, or drop the target (and its __cdc_deletes) "
                               "and run `cdc register` then `cdc bootstrap` to rebuild it")


def check_owner(reg: TableRegistration, properties: dict, topic: str, shown: str) -> None:
    """The target belongs to `reg`: created by it (or, made before owners were recorded,
    for the same topic). Another registration naming it is refused before anything changes."""
    owner, recorded_topic = properties.get(PROP_OWNER), properties.get(PROP_TOPIC)
    if owner == reg.name or (owner is None and recorded_topic == topic):
        return
    whose = (f"belongs to registration {owner}" if owner else
             f"was registered for topic {recorded_topic}" if recorded_topic else "was not created by `cdc register`")
    raise ConfigError(f"table {reg.name}: its target {shown} {whose}; a target has one owner", table=reg.name,
                      hint=f"give {reg.name} a target of its own (`target: <namespace>.<table>` in "
                           f"{reg.file or 'its registration'})")


def partition_spec(schema: Schema, key: tuple[str, ...], buckets: int) -> PartitionSpec:
    if buckets == 0:
        return PartitionSpec()
    source = schema.find_field(key[0])
    return PartitionSpec(PartitionField(source_id=source.field_id, field_id=1000,
                                        transform=BucketTransform(buckets), name=f"{key[0]}_bucket"))


def target_properties(reg: TableRegistration, columns: tuple[Column, ...], key: tuple[str, ...],
                      topic: str, mask_key: bytes | None = None) -> tuple[tuple[Column, ...], dict[str, str]]:
    """The target's columns (masked and excluded ones applied) and the properties that tell
    a job how to decode its topic."""
    columns = protected_columns(reg, columns, key)
    fingerprint = {PROP_MASK_KEY: key_fingerprint(mask_key)} if mask_key else {}
    return columns, {PROP_COLUMNS: json.dumps([c.to_json() for c in columns]), PROP_KEY: json.dumps(list(key)),
                     PROP_TOPIC: topic, PROP_OWNER: reg.name, **fingerprint}


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


def table_columns(properties: dict) -> tuple[tuple[Column, ...], tuple[str, ...], str]:
    """Columns, key and topic recorded on a target by `cdc register`."""
    try:
        cols = tuple(Column(**c) for c in json.loads(properties[PROP_COLUMNS]))
        return cols, tuple(json.loads(properties[PROP_KEY])), properties[PROP_TOPIC]
    except KeyError as e:
        raise ConfigError(f"the target table lacks the property {e.args[0]!r} that `cdc register` writes",
                          hint="run `cdc register` for this table") from None


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
    from cdc.jobs.session import get_session
    from cdc.planning.merge import table_ref
    from cdc.sinks.targets import IcebergTarget

    IcebergTarget(get_session(settings), table_ref(settings.catalog.name, ident)).set_properties(props)
