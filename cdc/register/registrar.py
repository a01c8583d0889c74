"""`cdc register`: for each source, one Debezium connector covering all its registered
tables; for each table, its target (an Iceberg or a Delta table, created from the
source's columns) and its Kafka topic. A table added to a connector whose initial snapshot is done gets an
incremental snapshot through Debezium's signal table."""
from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext

from cdc.config.clients import (SECRET_PROPERTIES, jaas_quoted, kafka_access, kafka_keystore_password,
                               kafka_password)
from cdc.config.loader import load_tables
from cdc.config.models import Settings, TableRegistration
from cdc.control import commits, jobstate
from cdc.errors import CdcError, ConfigError, ConnectorError
from cdc.log import log
from cdc.planning.protect import check_connector_masks, check_mask_key, mask_key
from cdc.register.capture import format_text, retrying_cause, source_capture, task_error
from cdc.register.connector import (DOWN, MASK_CLASS, ConnectClient, connector_config, connector_name,
                                    keeping_others, secret_file_ref, topic_for, write_secret)
from cdc.register.lineage import send_registered
from cdc.control.kafka import existing_topics, topic_id, watermarks
from cdc.register.topics import ensure_topics, layout_warnings, topic_layout
from cdc.sinks import delta, iceberg
from cdc.sinks.catalog import load_catalog
from cdc.sinks.formats import open_table, shown_name, target_refs
from cdc.sinks.session import get_session
from cdc.sinks.targets import PROP_CAPTURE_REMOVED, PROP_SNAPSHOT
from cdc.sources import check_key_not_null, module_of, password
from cdc.waiting import poll_until


MASK = "****"  # what a dry run shows of a password


def register(settings: Settings, selected: list[TableRegistration], wait_snapshot: bool = True,
             dry_run: bool = False) -> None:
    """With `dry_run`, print the target, topic and connector changes it would make, and make
    none. Every selected table is checked first (its source table, its target's owner, key
    and settings): a refused table changes nothing, for itself or the others."""
    check_targets_unique(settings, selected)
    for reg in selected:
        if reg.snapshot == "jdbc" and settings.sources[reg.source.name].kind != "postgresql":
            raise ConfigError(f"table {reg.name}: `snapshot: jdbc` reads PostgreSQL sources only; source "
                              f"{reg.source.name!r} is {settings.sources[reg.source.name].kind}",
                              hint=f"use `snapshot: initial` ({reg.file})")
    catalog = load_catalog(settings)
    described = []
    for reg in selected:
        kind = module_of(settings, reg.source.name)
        with kind.connect(settings, reg.source.name) as conn:
            described.append((reg, kind.describe_table(conn, reg)))
        check_key_not_null(kind, reg, described[-1][1])
        check_connector_masks(settings, reg, described[-1][1].columns)
    check_shared_keys(settings, described)
    would = [ensure_target(settings, catalog, reg, src, dry_run=True) for reg, src in described]  # checks only
    new = {reg.name for (reg, _), created in zip(described, would) if created}
    for (reg, src), created in zip(described, would):
        # a target created anew (re-created after a failure) while a continuous job runs the
        # table: the job hands it over, and takes it back at once when the target is there
        with jobstate.exclusive(settings.state_dir, [reg.name]) if created and not dry_run else nullcontext():
            if not dry_run:
                created = ensure_target(settings, catalog, reg, src, dry_run=False)
            done = ("would be created" if dry_run else "created") if created else "exists"
            print(f"{reg.name}: {reg.sink} target {shown_name(settings, reg)} {done}, key {', '.join(src.key)}"
                  + (f", {len(src.columns)} columns" if created else ""))
            if created:
                start_after_topic(settings, reg, dry_run)
        removed_at = None if created else removed_from_capture(settings, catalog, reg)
        if removed_at:
            log(f"target {shown_name(settings, reg)} was out of capture from {removed_at}: the table is "
                f"snapshotted again, which brings back every source row, but a row deleted at the source meanwhile "
                f"stays in the target; run `cdc bootstrap --table {reg.name}` once it is registered to make it "
                f"exact (`cdc reconcile --deep` shows the difference)", table=reg.name, level="warning",
                event="capture-was-removed")

    client = ConnectClient.of(settings)
    for source in sorted({r.source.name for r in selected}):
        tables = captured(settings, client, source, selected)
        if dry_run:
            _plan_source(settings, client, source, tables)
        else:
            _register_source(settings, client, source, tables, wait_snapshot)
        warn_topics(settings, source, tables, new)
    if not dry_run:
        send_registered(settings, selected)  # OpenLineage events, when cdc.yaml's `lineage` is on


