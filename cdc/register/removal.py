"""`cdc tables remove`: a registered table taken out of capture. Its source's connector
stops capturing it (PostgreSQL: the connector narrows its publication); when it was the
source's last table the connector is retired and the replication slot and publication
dropped, so no slot holds WAL for it. The registration file, checkpoint and job state go.
The target stays as it is, marked out of capture (registering the table again snapshots
it anew), unless `drop_target`: then the target, its delete memory and dead letters, and
the table's topic (when no other registration reads it) go too."""
from __future__ import annotations

import datetime as dt
import shutil

from cdc.config.clients import kafka_access
from cdc.config.loader import load_tables
from cdc.config.models import Settings, TableRegistration
from cdc.control import jobstate
from cdc.errors import ConnectorError
from cdc.log import log
from cdc.planning.dead_letters import SUFFIX as DEAD_LETTERS_SUFFIX
from cdc.planning.merge import DELETES_SUFFIX
from cdc.register import stuck, stuck_binlog
from cdc.register.capture import tables_named
from cdc.register.connector import ConnectClient, connector_name, topic_for
from cdc.register.registrar import captured, check_plugins, source_connector_config, with_others
from cdc.register.topics import delete_topics
from cdc.sinks import delta, iceberg
from cdc.sinks.catalog import load_catalog
from cdc.sinks.formats import shown_name
from cdc.sinks.targets import PROP_CAPTURE_REMOVED, PROP_SNAPSHOT
from cdc.sources import module_of
from cdc.sources.postgres import publication_name, slot_name


def remove(settings: Settings, reg: TableRegistration, drop_target: bool = False) -> list[str]:
    """Take `reg` out of capture (and its target away, with `drop_target`); what was done,
    a line each. Refused (exit 5) while a process runs, replays or bootstraps the table."""
    done = []
    with jobstate.exclusive(settings.state_dir, [reg.name]):
        done += _out_of_capture(settings, reg)
        others = [t for t in load_tables(settings) if t.name != reg.name]
        if drop_target:
            done += _drop(settings, reg, shared=any(topic_for(t.source.name, t) == topic_for(reg.source.name, reg)
                                                     for t in others))
        else:
            done += _mark_removed(settings, reg)
        shutil.rmtree(settings.path(settings.spark.checkpoint_dir) / reg.name, ignore_errors=True)
        jobstate.forget(settings.state_dir, reg.name)
        if reg.file is not None:
            reg.file.unlink(missing_ok=True)
            done.append(f"registration {reg.file} deleted")
    return done


def _out_of_capture(settings: Settings, reg: TableRegistration) -> list[str]:
    """The source's connector without the table: narrowed, or retired with what the source
    keeps for capture when no table is left."""
    source, client = reg.source.name, ConnectClient.of(settings)
    name = connector_name(source)
    previous = client.config(name)
    if previous is None:
        return [f"connector {name} does not exist: nothing to stop"]
    table = f"{reg.source.schema_}.{reg.source.table}"
    left = [t for t in captured(settings, client, source, []) if t.name != reg.name]
    readers = [t.name for t in left if f"{t.source.schema_}.{t.source.table}" == table]
    if readers:
        return [f"connector {name} still captures {table}: registration {', '.join(readers)} reads it too"]
    kind = module_of(settings, source)
    config = with_others(settings, source, source_connector_config(settings, source, left), previous)
    if not left and config["table.include.list"] == settings.sources[source].signal_table:
        client.retire(name)
        with kind.connect(settings, source) as conn:
            released = kind.release_capture(conn, settings, source)
        return [f"connector {name} deleted (its last table)"] + [f"{what} dropped" for what in released]
    check_plugins(settings, client, config)
    client.put_config(name, config)
    client.restart_failed(name)  # a task failed on this table's change runs again without it
    done = [f"connector {name} no longer captures {table} "
            f"({len(config['table.include.list'].split(',')) - 1} table(s) left)"]
    with kind.connect(settings, source) as conn:
        try:
            client.wait_task_config(name, "table.include.list", config["table.include.list"])
            _captures(settings, client, kind, conn, source)
        except ConnectorError as e:
            moved = _past_stuck_change(settings, client, conn, reg, left) if _stuck_on(settings, client, reg) else None
            if moved is None:
                raise ConnectorError(f"connector {name} no longer captures {table}, and it has not captured a marker "
                                     f"since: {e.message}",
                                     hint="see `cdc status` and the Connect worker's log") from None
            done += moved
            _captures(settings, client, kind, conn, source)
    return done


def _captures(settings: Settings, client: ConnectClient, kind, conn, source: str) -> None:
    """Until the source's connector runs and has captured a marker written now."""
    name = connector_name(source)
    client.wait_running(name)
    client.wait_captured(name, kind.write_marker(conn, settings.sources[source].signal_table))


