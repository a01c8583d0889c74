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
# Arrays: Debezium's stand-in by element type. uuid[]: the name-based UUID of the placeholder
# (Java's UUID.nameUUIDFromBytes); int4[] and int8[]: the placeholder's character codes.
# int2[], float4[], float8[] and bool[] arrive as null, which is not told from a real null:
# `ambiguous_arrays` names them, and REPLICA IDENTITY FULL makes Debezium send their value.
UNAVAILABLE_UUID = "b68a35a7-17ad-35b3-af2a-ae46edb4545a"
_CODES = ", ".join(str(ord(ch)) for ch in UNAVAILABLE)
ARRAY_PLACEHOLDERS = {"_uuid": f"array('{UNAVAILABLE_UUID}')", "_int4": f"array({_CODES})",
                      "_int8": "array(" + ", ".join(f"{ord(ch)}L" for ch in UNAVAILABLE) + ")"}

# ±infinity (documented in docs/types.md): the largest and smallest values the target keeps.
MAX_TS, MIN_TS = "9999-12-31 23:59:59.999999", "0001-01-01 00:00:00"
# What Debezium sends for PostgreSQL's infinite timestamps (epoch µs; ms is /1000) and dates.
INF_US, NEG_INF_US = 9223372036825200000, -9223372036832400000
INF_DATE, NEG_INF_DATE = -2147472692, -2147472691


def parse_lsn(value) -> int:
    """An LSN from a Debezium source block: an integer, a decimal string, or `X/Y` text."""
    if value is None or value == "":
        return 0
    if isinstance(value, int):
        return value
    text = str(value)
    if "/" in text:
        hi, lo = text.split("/", 1)
        return (int(hi, 16) << 32) | int(lo, 16)
    return int(text)


def _timestamp(unit: int) -> str:
    inf, neg = INF_US // unit, NEG_INF_US // unit
    fn = "timestamp_micros" if unit == 1 else "timestamp_millis"
    return (f"CASE WHEN {{x}} >= {inf} THEN TIMESTAMP_NTZ'{MAX_TS}' WHEN {{x}} <= {neg} THEN TIMESTAMP_NTZ'{MIN_TS}' "
            f"ELSE CAST({fn}({{x}}) AS TIMESTAMP_NTZ) END")