def loadable(settings: Settings) -> list[TableRegistration]:
    """Every registration that loads: one that does not is its own table's problem, which
    `cdc register` reports, never the others' (`loader.load_tables`)."""
    return load_tables(settings, invalid=[])


def warn_topics(settings: Settings, source: str, tables: list[TableRegistration], new: set[str]) -> None:
    """The table topics' partitions and retention against cdc.yaml and the tables' needs."""
    pairs = [(t, topic_for(source, t)) for t in tables]
    found = topic_layout(kafka_access(settings), [topic for _, topic in pairs])
    for line in layout_warnings(settings.kafka.topics, pairs, found, new):
        log(line, level="warning", event="topic-layout")


def ensure_target(settings: Settings, catalog, reg: TableRegistration, src, dry_run: bool) -> bool:
    """The table's target created, or checked and brought up to date (sinks/)."""
    topic, key = topic_for(reg.source.name, reg), mask_key(settings, reg)
    if reg.sink == "delta":
        return delta.ensure_table(settings, reg, src.columns, src.key, topic, dry_run=dry_run, mask_key=key)
    return iceberg.ensure_table(catalog, reg, src.columns, src.key, topic, dry_run=dry_run, settings=settings,
                                mask_key=key)


def start_after_topic(settings: Settings, reg: TableRegistration, dry_run: bool) -> None:
    """A new target of a topic that already holds records (a target re-created, or a topic
    kept from an earlier registration) starts after them: they are of the rows before this
    target and maybe of another schema, and the snapshot that follows registering (or the
    bootstrap) brings the rows. One commit, without data, records the topic's end offsets."""
    topic = topic_for(reg.source.name, reg)
    if topic not in existing_topics(kafka_access(settings)):
        return
    marks = watermarks(kafka_access(settings), topic)
    if not any(end > first for first, end in marks.values()):
        return
    ends = {p: end for p, (_, end) in sorted(marks.items())}
    shown = json.dumps({str(p): o for p, o in ends.items()})
    print(f"{reg.name}: topic {topic} already holds records; the new target {'would start' if dry_run else 'starts'} "
          f"after them, at offsets {shown} (to apply them instead: `cdc replay --table {reg.name} --from-earliest`)")
    if dry_run:
        return
    summary = commits.summary_properties(topic, ends, -1, f"{reg.name}@register", None, None,
                                         topic_id=topic_id(kafka_access(settings), topic))
    open_table(get_session(settings), target_refs(settings, reg)[0]).commit_summary_and_properties(summary, {})


def removed_from_capture(settings: Settings, catalog, reg: TableRegistration) -> str | None:
    """When `cdc tables remove` took the table out of capture and kept its target, and no
    snapshot has been applied since: the time it did."""
    from cdc.sinks.found import found_target

    found = found_target(settings, catalog, reg)
    props = found["properties"] if found else {}
    return None if props.get(PROP_SNAPSHOT) else props.get(PROP_CAPTURE_REMOVED) or None


def check_targets_unique(settings: Settings, selected: list[TableRegistration]) -> None:
    """No two registrations name the same target: refused before anything changes."""
    chosen = {t.name for t in selected}
    owners: dict[tuple[str, str], TableRegistration] = {}
    for t in loadable(settings):
        other = owners.setdefault((t.sink, t.target), t)
        if other is not t and chosen & {t.name, other.name}:
            raise ConfigError(f"registrations {other.name} ({other.file}) and {t.name} ({t.file}) both name "
                              f"target {shown_name(settings, t)}; a target has one owner",
                              hint="give each its own `target:`, or remove the file that should not be there")


