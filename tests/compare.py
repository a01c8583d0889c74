"""Row-for-row comparison of a source table (PostgreSQL or MariaDB) with its target read
through a second reader (pyiceberg for Iceberg, delta-rs for Delta), every column."""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import re
import uuid
from decimal import Decimal

import psycopg

METADATA_PREFIX = "_cdc_"


def _norm(v):
    if isinstance(v, (ipaddress.IPv4Address, ipaddress.IPv6Address, ipaddress.IPv4Interface, ipaddress.IPv6Interface,
                      ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return str(v)
    if isinstance(v, dt.time):  # the target keeps times as text, UTC for timetz
        if v.tzinfo is not None:
            utc = dt.datetime.combine(dt.date(1970, 1, 1), v).astimezone(dt.timezone.utc).time()
            return utc.isoformat(timespec="microseconds") + "Z"
        return v.isoformat(timespec="microseconds")
    if isinstance(v, memoryview):
        return bytes(v)
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc)
    if isinstance(v, float):
        return v
    return v


def _norm_target(v, source_value):
    """Target values in the source's terms: JSON text parsed, ISO durations as the source's
    (months|days|µs), floats compared as float32 where the source is real."""
    if isinstance(source_value, (dict, list)) and isinstance(v, str):
        return json.dumps(json.loads(v), sort_keys=True)
    if isinstance(source_value, str) and source_value.startswith(INTERVAL_MARK) and isinstance(v, str):
        return _iso_duration(v)
    return _norm(v)


INTERVAL_MARK = "interval:"
_DURATION = re.compile(r"^P(-?\d+)Y(-?\d+)M(-?\d+)DT(-?\d+)H(-?\d+)M(-?[\d.]+)S$")


def _iso_duration(text: str) -> str:
    """Debezium's ISO-8601 duration as `interval:months|days|µs`."""
    y, mo, d, h, mi, sec = _DURATION.match(text).groups()
    micros = (int(h) * 3600 + int(mi) * 60) * 1_000_000 + int(Decimal(sec) * 1_000_000)
    return f"{INTERVAL_MARK}{int(y) * 12 + int(mo)}|{int(d)}|{micros}"


def _select(conn, schema: str, table: str) -> str:
    """SELECT of every column, money as numeric and intervals as `interval:months|days|µs`."""
    cols = conn.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                        "AND table_name = %s ORDER BY ordinal_position", (schema, table)).fetchall()
    out = []
    for name, typ in cols:
        c = '"' + name.replace('"', '""') + '"'
        if typ == "money":
            out.append(f"{c}::numeric AS {c}")
        elif typ == "interval":
            out.append(f"'{INTERVAL_MARK}' || ((EXTRACT(YEAR FROM {c}) * 12 + EXTRACT(MONTH FROM {c}))::int) || '|' || "
                       f"EXTRACT(DAY FROM {c})::int || '|' || (EXTRACT(HOUR FROM {c}) * 3600000000 + "
                       f"EXTRACT(MINUTE FROM {c}) * 60000000 + EXTRACT(SECOND FROM {c}) * 1000000)::bigint AS {c}")
        else:
            out.append(c)
    return ", ".join(out)


def source_rows(dsn: str, schema: str, table: str, key: tuple[str, ...]) -> dict[tuple, dict]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(psycopg.sql.SQL("SELECT {} FROM {}.{}").format(
            psycopg.sql.SQL(_select(conn, schema, table)), psycopg.sql.Identifier(schema),
            psycopg.sql.Identifier(table)))
        names = [d.name for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    return {tuple(r[k] for k in key): r for r in rows}


def duration_text(v: dt.timedelta) -> str:
    """A MariaDB TIME (a signed duration) as the target keeps it: [-]HH:MM:SS.ffffff."""
    micros = abs(v.days * 86_400_000_000 + v.seconds * 1_000_000 + v.microseconds)
    sign = "-" if v < dt.timedelta(0) else ""
    return (f"{sign}{micros // 3_600_000_000:02d}:{micros // 60_000_000 % 60:02d}:{micros // 1_000_000 % 60:02d}."
            f"{micros % 1_000_000:06d}")


def mariadb_source_rows(conn, schema: str, table: str, key: tuple[str, ...]) -> dict[tuple, dict]:
    """Rows of a MariaDB table in the target's terms: TIME as duration text, TIMESTAMP as a
    UTC instant (the server runs in UTC), BIT(1) as a boolean."""
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE, NUMERIC_PRECISION FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table))
        types = {name: (typ, precision) for name, typ, precision in cur.fetchall()}
        cur.execute(f"SELECT * FROM `{schema}`.`{table}`")
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
    out = {}
    for r in rows:
        row = {}
        for name, v in zip(names, r):
            typ, precision = types[name]
            if v is not None and typ == "time":
                v = duration_text(v)
            elif v is not None and typ == "timestamp":
                v = v.replace(tzinfo=dt.timezone.utc)
            elif v is not None and typ == "bit" and (precision or 1) == 1:
                v = v != b"\x00"
            row[name] = v
        out[tuple(row[k] for k in key)] = row
    return out