# kind -> (Spark SQL type of the target, Spark SQL type on the wire, conversion of `{x}`)
KINDS: dict[str, tuple[str, str, str]] = {
    "int": ("INT", "INT", "{x}"),
    "long": ("BIGINT", "BIGINT", "{x}"),
    # decimal.handling.mode=string: exact text, NaN and infinities included (they do not fit).
    "decimal": ("DECIMAL({p},{s})", "STRING", "try_cast({x} AS DECIMAL({p},{s}))"),
    "float": ("FLOAT", "FLOAT", "{x}"),
    "double": ("DOUBLE", "DOUBLE", "{x}"),
    "boolean": ("BOOLEAN", "BOOLEAN", "{x}"),
    "string": ("STRING", "STRING", "{x}"),
    "date": ("DATE", "INT", f"CASE WHEN {{x}} = {INF_DATE} THEN DATE'9999-12-31' WHEN {{x}} = {NEG_INF_DATE} "
                            f"THEN DATE'0001-01-01' ELSE date_from_unix_date({{x}}) END"),
    # Debezium sends timestamps without zone as epoch millis (precision <= 3) or micros;
    # the session runs in UTC, so the NTZ cast keeps the wall-clock value.
    "timestamp_ms": ("TIMESTAMP_NTZ", "BIGINT", _timestamp(1000)),
    "timestamp_us": ("TIMESTAMP_NTZ", "BIGINT", _timestamp(1)),
    # ZonedTimestamp: ISO-8601 text in UTC, e.g. 2024-05-01T10:00:00.123456Z, or ±infinity
    "timestamptz": ("TIMESTAMP", "STRING", f"CASE WHEN {{x}} = 'infinity' THEN TIMESTAMP'{MAX_TS}Z' "
                                           f"WHEN {{x}} = '-infinity' THEN TIMESTAMP'{MIN_TS}Z' "
                                           f"ELSE try_cast({{x}} AS TIMESTAMP) END"),
    "binary": ("BINARY", "STRING", "try_to_binary({x}, 'base64')"),
    # time of day as text HH:MM:SS.ffffff (Spark has no time type); Debezium sends µs or ms
    "time_us": ("STRING", "BIGINT", "date_format(timestamp_micros({x}), 'HH:mm:ss.SSSSSS')"),
    "time_ms": ("STRING", "BIGINT", "date_format(timestamp_millis({x}), 'HH:mm:ss.SSSSSS')"),
    # ZonedTime: text in UTC, e.g. 11:45:56.5Z; kept as HH:MM:SS.ffffffZ
    "timetz": ("STRING", "STRING", "concat(date_format(try_to_timestamp(concat('1970-01-01 ', TRIM(TRAILING 'Z' FROM {x}))), "
                                   "'HH:mm:ss.SSSSSS'), 'Z')"),
    # interval.handling.mode=string: ISO-8601 duration text, e.g. P1Y2M3DT4H5M6.789S (exact)
    "interval": ("STRING", "STRING", "{x}"),
    "array": ("ARRAY<{e}>", "ARRAY<{e}>", "{x}"),
    # MariaDB TIME is a signed duration up to 838:59:59: text [-]HH:MM:SS.ffffff, hours
    # unbounded (the same text as time_us within a day)
    "duration_us": ("STRING", "BIGINT", "concat(CASE WHEN {x} < 0 THEN '-' WHEN {x} >= 0 THEN '' END, "
                                        "format_string('%02d:%02d:%02d.%06d', abs({x}) DIV 3600000000, "
                                        "abs({x}) DIV 60000000 % 60, abs({x}) DIV 1000000 % 60, abs({x}) % 1000000))"),
    # MariaDB BIT(n > 1): Debezium sends the bytes least significant first; the target
    # keeps them as the server shows them, most significant first.
    "bits": ("BINARY", "STRING", "unhex(array_join(reverse(regexp_extract_all(hex(try_to_binary({x}, 'base64')), "
                                 "'(..)', 1)), ''))"),
}
# Element kinds of arrays (their Spark type is the same on the wire and in the target).
ARRAY_ELEMENTS = {"int": "INT", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE", "boolean": "BOOLEAN",
                  "string": "STRING"}
# Conversions that yield null for a value they cannot hold: such a value does not fit.
MAY_NOT_FIT = ("decimal", "timetz", "timestamptz", "binary", "bits")

_PG_SIMPLE = {
    "smallint": "int", "integer": "int", "bigint": "long",
    "real": "float", "double precision": "double", "boolean": "boolean",
    "text": "string", "character varying": "string", "character": "string",
    "uuid": "string", "json": "string", "jsonb": "string", "inet": "string", "cidr": "string",
    "macaddr": "string", "macaddr8": "string",
    "date": "date", "timestamp with time zone": "timestamptz", "bytea": "binary",
    "time with time zone": "timetz", "interval": "interval",
}
_PG_ARRAY_ELEMENTS = {"_int2": "int", "_int4": "int", "_int8": "long", "_float4": "float", "_float8": "double",
                      "_bool": "boolean", "_text": "string", "_varchar": "string", "_bpchar": "string",
                      "_uuid": "string"}
