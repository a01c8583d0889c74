"""`cdc register`: for each source, one Debezium connector covering all its registered
tables; for each table, its Iceberg target (created from the source's columns) and its
Kafka topic. A table added to a connector whose initial snapshot is done gets an
incremental snapshot through Debezium's signal table."""
from __future__ import annotations

import sys

from cdc.config.loader import load_tables
from cdc.config.models import Settings, TableRegistration
from cdc.register.connector import ConnectClient, connector_config, connector_name, topic_for, write_secret
from cdc.register.topics import ensure_topics
from cdc.sinks.catalog import load_catalog
from cdc.sinks.iceberg import ensure_table, mark_snapshotted, snapshot_pending
from cdc.sources import module_of, password


def register(settings: Settings, selected: list[TableRegistration], wait_snapshot: bool = True) -> None:
    catalog = load_catalog(settings)
    for reg in selected:
        kind = module_of(settings, reg.source.name)
        with kind.connect(settings, reg.source.name) as conn:
            src = kind.describe_table(conn, reg)
        created = ensure_table(catalog, reg, src.columns, src.key, topic_for(reg.source.name, reg))
        print(f"{reg.name}: target {settings.catalog.name}.{reg.target} "
              f"{'created' if created else 'exists'}, key {', '.join(src.key)}")

    # A connector's include list covers every registration of its source, not only the
    # selected ones, so registering one table never drops another from capture.
    everything = load_tables(settings)
    client = ConnectClient(settings.connect_url)
    for source in sorted({r.source.name for r in selected}):
        _register_source(settings, client, source, [t for t in everything if t.source.name == source], wait_snapshot)


def _register_source(settings: Settings, client: ConnectClient, source: str, tables: list[TableRegistration],
                     wait_snapshot: bool) -> None:
    src = settings.sources[source]
    name = connector_name(source)
    if src.connector_password_ref:
        secret = src.connector_password_ref
    elif settings.connect.url is None:  # the local worker: secret through its FileConfigProvider
        secret = write_secret(settings.state_dir / "connect" / "secrets", source,
                              password(settings, src, source))
    else:
        secret = password(settings, src, source)
        print(f"warning: source {source}: the password goes into the connector config of {settings.connect_url}, "
              f"where its REST API shows it; set sources.{source}.connector_password_ref to a config provider "
              f"reference instead", file=sys.stderr)
    config = connector_config(settings, source, tables, secret)
    previous = client.config(name)
    catalog = load_catalog(settings)
    kind = module_of(settings, source)
    with kind.connect(settings, source) as conn:
        kind.check_binlog(conn, source)
        kind.ensure_signal_table(conn, src.signal_table)
        ensure_topics(settings.kafka_bootstrap, [topic_for(source, t) for t in tables])
        client.put_config(name, config)
        client.wait_task_config(name, "table.include.list", config["table.include.list"])
        client.wait_running(name)
        if not wait_snapshot:
            return
        client.wait_streaming(name)
        pending = snapshot_pending(catalog, tables)
        if pending and previous is not None:
            # The connector's initial snapshot is behind it: fill these tables incrementally.
            names = sorted(f"{t.source.schema_}.{t.source.table}" for t in pending)
            print(f"connector {name}: incremental snapshot of {', '.join(names)}")
            marker = kind.request_incremental_snapshot(conn, src.signal_table, names)
            client.wait_captured(name, marker)
            client.wait_incremental_snapshot(name)
        for t in pending:
            mark_snapshotted(catalog, t, "incremental" if previous is not None else "initial")
    print(f"connector {name}: running, capturing {len(tables)} table(s)")