def check_shared_keys(settings: Settings, described: list[tuple[TableRegistration, object]]) -> None:
    """Registrations that read one source table (different targets, modes or sinks) share
    its topic, which Debezium keys one way: they must key it by the same columns. Refused
    before anything changes, naming both."""
    keys = {reg.name: tuple(src.key) for reg, src in described}
    registered = loadable(settings)
    for reg, _ in described:
        table = (reg.source.name, reg.source.schema_, reg.source.table)
        for other in registered:
            if other.name == reg.name or (other.source.name, other.source.schema_, other.source.table) != table:
                continue
            if other.name not in keys:
                kind = module_of(settings, other.source.name)
                with kind.connect(settings, other.source.name) as conn:
                    keys[other.name] = tuple(kind.describe_table(conn, other).key)
            if keys[other.name] != keys[reg.name]:
                raise ConfigError(
                    f"registrations {other.name} ({other.file}) and {reg.name} ({reg.file}) both read "
                    f"{reg.source.schema_}.{reg.source.table} of source {reg.source.name!r}, keyed by "
                    f"{', '.join(keys[other.name])} and by {', '.join(keys[reg.name])}: the table has one topic, "
                    f"which Debezium keys by one set of columns",
                    hint=f"give both the same `key:` ({', '.join(keys[other.name])}), or remove one of them")


def captured(settings: Settings, client: ConnectClient, source: str,
             selected: list[TableRegistration]) -> list[TableRegistration]:
    """What the source's connector captures once `selected` are registered: the selected
    tables and those it captures already, never a registration file not yet registered."""
    config = client.config(connector_name(source)) or {}
    before = set(config.get("table.include.list", "").split(","))
    chosen = {t.name for t in selected}
    return [t for t in loadable(settings) if t.source.name == source
            and (t.name in chosen or f"{t.source.schema_}.{t.source.table}" in before)]


def _plan_source(settings: Settings, client: ConnectClient, source: str, tables: list[TableRegistration]) -> None:
    """Print the topics and the connector configuration `_register_source` would write."""
    missing = sorted({topic_for(source, t) for t in tables} - existing_topics(kafka_access(settings)))
    shape = settings.kafka.topics
    for topic in missing:
        print(f"topic {topic} would be created: {shape.partitions} partition(s), replication factor "
              f"{'the broker default' if shape.replication_factor == -1 else shape.replication_factor}, "
              f"retention {'for ever' if shape.retention_hours is None else f'{shape.retention_hours} h'}")
    name = connector_name(source)
    previous = client.config(name)
    config = with_others(settings, source, source_connector_config(settings, source, tables, shown=True), previous)
    kind = module_of(settings, source)
    with kind.connect(settings, source) as conn:
        partition_roots(settings, kind, conn, source, config, dry_run=True)
    if previous is None:
        print(f"connector {name} would be created, capturing {len(tables)} table(s):")
    changes = [(k, (previous or {}).get(k), config.get(k)) for k in sorted(set(config) | set(previous or {}))
               if k != "name" and (previous or {}).get(k) != config.get(k)]
    if previous is not None:
        print(f"connector {name}: " + ("would change:" if changes else "unchanged"))
    for k, old, new in changes:
        shown = [MASK if v is not None and ("password" in k or k.endswith(SECRET_PROPERTIES)) else v
                 for v in (old, new)]
        print(f"  {k}: {shown[1]}" if previous is None else f"  {k}: {shown[0]} -> {shown[1]}")


def partition_roots(settings: Settings, kind, conn, source: str, config: dict, dry_run: bool = False) -> None:
    """Where the connector captures partitioned tables through their root (its config's
    `publish.via.partition.root`), its publication made before does so too; says so. A
    server that cannot (before PostgreSQL 13) gets the setting off in `config`."""
    if config.get("publish.via.partition.root") != "true":
        return
    if not kind.publishes_via_root(conn):
        config["publish.via.partition.root"] = "false"
        return
    said = kind.ensure_publication(conn, settings, source, dry_run=dry_run)
    if said:
        print(said)