def _past_stuck_statement(client: ConnectClient, conn, reg: TableRegistration) -> list[str] | None:
    """A MariaDB connector stuck on a statement of the table moved past its transaction."""
    name, table = connector_name(reg.source.name), f"{reg.source.schema_}.{reg.source.table}"
    entry = stuck_binlog.check_skippable(client.partition_offsets(name))
    offset = entry["offset"]
    events = stuck_binlog.events_after(conn, offset["file"], int(offset["pos"]))
    skip = stuck_binlog.plan_skip(events, offset.get("gtids", ""), reg.source.schema_, reg.source.table)
    if skip is None:
        return None
    client.stop(name)
    client.alter_offsets(name, [{"partition": entry["partition"], "offset": stuck_binlog.moved_offset(offset, skip)}])
    client.resume(name)
    return [f"connector {name} moved past transaction {skip.gtid}, whose statement on {table} it cannot read "
            f"({skip.statement[:200]})"]


def _stuck_on(settings: Settings, client: ConnectClient, reg: TableRegistration) -> bool:
    """Whether a failed task of the source names the table (capture.explain's case)."""
    return any(t.get("state") == "FAILED" and tables_named(settings, reg.source.name, t.get("trace")) == [reg.name]
               for t in client.not_running(connector_name(reg.source.name)))


def _past_stuck_change(settings: Settings, client: ConnectClient, conn, reg: TableRegistration,
                       left: list[TableRegistration]) -> list[str] | None:
    """A PostgreSQL connector stuck on the table's change moved past the transactions that
    change it (register/stuck.py), a MariaDB one past its statement (stuck_binlog.py); what
    was done, in lines. None when it cannot be."""
    if settings.sources[reg.source.name].kind == "mariadb":
        return _past_stuck_statement(client, conn, reg)
    if settings.sources[reg.source.name].kind != "postgresql":
        return None
    name, table = connector_name(reg.source.name), f"{reg.source.schema_}.{reg.source.table}"
    entry = stuck.check_skippable(client.partition_offsets(name))
    txs = stuck.peek(conn, slot_name(settings, reg.source.name), publication_name(settings, reg.source.name))
    skip = stuck.plan_skip(txs, stuck.committed_lsn(entry["offset"]), table)
    if skip is None:
        return None
    client.stop(name)
    client.alter_offsets(name, [{"partition": entry["partition"], "offset": stuck.moved_offset(entry["offset"], skip)}])
    client.resume(name)
    done = [f"connector {name} moved past {skip.skipped} transaction(s) that {table}'s change stopped, to WAL "
            f"position {stuck.lsn_text(skip.to_lsn)}"]
    by_table = {f"{t.source.schema_}.{t.source.table}": t.name for t in left}
    others = sorted(by_table[t] for t in skip.others if t in by_table)
    if others:
        done.append(f"those transaction(s) also changed {', '.join(others)}, whose changes there were not captured: "
                    + "; ".join(f"run `cdc bootstrap --table {n}`" for n in others) + " to make them exact")
        log(f"changes of {', '.join(others)} were left behind with {table}'s", table=reg.name, level="warning",
            event="stuck-change-skipped", tables=others)
    return done


def _mark_removed(settings: Settings, reg: TableRegistration) -> list[str]:
    """The target kept, marked out of capture: registering the table again snapshots it."""
    props = {PROP_SNAPSHOT: "", PROP_CAPTURE_REMOVED: dt.datetime.now(dt.timezone.utc).isoformat()}
    if reg.sink == "delta":
        if delta.open_table(delta.location(settings, reg.target)) is None:
            return []
        delta.set_properties(settings, delta.location(settings, reg.target), props)
    else:
        catalog = load_catalog(settings)
        if not catalog.table_exists(reg.target):
            return []
        iceberg.set_properties(catalog.load_table(reg.target), reg.target, props, settings)
    return [f"target {shown_name(settings, reg)} kept as it is, out of capture from now on"]


def _drop(settings: Settings, reg: TableRegistration, shared: bool) -> list[str]:
    """The target, its delete memory and its dead letters, and its topic unless `shared`."""
    done = []
    if reg.sink == "delta":
        for suffix in ("", DELETES_SUFFIX, DEAD_LETTERS_SUFFIX):
            path = delta.location(settings, reg.target, suffix)
            if path.exists():
                shutil.rmtree(path)
                done.append(f"Delta table {path} deleted")
    else:
        catalog = load_catalog(settings)
        for ident in (reg.target, reg.target + DELETES_SUFFIX, reg.target + DEAD_LETTERS_SUFFIX):
            if catalog.table_exists(ident):
                catalog.purge_table(ident)
                done.append(f"table {settings.catalog.name}.{ident} dropped with its files")
    topic = topic_for(reg.source.name, reg)
    if shared:
        done.append(f"topic {topic} kept: another registration reads it")
    elif delete_topics(kafka_access(settings), [topic]):
        done.append(f"topic {topic} deleted")
    return done