def delta_records(path, version: int | None = None) -> list[dict]:
    """Every row of the Delta table at `path` (at `version`: as of that version), read by
    delta-rs (deletion vectors applied)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(str(path), version=version)
    return pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all()).to_pylist()


def delta_summaries(path) -> list[dict]:
    """The cdc keys (userMetadata) of each commit of the Delta table at `path`, oldest first."""
    from deltalake import DeltaTable

    return [json.loads(c["userMetadata"]) if c.get("userMetadata") else {}
            for c in reversed(DeltaTable(str(path)).history())]


def target_rows(catalog, ident: str, key: tuple[str, ...]) -> dict[tuple, dict]:
    return rows_by_key(catalog.load_table(ident).scan().to_arrow().to_pylist(), key)


def rows_by_key(records: list[dict], key: tuple[str, ...]) -> dict[tuple, dict]:
    """A target's rows (`records`, from pyiceberg or delta-rs) by key, without the `_cdc_*` columns."""
    out = {}
    for r in records:
        k = tuple(r[c] for c in key)
        assert k not in out, f"duplicate key {k} in the target"
        out[k] = {c: v for c, v in r.items() if not c.startswith(METADATA_PREFIX)}
    return out


def differences(src: dict, dst: dict, float32_columns: frozenset = frozenset(), float_digits: int | None = None) -> list[str]:
    """Human-readable differences (empty when the tables are equal). `float_digits`: compare
    the float32 columns to that many significant digits (MariaDB prints FLOAT so)."""
    diffs = [f"missing in target: {k}" for k in sorted(set(src) - set(dst))[:10]]
    diffs += [f"extra in target: {k}" for k in sorted(set(dst) - set(src))[:10]]
    for k in sorted(set(src) & set(dst)):
        s, d = src[k], dst[k]
        if set(s) != set(d):
            diffs.append(f"{k}: columns differ {sorted(s)} vs {sorted(d)}")
            continue
        for c in s:
            a, b = _norm(s[c]), _norm_target(d[c], s[c])
            if c in float32_columns and isinstance(a, float) and isinstance(b, float):
                import struct
                a = struct.unpack("f", struct.pack("f", a))[0]
                if float_digits:
                    a, b = float(f"{a:.{float_digits}g}"), float(f"{b:.{float_digits}g}")
            if a != b and not (isinstance(a, float) and isinstance(b, float) and a != a and b != b):
                diffs.append(f"{k}.{c}: source {a!r} != target {b!r}")
    return diffs[:30]


def assert_equal(dsn, schema, table, catalog, ident, key, float32_columns=frozenset()):
    src, dst = source_rows(dsn, schema, table, key), target_rows(catalog, ident, key)
    diffs = differences(src, dst, float32_columns)
    assert not diffs, f"{schema}.{table} != {ident} ({len(src)} source rows, {len(dst)} target rows):\n" + \
        "\n".join(diffs)
    return len(src)


def as_decimal(x) -> Decimal:
    return Decimal(str(x))


def row_hashes(rows: dict[tuple, dict], reference: dict[tuple, dict] | None = None) -> dict[tuple, str]:
    """A hash of every row (all columns, normalized as for `differences`)."""
    import hashlib

    out = {}
    for k, r in rows.items():
        ref = (reference or {}).get(k, r)
        norm = {c: (_norm_target(v, ref.get(c)) if reference is not None else _norm(v)) for c, v in sorted(r.items())}
        out[k] = hashlib.sha256(repr(sorted(norm.items())).encode()).hexdigest()
    return out
