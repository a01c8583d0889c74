"""`cdc register`: for each source, one Debezium connector covering all its registered
tables; for each table, its Iceberg target, created from the source's columns."""
from __future__ import annotations

from cdc.config.loader import load_tables
from cdc.config.models import Settings, TableRegistration
from cdc.register.connector import ConnectClient, connector_name, postgres_config, topic_for, write_secret
from cdc.sinks.catalog import load_catalog
from cdc.sinks.iceberg import ensure_table
from cdc.sources import postgres


def register(settings: Settings, selected: list[TableRegistration], wait_snapshot: bool = True) -> None:
    catalog = load_catalog(settings)
    for reg in selected:
        with postgres.connect(settings, reg.source.name) as conn:
            src = postgres.describe_table(conn, reg)
        created = ensure_table(catalog, reg, src.columns, src.key, topic_for(reg.source.name, reg))
        print(f"{reg.name}: target {settings.catalog.name}.{reg.target} "
              f"{'created' if created else 'exists'}, key {', '.join(src.key)}")

    # A connector's include list covers every registration of its source, not only the
    # selected ones, so registering one table never drops another from capture.
    everything = load_tables(settings)
    client = ConnectClient(settings.connect_url)
    for source in sorted({r.source.name for r in selected}):
        tables = [t for t in everything if t.source.name == source]
        src = settings.sources[source]
        secret = postgres.password(settings, src, source)
        if settings.connect.url is None:  # the local worker: secret through its FileConfigProvider
            secret = write_secret(settings.state_dir / "connect" / "secrets", source, secret)
        name = connector_name(source)
        client.put_config(name, postgres_config(settings, source, tables, secret))
        client.wait_running(name)
        if wait_snapshot:
            client.wait_streaming(name)
        print(f"connector {name}: running, capturing {len(tables)} table(s)")