UNCONSTRAINED_NUMERIC = (38, 18)  # the target type of a numeric without precision
MONEY = (19, 2)


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    source_type: str = ""
    element: str | None = None  # arrays: the element kind

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"column {self.name!r}: unknown column kind {self.kind!r}")
        if (self.kind == "array") != (self.element in ARRAY_ELEMENTS):
            raise ConfigError(f"column {self.name!r}: an array needs an element kind of "
                              f"{', '.join(ARRAY_ELEMENTS)}, got {self.element!r}")
        if self.kind == "decimal" and not (isinstance(self.precision, int) and isinstance(self.scale, int)
                                           and 0 < self.precision <= 38 and 0 <= self.scale <= self.precision):
            raise ConfigError(f"column {self.name!r}: decimal needs 0 < precision <= 38 and 0 <= scale <= precision, "
                              f"got ({self.precision!r}, {self.scale!r})")

    def _fmt(self, template: str) -> str:
        return template.format(p=self.precision, s=self.scale, x="{x}", e=ARRAY_ELEMENTS.get(self.element))

    @property
    def spark_type(self) -> str:
        return self._fmt(KINDS[self.kind][0])

    @property
    def wire_type(self) -> str:
        return self._fmt(KINDS[self.kind][1])

    def convert(self, expr: str) -> str:
        """Spark SQL turning the wire value `expr` into the target value."""
        return self._fmt(KINDS[self.kind][2]).format(x=expr)

    def does_not_fit(self, wire: str) -> str | None:
        """Spark SQL, true when the wire value `wire` has no exact target value (NaN or an
        overflowing or too precise number for a decimal): None when every value fits."""
        if self.kind not in MAY_NOT_FIT:
            return None
        lost = f"({wire} IS NOT NULL AND ({self.convert(wire)}) IS NULL)"
        if self.kind == "decimal":  # digits after the scale would be rounded away
            lost += f" OR length(regexp_extract({wire}, '\\\\.([0-9]*?)0*$', 1)) > {self.scale}"
        return lost

    def jdbc_select(self, ident: str) -> str:
        """PostgreSQL SQL reading this column (quoted `ident`) in its Debezium wire form, so a
        JDBC bootstrap converts it exactly as streaming does."""
        x = ident
        if self.kind == "decimal":
            return f"{x}::numeric::text"
        if self.kind == "date":
            return (f"CASE WHEN {x} = 'infinity' THEN {INF_DATE} WHEN {x} = '-infinity' THEN {NEG_INF_DATE} "
                    f"ELSE {x} - DATE '1970-01-01' END")
        if self.kind in ("timestamp_us", "timestamp_ms"):
            unit = 1 if self.kind == "timestamp_us" else 1000
            return (f"CASE WHEN {x} = 'infinity' THEN {INF_US // unit} WHEN {x} = '-infinity' THEN {NEG_INF_US // unit} "
                    f"ELSE floor(EXTRACT(EPOCH FROM {x}) * {1_000_000 // unit})::bigint END")
        if self.kind == "timestamptz":
            return (f"CASE WHEN isfinite({x}) THEN to_char({x} AT TIME ZONE 'UTC', "
                    f"'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') ELSE {x}::text END")
        if self.kind == "binary":
            return f"translate(encode({x}, 'base64'), E'\\n', '')"
        if self.kind in ("time_us", "time_ms"):
            unit = 1 if self.kind == "time_us" else 1000
            return f"floor(EXTRACT(EPOCH FROM {x}) * {1_000_000 // unit})::bigint"
        if self.kind == "timetz":
            return f"to_char(DATE '1970-01-01' + ({x} AT TIME ZONE 'UTC')::time, 'HH24:MI:SS.US') || 'Z'"
        if self.kind == "interval":
            return (f"CASE WHEN {x} IS NOT NULL THEN format('P%sY%sM%sDT%sH%sM%sS', EXTRACT(YEAR FROM {x})::int, EXTRACT(MONTH FROM {x})::int, "
                    f"EXTRACT(DAY FROM {x})::int, EXTRACT(HOUR FROM {x})::int, EXTRACT(MINUTE FROM {x})::int, "
                    f"trim_scale(EXTRACT(SECOND FROM {x}))) END")
        if self.kind == "string" and self.source_type != "character":
            return f"CASE WHEN {x} IS NOT NULL THEN format('%s', {x}) END"  # uuid, json, inet, enums: their output text, as Debezium sends it
        return x

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def placeholder_sql(column: "Column") -> str | None:
    """Spark SQL for the wire value Debezium sends in place of an unchanged TOASTed value of
    `column`, or None when the column has none."""
    if column.kind in TOASTABLE_KINDS:
        return f"'{TOASTABLE_KINDS[column.kind]}'"
    if column.kind == "array" and column.element == "string":
        return ARRAY_PLACEHOLDERS.get(column.source_type, f"array('{UNAVAILABLE}')")
    if column.kind == "array":
        return ARRAY_PLACEHOLDERS.get(column.source_type)
    return None


