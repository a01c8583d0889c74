"""`cdc tables add` and `cdc tables list`: a registration written from what the source
says of the table (its columns and primary key), and each registration with its state."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import yaml
from pydantic import ValidationError

from cdc.config.loader import describe, load_tables, resolve_source
from cdc.config.models import Settings, TableRegistration
from cdc.control import jobstate
from cdc.errors import ConfigError
from cdc.sources import check_key_not_null, module_of


def add(settings: Settings, schema: str, table: str, source: str | None = None, name: str | None = None,
        key: tuple[str, ...] | None = None, sink: str = "iceberg") -> Path:
    """Introspect the source table and write `<tables_dir>/<name>.yaml`; returns its path.
    A table without a primary key needs `key`; an existing registration is never overwritten."""
    name = name or f"{schema}.{table}"
    tables_dir = settings.path(settings.tables_dir)
    path = tables_dir / f"{name}.yaml"
    body = {"name": name, "source": {**({"name": source} if source else {}), "schema": schema, "table": table}}
    if sink != "iceberg":
        body["sink"] = sink
    try:
        reg = TableRegistration(**body, key=key)
    except ValidationError as e:
        raise ConfigError(describe(e, Path("cdc tables add"))) from None
    reg = resolve_source(reg, settings)
    if path.exists():
        raise ConfigError(f"{path} already exists", hint="edit it, or remove it and add the table again")
    kind = module_of(settings, reg.source.name)
    with kind.connect(settings, reg.source.name) as conn:
        src = kind.describe_table(conn, reg)
    written = {**body, "key": list(src.key)}
    try:  # what the loader and `cdc register` take, by the same checks: never a file they refuse
        TableRegistration(**written)
    except ValidationError as e:
        raise ConfigError(describe(e, path) + "; the registration is not written") from None
    check_key_not_null(kind, reg, src)
    tables_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(header(reg, src) + yaml.safe_dump(written, sort_keys=False))
    return path


def header(reg: TableRegistration, src) -> str:
    """The comment above a written registration: the source's columns as it described them.
    Names and types come from the source, so each is a JSON string literal (ASCII, escapes
    for line breaks and every other control or non-ASCII character): a comment line can
    never end early and become configuration."""
    def text(value: str) -> str:
        return json.dumps(value, ensure_ascii=True)

    columns = "\n".join(f"#   {text(c.name)} {text(c.source_type or c.kind)}{'' if c.nullable else ' not null'}"
                        f"{'  (key)' if c.name in src.key else ''}" for c in src.columns)
    partitioned = ("" if src.partitions is None else
                   f"# Partitioned ({src.partitions} partitions now): the changes of every partition, and of those "
                   f"attached later, are captured as this table's and reach its target.\n")
    return (f"# {reg.source.name}: {reg.source.schema_}.{reg.source.table}, introspected "
            f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by `cdc tables add`.\n{partitioned}"
            f"# Columns (name and type as JSON strings; cdc register reads them again from the source):\n"
            f"{columns}\n")


def listing(settings: Settings) -> list[dict]:
    """Each registration: its source table, key, target, whether `cdc register` has created
    its target (`registered`; shown `new` until then), and its job's state."""
    from pyiceberg.exceptions import NoSuchTableError

    from cdc.sinks import delta
    from cdc.sinks.catalog import load_catalog
    from cdc.sinks.formats import shown_name

    catalog = load_catalog(settings)
    out = []
    for reg in load_tables(settings):
        if reg.sink == "delta":
            registered = delta.open_table(delta.location(settings, reg.target)) is not None
        else:
            try:
                catalog.load_table(reg.target)
                registered = True
            except NoSuchTableError:
                registered = False
        out.append({"table": reg.name, "source": reg.source.name,
                    "source_table": f"{reg.source.schema_}.{reg.source.table}",
                    "key": list(reg.key) if reg.key else None, "sink": reg.sink, "mode": reg.mode,
                    "target": shown_name(settings, reg), "registered": registered,
                    "job": jobstate.read(settings.state_dir, reg.name), "file": str(reg.file)})
    return out


def format_listing(rows: list[dict]) -> str:
    lines = [f"{'table':28} {'sink':8} {'state':11} {'job':10} {'source':34} key"]
    for r in rows:
        lines.append(f"{r['table']:28} {r['sink']:8} {'registered' if r['registered'] else 'new':11} "
                     f"{r['job']['state']:10} "
                     f"{r['source'] + ':' + r['source_table']:34} "
                     f"{', '.join(r['key']) if r['key'] else '(primary key)'}")
    return "\n".join(lines if rows else lines + ["(no registered tables: cdc tables add SCHEMA.TABLE)"])