def secret_ref(settings: Settings, source: str) -> str | None:
    """The reference to the source's password the connector config carries, when it is one."""
    src = settings.sources[source]
    if src.connector_password_ref:
        return src.connector_password_ref
    if settings.connect.url is None:
        return secret_file_ref(settings.state_dir / "connect" / "secrets", source)
    return None


def connector_secret(settings: Settings, source: str) -> str:
    """What the connector config holds for the source's password: a config provider
    reference where there is one, else the password (with a warning)."""
    src = settings.sources[source]
    if src.connector_password_ref:
        return src.connector_password_ref
    if settings.connect.url is None:  # the local worker: secret through its FileConfigProvider
        return write_secret(settings.state_dir / "connect" / "secrets", source, password(settings, src, source))
    print(f"warning: source {source}: the password goes into the connector config of {settings.connect_url}, "
          f"where its REST API shows it; set sources.{source}.connector_password_ref to a config provider "
          f"reference instead", file=sys.stderr)
    return password(settings, src, source)


def connector_kafka_secrets(settings: Settings, source: str, shown: bool = False) -> dict[str, str]:
    """What a MariaDB connector's schema history clients carry for the Kafka secrets: a
    config provider reference (`kafka.security.connector_password_ref`; for the local
    worker, a secrets file cdc writes), else the secret itself, with a warning. `shown`:
    for printing, where nothing is written and an unreferenced secret is masked."""
    sec = settings.kafka.security
    if settings.sources[source].kind != "mariadb" or sec.protocol == "PLAINTEXT":
        return {}
    out = {}
    if sec.sasl:
        # stored as the JAAS line it is substituted into takes it
        out["password"] = sec.connector_password_ref or _connector_secret(
            settings, source, "password", "kafka-sasl", lambda: jaas_quoted(kafka_password(settings)), shown)
    if sec.keystore_file is not None:
        out["keystore_password"] = _connector_secret(
            settings, source, "keystore_password", "kafka-keystore", lambda: kafka_keystore_password(settings) or "",
            shown)
    return {k: v for k, v in out.items() if v is not None}


def _connector_secret(settings: Settings, source: str, key: str, file_name: str, read, shown: bool) -> str | None:
    """A secret for the connector config without a reference: the local worker's secrets
    file; for a remote worker None (the secret goes in itself), with a warning."""
    secrets_dir = settings.state_dir / "connect" / "secrets"
    if settings.connect.url is None:
        return secret_file_ref(secrets_dir, file_name) if shown else write_secret(secrets_dir, file_name, read())
    if shown:
        return MASK
    print(f"warning: source {source}: the Kafka {key.replace('_', ' ')} goes into the connector config of "
          f"{settings.connect_url} (Debezium's schema history clients), where its REST API shows it"
          + ("; set kafka.security.connector_password_ref to a config provider reference instead"
             if key == "password" else ""), file=sys.stderr)
    return None


def connector_mask_key(settings: Settings, tables: list[TableRegistration], shown: bool = False) -> str | None:
    """The masking key's reference in the connector config, when the connector masks
    (`masking.in_connector` and a table with `mask` columns): `masking.connector_key_ref`,
    or for the local worker a secrets file cdc writes. A remote worker without a reference
    is refused: its REST API would show the key."""
    masking = [t for t in tables if t.mask]
    m = settings.masking
    if not masking or not m.in_connector:
        return None
    if m.connector_key_ref:
        return m.connector_key_ref
    if settings.connect.url is not None:
        raise ConfigError(f"table {masking[0].name} masks columns in the connector of {settings.connect_url}, whose "
                          f"config would show the masking key",
                          hint="set masking.connector_key_ref to a config provider reference the workers resolve "
                               "(e.g. ${file:/etc/kafka/secrets.properties:cdc_mask_key}), or masking.in_connector: "
                               "false to hash in the jobs only (then Kafka holds the clear values)")
    secrets_dir = settings.state_dir / "connect" / "secrets"
    if shown:
        return secret_file_ref(secrets_dir, "masking-key")
    key = mask_key(settings, masking[0])
    from cdc.sinks.found import found_target

    catalog = load_catalog(settings)
    for t in masking:  # every target the connector's hashes reach was made with this key
        found = found_target(settings, catalog, t)
        check_mask_key(t, found["properties"] if found else {}, key)
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("the masking key is not UTF-8 text, which the connector's MaskColumns takes",
                          hint="use a text key (e.g. `openssl rand -hex 32`), or masking.in_connector: false") from None
    return write_secret(secrets_dir, "masking-key", text)