def toastable(columns: tuple["Column", ...], key: tuple[str, ...]) -> tuple["Column", ...]:
    """Non-key columns whose value may arrive as the unavailable-value placeholder."""
    return tuple(c for c in columns if placeholder_sql(c) is not None and c.name not in key)


def ambiguous_arrays(columns: tuple["Column", ...]) -> tuple["Column", ...]:
    """PostgreSQL array columns whose unchanged TOASTed value Debezium sends as null under
    REPLICA IDENTITY DEFAULT, like a real null."""
    return tuple(c for c in columns if c.kind == "array" and c.source_type.startswith("_")
                 and placeholder_sql(c) is None)


DELTA_REFUSED = set(" ,;{}()\n\t=")  # characters Delta Lake refuses in a column name (no column mapping)


def case_twins(names: list[str]) -> list[list[str]]:
    """Groups of names that differ only by case."""
    by_case: dict[str, list[str]] = {}
    for n in dict.fromkeys(names):
        by_case.setdefault(n.lower(), []).append(n)
    return [group for group in by_case.values() if len(group) > 1]


def reserved_names(names: list[str]) -> list[str]:
    """Names with the prefix of cdc's metadata columns, in any case."""
    return [n for n in names if n.lower().startswith(METADATA_PREFIX)]


def check_columns(columns: tuple[Column, ...], table: str, sink: str, exclude: tuple[str, ...] = (),
                  where: str = "its registration") -> None:
    """What Debezium, Spark or the sink would refuse of a source table's column names,
    found before anything is created: the reserved prefix (in any case), names that differ
    only by case (Debezium refuses the table; Spark resolves names without case), and for
    Delta, characters it refuses in a name. `exclude`d columns never reach the target."""
    names = [c.name for c in columns]
    twins = case_twins(names)
    if twins:
        raise ConfigError(f"{table}: columns that differ only by case: "
                          + "; ".join(", ".join(repr(n) for n in g) for g in twins),
                          hint="rename one of each at the source: Debezium refuses such a table (its task fails "
                               "for every table of the source) and Spark cannot tell them apart")
    kept = [n for n in names if n not in exclude]
    reserved = reserved_names(kept)
    if reserved:
        raise ConfigError(f"{table}: column(s) {', '.join(repr(n) for n in reserved)} use the prefix "
                          f"{METADATA_PREFIX!r} (in any case) reserved for cdc's metadata columns",
                          hint=f"rename them at the source, or leave them out of the target with `exclude:` in "
                               f"{where}")
    refused = [n for n in kept if sink == "delta" and DELTA_REFUSED & set(n)]
    if refused:
        raise ConfigError(f"{table}: column(s) {', '.join(repr(n) for n in refused)} hold characters a Delta "
                          f"table refuses in a name (space , ; {{ }} ( ) newline tab =)",
                          hint=f"rename them at the source, leave them out with `exclude:` in {where}, or use "
                               f"the iceberg sink")


