"""Columns that never reach the lake in clear. An excluded column is left out by the
connector (`column.exclude.list`) and has no target column; a masked one is stored as
HMAC-SHA256(key, its target value as Spark's text), in hex, hashed by the connector
(MaskColumns, debezium/transforms) so Kafka never holds it in clear; what the connector did not
hash (an array, a change from before the transformation) is hashed by Spark expressions
before any write."""
from __future__ import annotations

import hashlib
import hmac

from cdc.config.clients import read_secret
from cdc.config.models import Settings, TableRegistration
from cdc.errors import ConfigError
from cdc.sources.types import Column

BLOCK = 64  # SHA-256's block size, in bytes (RFC 2104)
# The columns the connector hashed already (cdc's MaskColumns transformation), as a header;
# decoded changes keep it as MASKED_UPSTREAM for `mask_columns`, which hashes the others.
MASKED_HEADER, MASKED_UPSTREAM = "cdc.masked", "_masked_upstream"


def hmac_sql(value_sql: str, key: bytes) -> str:
    """Spark SQL for the hex HMAC-SHA256 of `value_sql` as UTF-8 text (null stays null):
    H((K ^ opad) || H((K ^ ipad) || m)) from `sha2`, so the row path stays in the JVM."""
    if len(key) > BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(BLOCK, b"\0")
    inner, outer = bytes(b ^ 0x36 for b in key).hex(), bytes(b ^ 0x5C for b in key).hex()
    message = f"CAST(CAST({value_sql} AS STRING) AS BINARY)"
    return f"sha2(concat(X'{outer}', unhex(sha2(concat(X'{inner}', {message}), 256))), 256)"


def mask_columns(df, masked: tuple[str, ...], key: bytes | None):
    """`df` (a Spark DataFrame) with each masked column replaced by its hash, except where
    the connector hashed it already: decoded changes carry MaskColumns' header as
    MASKED_UPSTREAM ("<key fingerprint>:<column>,<column>"), dropped here. A change the
    connector hashed with another key than `key` is bad (`mask-key-mismatch`)."""
    from pyspark.sql import functions as F

    from cdc.planning.sql import q
    upstream = MASKED_UPSTREAM in df.columns
    if masked:
        hashed = {c: F.expr(hmac_sql(q(c), key)) for c in masked}
        if upstream:
            header = F.col(MASKED_UPSTREAM)
            hashed = {c: F.when(hashed_upstream(c), F.col(c).cast("string")).otherwise(h) for c, h in hashed.items()}
            expected = key_fingerprint(key)
            other = header.isNotNull() & (F.substring_index(header, ":", 1) != F.lit(expected)) \
                & F.col("_error").isNull()
            df = df.withColumns({
                "_error": F.when(other, F.concat(
                    F.lit("the connector hashed this change's masked columns with another masking key (fingerprint "),
                    F.substring_index(header, ":", 1), F.lit(f") than the target's ({expected}): give the Connect "
                                                             f"workers cdc's masking key"))).otherwise(F.col("_error")),
                "_error_class": F.when(other, F.lit("mask-key-mismatch")).otherwise(F.col("_error_class"))})
        df = df.withColumns(hashed)
    return df.drop(MASKED_UPSTREAM) if upstream else df


WITHHELD = ("; its raw value is withheld here, as it holds masked column(s) in clear (Kafka keeps the record at "
            "this offset)")