def source_connector_config(settings: Settings, source: str, tables: list[TableRegistration],
                            shown: bool = False) -> dict:
    """The connector config of `source` capturing `tables`, its secrets as references
    (written where the local worker reads them). `shown`: for printing, where nothing is
    written and a secret without a reference is masked."""
    password = (secret_ref(settings, source) or MASK) if shown else connector_secret(settings, source)
    return connector_config(settings, source, tables, password, connector_kafka_secrets(settings, source, shown),
                            connector_mask_key(settings, tables, shown))


def with_others(settings: Settings, source: str, config: dict, previous: dict | None) -> dict:
    """`config` keeping what the connector captures that no registration here names
    (connector.keeping_others), said in a line."""
    ours = {f"{t.source.schema_}.{t.source.table}" for t in loadable(settings) if t.source.name == source}
    config, others = keeping_others(config, previous, ours, settings.sources[source].signal_table)
    if others:
        print(f"connector {connector_name(source)}: keeps capturing {', '.join(others)}, which no registration "
              f"under {settings.tables_dir} names (another deployment's sharing this connector, or a registration "
              f"file deleted by hand or that does not load: `cdc tables remove` takes a table out of capture)")
    return config


def check_plugins(settings: Settings, client: ConnectClient, config: dict) -> None:
    """The worker has the transformation the connector config names (cdc's MaskColumns):
    refused before the config is written, since a connector that cannot load it captures
    nothing."""
    if MASK_CLASS in config.values() and MASK_CLASS not in client.plugins(connectors_only=False):
        raise ConfigError(f"Kafka Connect at {settings.connect_url} does not have cdc's {MASK_CLASS} transformation, "
                          f"which hashes the masked columns before Kafka",
                          hint="copy the directory cdc-transforms (`make setup` builds it into "
                               ".cache/jars/connect-plugins/) under the workers' plugin.path and restart them, or set "
                               "masking.in_connector: false to hash in the jobs only")


def _register_source(settings: Settings, client: ConnectClient, source: str, tables: list[TableRegistration],
                     wait_snapshot: bool) -> None:
    src = settings.sources[source]
    name = connector_name(source)
    previous = client.config(name)
    config = with_others(settings, source, source_connector_config(settings, source, tables), previous)
    check_plugins(settings, client, config)
    catalog = load_catalog(settings)
    kind = module_of(settings, source)
    with kind.connect(settings, source) as conn:
        kind.check_binlog(conn, source)
        kind.ensure_signal_table(conn, src.signal_table)
        partition_roots(settings, kind, conn, source, config)
        ensure_topics(kafka_access(settings), [topic_for(source, t) for t in tables], settings.kafka)
        pending = (iceberg.snapshot_pending(catalog, [t for t in tables if t.sink == "iceberg"])
                   + delta.snapshot_pending(settings, [t for t in tables if t.sink == "delta"]))
        by_debezium = [t for t in pending if t.snapshot == "initial"]
        # Its topics counted before the new config starts a snapshot: what it adds is all it sends.
        progress = SnapshotProgress(settings, kind, conn, by_debezium if wait_snapshot else [])
        down = client.not_running(name)
        client.put_config(name, config)
        _restart(client, name, down)  # what the new config did not restart already
        try:
            client.wait_task_config(name, "table.include.list", config["table.include.list"])
            client.wait_running(name)
            if previous is not None:  # it captured before: it must capture still
                client.wait_captured(name, kind.write_marker(conn, src.signal_table), timeout_s=CAPTURE_CHECK_S)
        except ConnectorError as e:
            if previous is None or down:
                raise
            _roll_back(settings, client, kind, conn, source, previous, e)
        if wait_snapshot:  # the connector's initial snapshot (of the tables that take one)
            client.wait_streaming(name, timeout_s=SNAPSHOT_WAIT_S, tick=progress.tick if previous is None else None)
        if previous is not None and by_debezium:  # its initial snapshot is behind it: fill these incrementally
            names = sorted(f"{t.source.schema_}.{t.source.table}" for t in by_debezium)
            print(f"connector {name}: incremental snapshot of {', '.join(names)}")
            marker = kind.request_incremental_snapshot(conn, src.signal_table, names)
            if wait_snapshot:
                client.wait_captured(name, marker)
                client.wait_incremental_snapshot(name, timeout_s=SNAPSHOT_WAIT_S, tick=progress.tick)
        if wait_snapshot and (missed := progress.silent(kind, conn)):
            raise ConnectorError(f"connector {name}: the snapshot of {', '.join(t.name for t in missed)} is over and "
                                 f"none of its rows reached Kafka, though the table has rows",
                                 hint="see the Connect worker's log (`cdc stack status` names it); `cdc register "
                                      "--table NAME` asks for the snapshot again")
        for t in pending:
            how = t.snapshot if t.snapshot != "initial" else "incremental" if previous is not None else "initial"
            if t.sink == "delta":
                delta.mark_snapshotted(settings, t, how)
            else:
                iceberg.mark_snapshotted(catalog, t, how, settings)
    if by_debezium and wait_snapshot:
        progress.tick(last=True)
    print(f"connector {name}: running, capturing {len(tables)} table(s)"
          + (f"; the snapshot of {len(by_debezium)} table(s) goes on in the connector (`cdc run` applies it as "
             f"it arrives)" if by_debezium and not wait_snapshot else ""))
    for t in pending:
        if t.snapshot == "jdbc":
            print(f"{t.name}: next, `cdc bootstrap --table {t.name}` reads its rows (its job waits for it)")
        elif t.snapshot == "never":
            print(f"{t.name}: no snapshot (snapshot: never): only the changes made from now on reach the target")