def postgres_column(name: str, data_type: str, nullable: bool, numeric_precision: int | None,
                    numeric_scale: int | None, datetime_precision: int | None, table: str,
                    udt_name: str = "", type_kind: str = "") -> Column:
    """The kind of one PostgreSQL column (information_schema terms, plus pg_type's udt name
    and typtype), or a ConfigError."""
    if data_type in _PG_SIMPLE:
        return Column(name, _PG_SIMPLE[data_type], nullable, source_type=data_type)
    if data_type == "numeric" and numeric_precision is None:
        p, s = UNCONSTRAINED_NUMERIC
        return Column(name, "decimal", nullable, p, s, source_type=data_type)
    if data_type == "numeric" and numeric_precision <= 38:
        return Column(name, "decimal", nullable, numeric_precision, numeric_scale or 0, source_type=data_type)
    if data_type == "money":
        return Column(name, "decimal", nullable, *MONEY, source_type=data_type)
    if data_type == "timestamp without time zone":
        kind = "timestamp_ms" if (datetime_precision is not None and datetime_precision <= 3) else "timestamp_us"
        return Column(name, kind, nullable, source_type=data_type)
    if data_type == "time without time zone":
        kind = "time_ms" if (datetime_precision is not None and datetime_precision <= 3) else "time_us"
        return Column(name, kind, nullable, source_type=data_type)
    if data_type == "ARRAY" and udt_name in _PG_ARRAY_ELEMENTS:
        return Column(name, "array", nullable, source_type=udt_name, element=_PG_ARRAY_ELEMENTS[udt_name])
    if data_type == "USER-DEFINED" and type_kind == "e":  # an enum: its label
        return Column(name, "string", nullable, source_type=f"enum {udt_name}")
    shown = {"numeric": f"numeric({numeric_precision},{numeric_scale})", "ARRAY": f"array {udt_name}",
             "USER-DEFINED": f"user-defined {udt_name}"}.get(data_type, data_type)
    raise ConfigError(f"{table}: column {name!r} has type {shown!r}, which cdc does not replicate",
                      hint="see docs/types.md for the supported types; exclude the table or change the column")


# Debezium's `column.propagate.source.type` names PostgreSQL types in upper case.
_DEBEZIUM_TYPES = {
    "INT2": "smallint", "INT4": "integer", "INT8": "bigint", "FLOAT4": "real", "FLOAT8": "double precision",
    "BOOL": "boolean", "TEXT": "text", "VARCHAR": "character varying", "BPCHAR": "character", "UUID": "uuid",
    "JSON": "json", "JSONB": "jsonb", "BYTEA": "bytea", "INET": "inet", "CIDR": "cidr", "MACADDR": "macaddr",
    "MACADDR8": "macaddr8", "DATE": "date", "TIMESTAMP": "timestamp without time zone",
    "TIMESTAMPTZ": "timestamp with time zone", "TIME": "time without time zone",
    "TIMETZ": "time with time zone", "INTERVAL": "interval", "MONEY": "money", "NUMERIC": "numeric",
}
# Without the source type, Debezium's logical and Connect types tell the kind.
_CONNECT_KINDS = {
    "io.debezium.time.MicroTimestamp": "timestamp_us", "io.debezium.time.Timestamp": "timestamp_ms",
    "io.debezium.time.ZonedTimestamp": "timestamptz", "io.debezium.time.Date": "date",
    "io.debezium.time.MicroTime": "time_us", "io.debezium.time.Time": "time_ms",
    "io.debezium.time.ZonedTime": "timetz", "io.debezium.time.Interval": "interval",
    "io.debezium.data.Enum": "string", "int16": "int", "int32": "int", "int64": "long", "float32": "float",
    "float64": "double", "boolean": "boolean", "string": "string", "bytes": "binary",
}
UNCONSTRAINED_LENGTH = 131089  # what PostgreSQL reports as the length of a numeric without precision


def debezium_column(name: str, connect_type: str, logical_name: str | None, params: dict | None,
                    table: str, source_kind: str = "postgresql") -> Column:
    """The kind of a column as a change event's schema describes it (a column the target
    does not know yet), always nullable in the target. A ConfigError when unsupported."""
    params = params or {}
    source = params.get("__debezium.source.column.type")
    if source is not None and source_kind == "mariadb":
        return _mariadb_debezium_column(name, source, params, table)
    if source is None:
        kind = _CONNECT_KINDS.get(logical_name or "") or _CONNECT_KINDS.get(connect_type)
        if kind is None:
            raise ConfigError(f"{table}: new column {name!r} of Debezium type {logical_name or connect_type!r} "
                              f"is not supported", hint="see docs/types.md")
        return Column(name, kind, True, source_type=(logical_name or connect_type))
    length = int(params.get("__debezium.source.column.length") or 0)
    scale = int(params.get("__debezium.source.column.scale") or 0)
    if logical_name == "io.debezium.data.Enum":
        return postgres_column(name, "USER-DEFINED", True, None, None, None, table, source.lower(), "e")
    if source.startswith("_"):
        return postgres_column(name, "ARRAY", True, None, None, None, table, source.lower())
    data_type = _DEBEZIUM_TYPES.get(source, source.lower())
    if data_type == "numeric":
        precision = None if length in (0, UNCONSTRAINED_LENGTH) else length
        return postgres_column(name, data_type, True, precision, scale if precision else None, None, table)
    return postgres_column(name, data_type, True, None, None, scale, table)


