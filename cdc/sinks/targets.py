"""What every target carries, whatever its format: the `_cdc_*` metadata columns and
those of its mode, the properties `cdc register` records on it (how a job decodes its
topic, its owner, mode and protection), and the checks made on them. Each format
(iceberg.py, delta.py) builds on these; formats.py picks a registration's."""
from __future__ import annotations

import json

from cdc.config.models import TableRegistration
from cdc.errors import ConfigError
from cdc.planning.protect import PROP_MASK_KEY, key_fingerprint, protected_columns
from cdc.sources.types import Column

# Metadata columns every target carries, after the source's columns: name, kind (a column
# kind of sources/types.py), comment.
METADATA_COLUMNS = (
    ("_cdc_op", "string", "operation of the last applied change: c, u or r"),
    ("_cdc_position", "string", "source position of the last applied change (see planning/position.py)"),
    ("_cdc_source_ts", "timestamptz", "source commit time of the last applied change"),
    ("_cdc_kafka_partition", "int", "Kafka partition of the last applied change"),
    ("_cdc_kafka_offset", "long", "Kafka offset of the last applied change"),
)

# Columns of the modes other than upsert, after the metadata columns.
MODE_COLUMNS = {
    "upsert": (),
    "soft_delete": (("_cdc_deleted", "boolean", "true once the row is deleted at the source (soft_delete mode)"),),
    "history": (
        ("_cdc_valid_from", "timestamptz", "source commit time from which this version holds (history mode)"),
        ("_cdc_valid_to", "timestamptz", "source commit time of the next change of the key; null: current"),
        ("_cdc_current", "boolean", "true for the key's current version (history mode)"),
    ),
}

# The rows that mirror the source's current rows, per mode (Spark SQL): what reconciliation counts.
LIVE_ROWS = {"upsert": "true", "soft_delete": "NOT _cdc_deleted", "history": "_cdc_current"}

PROP_COLUMNS = "cdc.columns"
PROP_MODE = "cdc.mode"  # the registration's mode, masked and excluded columns, as created
PROP_MASKED = "cdc.masked"
PROP_EXCLUDED = "cdc.excluded"
PROP_KEY = "cdc.key"
PROP_TOPIC = "cdc.topic"
PROP_OWNER = "cdc.registration"  # the registration that created the target: the only one that writes it
PROP_SNAPSHOT = "cdc.source-snapshot"  # how the target's existing rows were captured ("": to capture anew)
PROP_CAPTURE_REMOVED = "cdc.capture-removed"  # when `cdc tables remove` took the table out of capture


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


def target_properties(reg: TableRegistration, columns: tuple[Column, ...], key: tuple[str, ...],
                      topic: str, mask_key: bytes | None = None) -> tuple[tuple[Column, ...], dict[str, str]]:
    """The target's columns (masked and excluded ones applied) and the properties that tell
    a job how to decode its topic."""
    columns = protected_columns(reg, columns, key)
    fingerprint = {PROP_MASK_KEY: key_fingerprint(mask_key)} if mask_key else {}
    return columns, {PROP_COLUMNS: json.dumps([c.to_json() for c in columns]), PROP_KEY: json.dumps(list(key)),
                     PROP_TOPIC: topic, PROP_OWNER: reg.name, **fingerprint}


def table_columns(properties: dict) -> tuple[tuple[Column, ...], tuple[str, ...], str]:
    """Columns, key and topic recorded on a target by `cdc register`."""
    try:
        cols = tuple(Column(**c) for c in json.loads(properties[PROP_COLUMNS]))
        return cols, tuple(json.loads(properties[PROP_KEY])), properties[PROP_TOPIC]
    except KeyError as e:
        raise ConfigError(f"the target table lacks the property {e.args[0]!r} that `cdc register` writes",
                          hint="run `cdc register` for this table") from None