SNAPSHOT_WAIT_S = 6 * 3600  # how long `register` waits for Debezium's snapshot (--no-wait: not at all)
PROGRESS_EVERY_S = 10  # how often `register` shows the snapshot's progress


class SnapshotProgress:
    """While `register` waits for Debezium's snapshot: every PROGRESS_EVERY_S, the records
    the snapshotted tables' topics gained against their estimated rows."""

    def __init__(self, settings: Settings, kind, conn, tables: list[TableRegistration], clock=time.monotonic):
        self.settings, self.clock, self.tables = settings, clock, tables
        self.topics = sorted({topic_for(t.source.name, t) for t in tables})
        self.estimate = sum(kind.estimate_rows(conn, t) for t in tables)
        self.base_by_topic = self._by_topic() if tables else {}
        self.base = sum(self.base_by_topic.values())
        self.started = self.shown = clock()
        self.name = tables[0].name if len(tables) == 1 else f"{len(tables)} tables"

    def _by_topic(self) -> dict[str, int]:
        """Each topic's records (the sum of its partitions' high watermarks)."""
        return {topic: sum(hi for _, hi in watermarks(kafka_access(self.settings), topic).values())
                for topic in self.topics}

    def _records(self) -> int:
        return sum(self._by_topic().values())

    def silent(self, kind, conn) -> list[TableRegistration]:
        """The tables whose snapshot is over and whose topic gained no record, though the
        table has a row: a snapshot the connector never took."""
        now = self._by_topic() if self.tables else {}
        return [t for t in self.tables
                if now[topic_for(t.source.name, t)] <= self.base_by_topic[topic_for(t.source.name, t)]
                and kind.has_rows(conn, t)]

    def tick(self, last: bool = False) -> None:
        if not self.topics or not (last or self.clock() - self.shown >= PROGRESS_EVERY_S):
            return
        self.shown = self.clock()
        try:
            rows = max(0, self._records() - self.base)
        except CdcError:
            return  # the line waits; the snapshot goes on
        elapsed = max(self.clock() - self.started, 1e-9)
        share = min(1.0, rows / max(self.estimate, 1))
        log(f"snapshot: [{'#' * int(share * 30):<30}] {rows:,} of about {self.estimate:,} rows in Kafka, "
            f"{rows / elapsed:,.0f} rows/s", table=self.name, event="progress", stream=sys.stdout, rows=rows,
            estimate=self.estimate)