# MariaDB (information_schema.COLUMNS.DATA_TYPE) -> kind, for types whose kind needs no
# more than the name. Debezium's MariaDB connector with this project's settings
# (debezium/mariadb-connector.json) sends each as the wire type of that kind.
_MARIADB_SIMPLE = {
    "tinyint": "int", "smallint": "int", "mediumint": "int", "int": "int", "integer": "int", "year": "int",
    "float": "float", "double": "double", "real": "double",
    "char": "string", "varchar": "string", "tinytext": "string", "text": "string", "mediumtext": "string",
    "longtext": "string", "enum": "string", "set": "string", "json": "string",
    "binary": "binary", "varbinary": "binary", "tinyblob": "binary", "blob": "binary", "mediumblob": "binary",
    "longblob": "binary", "date": "date", "timestamp": "timestamptz", "time": "duration_us",
}


def mariadb_column(name: str, data_type: str, column_type: str, nullable: bool, numeric_precision: int | None,
                   numeric_scale: int | None, datetime_precision: int | None, table: str) -> Column:
    """The kind of one MariaDB column (information_schema terms), or a ConfigError."""
    data_type, column_type = data_type.lower(), (column_type or data_type).lower()
    unsigned = "unsigned" in column_type
    shown = column_type
    if data_type == "int" and unsigned:
        return Column(name, "long", nullable, source_type=shown)
    if data_type == "bigint":
        if unsigned:  # up to 18446744073709551615 (bigint.unsigned.handling.mode=precise)
            return Column(name, "decimal", nullable, 20, 0, source_type=shown)
        return Column(name, "long", nullable, source_type=shown)
    data_type = {"numeric": "decimal", "dec": "decimal", "fixed": "decimal", "bool": "tinyint",
                 "boolean": "tinyint"}.get(data_type, data_type)
    if data_type == "decimal" and numeric_precision is not None and numeric_precision <= 38:
        return Column(name, "decimal", nullable, numeric_precision, numeric_scale or 0, source_type=shown)
    if data_type == "bit":
        return Column(name, "boolean" if (numeric_precision or 1) == 1 else "bits", nullable, source_type=shown)
    if data_type == "datetime":
        kind = "timestamp_ms" if (datetime_precision or 0) <= 3 else "timestamp_us"
        return Column(name, kind, nullable, source_type=shown)
    if data_type in _MARIADB_SIMPLE:
        return Column(name, _MARIADB_SIMPLE[data_type], nullable, source_type=shown)
    if data_type == "uuid":
        raise ConfigError(f"{table}: column {name!r} has type uuid, whose values Debezium's MariaDB connector "
                          f"reads wrongly when they end in zero bytes (123e4567-...-426614174000 arrives as "
                          f"00123e45-...-564266141740), so cdc does not replicate it",
                          hint="store UUIDs as CHAR(36) or BINARY(16) at the source; see docs/types.md")
    raise ConfigError(f"{table}: column {name!r} has type {shown!r}, which cdc does not replicate",
                      hint="see docs/types.md for the supported types; exclude the table or change the column")


def _mariadb_debezium_column(name: str, source: str, params: dict, table: str) -> Column:
    """A MariaDB column from the source type Debezium propagates (`INT UNSIGNED`,
    `DECIMAL` with length and scale, `DATETIME` with length as its precision)."""
    length = params.get("__debezium.source.column.length")
    scale = params.get("__debezium.source.column.scale")
    data_type = source.split()[0].lower()
    precision = int(length) if length is not None else None
    if data_type == "bit" and precision is None:
        precision = 1
    return mariadb_column(name, data_type, source.lower(), True, precision,
                          int(scale) if scale is not None else None,
                          precision if data_type == "datetime" else None, table)