def dead_letter_value(masked: tuple[str, ...], headers: bool):
    """Spark, over a batch's raw records: (the raw value a bad record's dead letter keeps,
    whether it is kept). With masked columns, a value is kept only where the connector
    hashed every one of them (its header names them all): any other holds a clear value,
    which the dead letters must not (the record stays in Kafka, at its offset)."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not masked:
        return F.col("value"), F.lit(True)
    if not headers:
        return F.lit(None).cast("binary"), F.lit(False)
    found = F.filter("headers", lambda h: h["key"] == F.lit(MASKED_HEADER))
    listed = F.split(F.substring_index(F.try_element_at(found, F.lit(1)).getField("value").cast("string"), ":", -1),
                     ",")
    kept = reduce(lambda a, b: a & b, [F.coalesce(F.array_contains(listed, c), F.lit(False)) for c in masked])
    return F.when(kept, F.col("value")), kept


def hashed_upstream(column: str):
    """Spark: true where the connector hashed `column` of a decoded change (MASKED_UPSTREAM)."""
    from pyspark.sql import functions as F

    done = F.split(F.substring_index(F.col(MASKED_UPSTREAM), ":", -1), ",")
    return F.coalesce(F.array_contains(done, column), F.lit(False))


def mask_value(value: str, key: bytes) -> str:
    """The same hash in Python: what a masked column holds for `value` (its text form)."""
    return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()


PROP_MASK_KEY = "cdc.mask-key-fingerprint"  # which key a target's hashes were made with (never the key)


def key_fingerprint(key: bytes) -> str:
    """A fingerprint of a masking key: an HMAC of a fixed text, which does not reveal the key."""
    return hmac.new(key, b"cdc masking key fingerprint", hashlib.sha256).hexdigest()[:16]


def target_mask_key(settings: Settings, reg: TableRegistration, properties: dict) -> bytes | None:
    """The masking key, checked against the one the target's hashes were made with."""
    key = mask_key(settings, reg)
    check_mask_key(reg, properties, key)
    return key


def check_mask_key(reg: TableRegistration, properties: dict, key: bytes | None) -> None:
    """Another key than the target's would leave it with hashes of two keys (the same value
    no longer joins): refused."""
    recorded = properties.get(PROP_MASK_KEY)
    if key is not None and recorded is not None and recorded != key_fingerprint(key):
        raise ConfigError(f"table {reg.name}: the masking key is not the one its target's hashes were made with "
                          f"(fingerprint {key_fingerprint(key)}, the target's {recorded})", table=reg.name,
                          hint="use the original key (masking.key or masking.key_file); to rotate it, rebuild the "
                               "target: drop it (and its __cdc_deletes), then `cdc register` and `cdc bootstrap` "
                               "with the new key (docs/registrations.md: protected columns)")


def mask_key(settings: Settings, reg: TableRegistration) -> bytes | None:
    """The masking key of a table with masked columns (None when it has none)."""
    if not reg.mask:
        return None
    key = read_secret(settings, settings.masking.key or None, settings.masking.key_file, "masking.key")
    if key:
        return key.encode()
    raise ConfigError(f"table {reg.name} masks {', '.join(reg.mask)}, but cdc.yaml has no masking key",
                      hint="set masking.key: ${CDC_MASK_KEY} (from the environment) or masking.key_file: PATH",
                      table=reg.name)


def check_connector_masks(settings: Settings, reg: TableRegistration, columns: tuple[Column, ...]) -> None:
    """The connector hashes every masked column but arrays: a masked array would reach
    Kafka in clear, so it is refused where the connector masks."""
    arrays = sorted(c.name for c in columns if c.name in reg.mask and c.kind == "array")
    if arrays and settings.masking.in_connector:
        raise ConfigError(f"table {reg.name}: masked array column(s) {', '.join(arrays)} would reach Kafka in clear "
                          f"(the connector hashes columns of other types only)", table=reg.name,
                          hint=f"exclude them instead ({reg.file or 'the registration'}), or set "
                               f"masking.in_connector: false to hash every masked column in the jobs alone")


def protected_columns(reg: TableRegistration, columns: tuple[Column, ...],
                      key: tuple[str, ...]) -> tuple[Column, ...]:
    """The source columns that reach the target: all but the excluded ones. Every excluded or
    masked column must exist, and none may be a key column."""
    names = {c.name for c in columns}
    unknown = sorted((set(reg.exclude) | set(reg.mask)) - names)
    if unknown:
        raise ConfigError(f"table {reg.name}: exclude/mask name column(s) {', '.join(unknown)} that the source "
                          f"table does not have (it has {', '.join(sorted(names))})",
                          hint=f"fix {reg.file or 'the registration'}", table=reg.name)
    keyed = sorted(set(key) & (set(reg.exclude) | set(reg.mask)))
    if keyed:
        raise ConfigError(f"table {reg.name}: key column(s) {', '.join(keyed)} cannot be excluded or masked",
                          hint="the target needs the key in clear; mask another column or choose another key",
                          table=reg.name)
    return tuple(c for c in columns if c.name not in reg.exclude)