CAPTURE_CHECK_S = 60.0  # how long an updated connector may take to capture a marker before it is rolled back


def _roll_back(settings: Settings, client: ConnectClient, kind, conn, source: str, previous: dict,
               cause: ConnectorError) -> None:
    """The connector's previous configuration put back, once the new one stopped its
    capture (Debezium retries such an error for ever, capturing nothing for every table of
    the source); raises with what went wrong, after checking the old tables flow again."""
    name = connector_name(source)
    why = retrying_cause(settings, source) or cause.message
    client.put_config(name, previous)
    client.restart_failed(name)  # a task the new configuration failed shows FAILED until restarted
    try:
        client.wait_task_config(name, "table.include.list", previous.get("table.include.list", ""))
        client.wait_running(name)
        client.wait_captured(name, kind.write_marker(conn, settings.sources[source].signal_table),
                             timeout_s=CAPTURE_CHECK_S)
    except ConnectorError as e:
        raise ConnectorError(f"connector {name} stopped capturing with the new configuration ({why}), and its "
                             f"previous configuration, put back, does not capture either: {e.message}",
                             hint="see the Connect worker's log; `cdc status` shows the source's capture") from None
    raise ConnectorError(f"connector {name} stopped capturing with the new configuration: {why}; its previous "
                         f"configuration is back and the tables it captured flow again",
                         hint="fix the cause at the source, then run `cdc register` again")


def _restart(client: ConnectClient, name: str, down: list[dict]) -> None:
    """Restart the connector's failed parts and resume its paused ones, saying what was down."""
    client.restart_failed(name)
    for was in down:
        cause = task_error(was.get("trace"))[1]
        what = f"connector {name}" + ("" if was["id"] == "connector" else f" task {was['id']}")
        print(f"{what} was {was['state']}" + (f" ({cause[:200]})" if cause else "")
              + ("; resumed" if was["state"] != "FAILED" else "; restarted"))


RESTART_WAIT_S = 60.0  # how long `capture restart` waits for restarted tasks to run or fail again
SETTLE_S = 10.0  # how long they must keep running to count as capturing (a record that cannot be sent
#                 fails its task about 5 s after the first try)


def restart_capture(settings: Settings, source: str | None = None) -> None:
    """`cdc capture restart`: each source's failed connector and tasks restarted and paused
    ones resumed (once the cause is fixed), then their fresh state; raises when a source
    still does not capture."""
    if source is not None and source not in settings.sources:
        raise ConfigError(f"source {source!r} is not in cdc.yaml",
                          hint=f"sources: {', '.join(sorted(settings.sources))}")
    sources = [source] if source else sorted({t.source.name for t in load_tables(settings)})
    client = ConnectClient.of(settings)
    captures = []
    for name in sources:
        connector = connector_name(name)
        if client.status(connector) is None:
            raise ConnectorError(f"connector {connector} of source {name} is not in Kafka Connect",
                                 hint="run `cdc register` to create it")
        down = client.not_running(connector)
        _restart(client, connector, down)
        if not down:
            print(f"connector {connector}: nothing to restart")
        captures.append(_settled(settings, client, name))
    for line in format_text(captures):
        print(line)
    stopped = [c for c in captures if not c["capturing"]]
    if stopped:
        raise ConnectorError("; ".join(f"source {c['source']} is not capturing: {c['reason']}" for c in stopped),
                             hint="fix the cause shown, then run `cdc capture restart` again")


def _settled(settings: Settings, client: ConnectClient, source: str) -> dict:
    """The source's capture once its tasks have run for SETTLE_S or one has failed again
    (or after RESTART_WAIT_S)."""
    running_since, found = None, {}

    def settled() -> bool:
        nonlocal running_since, found
        found = source_capture(settings, source, client)
        now = time.monotonic()
        running_since = (running_since or now) if found["capturing"] else None
        return bool({found["state"], *(t["state"] for t in found["tasks"])} & set(DOWN)) or \
            bool(running_since and now - running_since >= SETTLE_S)

    poll_until(settled, RESTART_WAIT_S)
    return found
