"""Column kinds: how a source column travels through Debezium's JSON converter and what
it becomes in Iceberg. One table drives registration, decoding and docs/types.md."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from cdc.errors import ConfigError

METADATA_PREFIX = "_cdc_"

# Debezium's stand-in for an unchanged TOASTed value it did not receive (PostgreSQL sends
# none for updates under REPLICA IDENTITY DEFAULT); bytes arrive base64-encoded.
UNAVAILABLE = "__debezium_unavailable_value"
UNAVAILABLE_BASE64 = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="
TOASTABLE_KINDS = {"string": UNAVAILABLE, "binary": UNAVAILABLE_BASE64}

# kind -> (Spark SQL type of the target, Spark SQL type on the wire, conversion of `{x}`)
KINDS: dict[str, tuple[str, str, str]] = {
    "int": ("INT", "INT", "{x}"),
    "long": ("BIGINT", "BIGINT", "{x}"),
    "decimal": ("DECIMAL({p},{s})", "DECIMAL({p},{s})", "{x}"),
    "float": ("FLOAT", "FLOAT", "{x}"),
    "double": ("DOUBLE", "DOUBLE", "{x}"),
    "boolean": ("BOOLEAN", "BOOLEAN", "{x}"),
    "string": ("STRING", "STRING", "{x}"),
    "date": ("DATE", "INT", "date_from_unix_date({x})"),
    # Debezium sends timestamps without zone as epoch millis (precision <= 3) or micros;
    # the session runs in UTC, so the NTZ cast keeps the wall-clock value.
    "timestamp_ms": ("TIMESTAMP_NTZ", "BIGINT", "CAST(timestamp_millis({x}) AS TIMESTAMP_NTZ)"),
    "timestamp_us": ("TIMESTAMP_NTZ", "BIGINT", "CAST(timestamp_micros({x}) AS TIMESTAMP_NTZ)"),
    # ZonedTimestamp: ISO-8601 text in UTC, e.g. 2024-05-01T10:00:00.123456Z
    "timestamptz": ("TIMESTAMP", "STRING", "CAST({x} AS TIMESTAMP)"),
    "binary": ("BINARY", "STRING", "unbase64({x})"),
}

_PG_SIMPLE = {
    "smallint": "int", "integer": "int", "bigint": "long",
    "real": "float", "double precision": "double", "boolean": "boolean",
    "text": "string", "character varying": "string", "character": "string",
    "uuid": "string", "json": "string", "jsonb": "string",
    "date": "date", "timestamp with time zone": "timestamptz", "bytea": "binary",
}


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    source_type: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"column {self.name!r}: unknown column kind {self.kind!r}")
        if self.kind == "decimal" and not (isinstance(self.precision, int) and isinstance(self.scale, int)
                                           and 0 < self.precision <= 38 and 0 <= self.scale <= self.precision):
            raise ConfigError(f"column {self.name!r}: decimal needs 0 < precision <= 38 and 0 <= scale <= precision, "
                              f"got ({self.precision!r}, {self.scale!r})")

    def _fmt(self, template: str) -> str:
        return template.format(p=self.precision, s=self.scale, x="{x}")

    @property
    def spark_type(self) -> str:
        return self._fmt(KINDS[self.kind][0])

    @property
    def wire_type(self) -> str:
        return self._fmt(KINDS[self.kind][1])

    def convert(self, expr: str) -> str:
        """Spark SQL turning the wire value `expr` into the target value."""
        return KINDS[self.kind][2].format(x=expr)

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def toastable(columns: tuple["Column", ...], key: tuple[str, ...]) -> tuple["Column", ...]:
    """Non-key columns whose value may arrive as the unavailable-value placeholder."""
    return tuple(c for c in columns if c.kind in TOASTABLE_KINDS and c.name not in key)


def postgres_column(name: str, data_type: str, nullable: bool, numeric_precision: int | None,
                    numeric_scale: int | None, datetime_precision: int | None, table: str) -> Column:
    """The kind of one PostgreSQL column (information_schema terms), or a ConfigError."""
    if name.startswith(METADATA_PREFIX):
        raise ConfigError(f"{table}: column {name!r} uses the prefix {METADATA_PREFIX!r} reserved for cdc's "
                          f"metadata columns", hint="rename the column or leave the table unregistered")
    if data_type in _PG_SIMPLE:
        return Column(name, _PG_SIMPLE[data_type], nullable, source_type=data_type)
    if data_type == "numeric" and numeric_precision is not None and numeric_precision <= 38:
        return Column(name, "decimal", nullable, numeric_precision, numeric_scale or 0, source_type=data_type)
    if data_type == "timestamp without time zone":
        kind = "timestamp_ms" if (datetime_precision is not None and datetime_precision <= 3) else "timestamp_us"
        return Column(name, kind, nullable, source_type=data_type)
    raise ConfigError(f"{table}: column {name!r} has type {data_type!r}"
                      + (f"({numeric_precision},{numeric_scale})" if data_type == "numeric" else "")
                      + ", which cdc does not replicate",
                      hint="see docs/types.md for the supported types; exclude the table or change the column")
