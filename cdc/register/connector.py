"""Debezium connectors managed through Kafka Connect's REST API."""
from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path

import requests

from cdc.config.clients import HttpClient, http_client, java_kafka_properties
from cdc.config.models import CONNECTOR_TEMPLATES, MIB, Settings, TableRegistration
from cdc.errors import ConfigError, ConnectorError, DependencyError
from cdc.sources.mariadb import heartbeat_query
from cdc.sources.postgres import publication_name, slot_name
from cdc.waiting import poll_until

AVRO_CONVERTER = "avro-converter.json"  # the converter keys of a source with `format: avro`
DOWN = ("FAILED", "PAUSED", "STOPPED")  # connector and task states that capture nothing


def connector_name(source: str) -> str:
    return f"cdc-{source}"


def topic_for(source: str, reg: TableRegistration) -> str:
    """Debezium's topic of a table: <topic.prefix>.<schema>.<table>, prefix = source name."""
    return f"{source}.{reg.source.schema_}.{reg.source.table}"


def transaction_topic(source: str) -> str:
    """Debezium's topic of a source's transactions: a BEGIN and an END per transaction, the END
    with its event count per table (`provide.transaction.metadata`)."""
    return f"{source}.transaction"


def server_id(source: str) -> int:
    """A stable replica server id for a MariaDB source's connector (5400-6399)."""
    import zlib

    return 5400 + zlib.crc32(source.encode()) % 1000


def read_template(settings: Settings, name: str) -> dict:
    """A connector template of `debezium_dir` (default: the ones cdc ships), unfilled."""
    path = settings.connector_templates / name
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"connector template {path} does not exist",
                          hint=f"copy {name} from {CONNECTOR_TEMPLATES} into debezium_dir, "
                               f"or remove debezium_dir from cdc.yaml") from None


def connector_config(settings: Settings, source: str, tables: list[TableRegistration], password_ref: str,
                     kafka_secrets: dict[str, str] | None = None, mask_key_ref: str | None = None) -> dict:
    """The connector config from the template <kind>-connector.json, filled in.
    `kafka_secrets` (password, keystore_password): what a MariaDB connector's schema
    history clients carry for the Kafka secrets (references; unset: the secrets).
    `mask_key_ref`: the masking key's reference, when the connector masks (`protection_config`)."""
    src = settings.sources[source]
    include = ",".join(sorted({f"{t.source.schema_}.{t.source.table}" for t in tables} | {src.signal_table}))
    values = {
        "host": src.connector_host or src.host, "port": str(src.connector_port or src.port), "user": src.user,
        "password": password_ref, "database": src.database, "topic_prefix": source,
        "table_include_list": include, "signal_table": src.signal_table,
    }
    if src.kind == "mariadb":
        template = "mariadb-connector.json"
        values.update(server_id=str(src.server_id or server_id(source)), kafka_bootstrap=settings.kafka_bootstrap,
                      heartbeat_action_query=heartbeat_query(src.signal_table),
                      database_include_list=",".join(sorted({i.split(".")[0] for i in include.split(",")})))
    else:
        template = "postgres-connector.json"
        values.update(slot_name=slot_name(settings, source),
                      publication_name=publication_name(settings, source))
    doc = read_template(settings, template)
    if src.format == "avro":  # the converter keys of the template, replaced
        doc = {k: v for k, v in doc.items() if not k.startswith(("key.converter", "value.converter"))}
        doc.update(read_template(settings, AVRO_CONVERTER))
        values["registry_url"] = settings.registry_converter_url
    config = {k: v.format(**values) if isinstance(v, str) else v for k, v in doc.items()}
    # Registrations that name their key: Debezium keys those tables' records by it (once for a
    # table several registrations read: `registrar.check_shared_keys` makes them agree).
    explicit = sorted({f"{t.source.schema_}.{t.source.table}:{','.join(t.key)}" for t in tables if t.key})
    if explicit:
        config["message.key.columns"] = ";".join(explicit)
    if src.kind == "mariadb" and settings.kafka.security.protocol != "PLAINTEXT":
        props = java_kafka_properties(settings, **(kafka_secrets or {}))
        for prefix in ("schema.history.internal.producer.", "schema.history.internal.consumer."):
            config.update({prefix + k: v for k, v in props.items()})
    config.update(protection_config(settings, tables, config, mask_key_ref))
    config.update(record_size_config(settings))
    config.update(topic_creation_config(settings))
    config.update(transaction_config(source))
    snapshotted = {f"{t.source.schema_}.{t.source.table}" for t in tables if t.snapshot == "initial"}
    if len(snapshotted) < len(include.split(",")) - 1:  # a table the initial snapshot leaves out
        config["snapshot.include.collection.list"] = ",".join(sorted(snapshotted | {src.signal_table}))
    return config


def keeping_others(config: dict, previous: dict | None, ours: set[str], signal_table: str) -> tuple[dict, list[str]]:
    """`config` with the tables `previous` (the connector's config now) captures that no
    registration here names kept in it, with their key columns, excluded and masked columns,
    snapshot and database entries: another deployment's (a cdc.yaml with other tables_dir
    on the same source and Connect shares the connector), or a registration file deleted by
    hand. Only `cdc tables remove` takes a table out of capture. Returns the config and
    those tables. `ours`: schema.table of every registration here of the source."""
    previous = previous or {}
    before = {t for t in previous.get("table.include.list", "").split(",") if t} - {signal_table}
    others = sorted(before - ours)
    if not others:
        return config, []
    out = dict(config)

    def union(key: str, sep: str, table_of) -> None:
        kept = {e for e in previous.get(key, "").split(sep) if e and table_of(e) in others}
        mine = {e for e in config.get(key, "").split(sep) if e}
        if kept:
            out[key] = sep.join(sorted(mine | kept))

    def column_table(entry: str) -> str:  # schema.table.column, maybe regex-escaped
        return re.sub(r"\\(.)", r"\1", entry).rsplit(".", 1)[0]

    out["table.include.list"] = ",".join(sorted(set(config["table.include.list"].split(",")) | set(others)))
    union("message.key.columns", ";", lambda e: e.split(":", 1)[0])
    union("column.exclude.list", ",", column_table)
    if "database.include.list" in config:  # MariaDB: the databases of the tables
        out["database.include.list"] = ",".join(sorted(set(config["database.include.list"].split(","))
                                                       | {t.split(".")[0] for t in others}))
    snapshot = "snapshot.include.collection.list"  # absent: every captured table takes the snapshot
    taken = set((config.get(snapshot) or config["table.include.list"]).split(","))
    taken |= {t for t in others if t in (previous.get(snapshot) or previous["table.include.list"]).split(",")}
    if taken != set(out["table.include.list"].split(",")):
        out[snapshot] = ",".join(sorted(taken))
    columns = f"transforms.{MASK_TRANSFORM}.columns"
    masked = [e for e in previous.get(columns, "").split(",") if e and column_table(e) in others]
    if masked:
        key = f"transforms.{MASK_TRANSFORM}.key.password"
        if columns in config and config.get(key) != previous.get(key):
            raise ConfigError(f"connector {config.get('name', '')} masks columns of {', '.join(others)}, which no "
                              f"registration here names, with another masking key than this cdc.yaml's",
                              hint="deployments that share a source's connector share its masking key")
        if columns not in config:
            out.update({k: v for k, v in previous.items() if k.startswith(f"transforms.{MASK_TRANSFORM}.")})
            out["transforms"] = ",".join([MASK_TRANSFORM, *[t for t in config.get("transforms", "").split(",")
                                                            if t and t != MASK_TRANSFORM]])
        else:
            out[columns] = ",".join(sorted(set(config[columns].split(",")) | set(masked)))
    return out, others


MASK_TRANSFORM, MASK_CLASS = "cdcmask", "cdc.connect.MaskColumns"
# A column name the connector settings can carry (their lists are comma-separated, and
# MaskColumns reads schema.table.column); another is protected by the jobs alone.
LISTABLE = re.compile(r"[^,.:\s]+")


def protection_config(settings: Settings, tables: list[TableRegistration], config: dict,
                      mask_key_ref: str | None) -> dict:
    """Registrations' `exclude` columns left out by the connector (`column.exclude.list`),
    and their `mask` columns hashed by it (MaskColumns, first of the transformations), so
    neither reaches Kafka in clear. A source table several registrations read gets what
    they all exclude or mask: the jobs protect the rest."""
    readers: dict[str, list[TableRegistration]] = {}
    for t in tables:
        readers.setdefault(f"{t.source.schema_}.{t.source.table}", []).append(t)

    def common(columns_of) -> list[str]:
        return sorted(f"{table}.{c}" for table, regs in readers.items()
                      for c in set.intersection(*(set(columns_of(r)) for r in regs)) if LISTABLE.fullmatch(c))

    out = {}
    excluded = common(lambda r: r.exclude)
    if excluded:
        out["column.exclude.list"] = ",".join(re.escape(c) for c in excluded)
    masked = common(lambda r: r.mask)
    if masked and settings.masking.in_connector and mask_key_ref:
        out["transforms"] = ",".join([MASK_TRANSFORM, *[t for t in config.get("transforms", "").split(",") if t]])
        out[f"transforms.{MASK_TRANSFORM}.type"] = MASK_CLASS
        out[f"transforms.{MASK_TRANSFORM}.columns"] = ",".join(masked)
        out[f"transforms.{MASK_TRANSFORM}.key.password"] = mask_key_ref
        if "unavailable.value.placeholder" in config:  # a template's own: left as it is
            out[f"transforms.{MASK_TRANSFORM}.unavailable.value.placeholder"] = config["unavailable.value.placeholder"]
    return out


def topic_creation_config(settings: Settings) -> dict:
    """The topics a connector makes itself (its heartbeat topic; a table's topic made before
    `register` could) are made as `kafka.topics` says, like those `register` makes."""
    shape = settings.kafka.topics
    return {"topic.creation.default.partitions": str(shape.partitions),
            "topic.creation.default.replication.factor": str(shape.replication_factor),
            "topic.creation.default.cleanup.policy": "delete",
            "topic.creation.default.retention.ms": str(shape.retention_ms)}


def transaction_config(source: str) -> dict:
    """Every change names its source transaction and its order in it, and each transaction's
    END, on one partition so that transactions stay in commit order, gives its event count per
    table: what a consistent cut across the source's tables is read from."""
    return {"provide.transaction.metadata": "true",
            "topic.creation.groups": "transactions",
            "topic.creation.transactions.include": re.escape(transaction_topic(source)),
            "topic.creation.transactions.partitions": "1"}


def record_size_config(settings: Settings) -> dict:
    """The connector's producer takes change records up to `kafka.max_record_bytes`,
    compressed, and the topics it creates accept them (a record must also fit the
    producer's buffer)."""
    limit = settings.kafka.max_record_bytes
    return {"producer.override.max.request.size": str(limit),
            "producer.override.buffer.memory": str(max(32 * MIB, 2 * limit)),
            "producer.override.compression.type": settings.kafka.compression,
            "topic.creation.default.max.message.bytes": str(limit)}


class ConnectClient:
    def __init__(self, url: str, timeout_s: float = 30, http: HttpClient = HttpClient()):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.http = http

    @classmethod
    def of(cls, settings: Settings, timeout_s: float = 30) -> "ConnectClient":
        """The client of `connect.url` with its credentials and TLS trust."""
        return cls(settings.connect_url, timeout_s, http_client(settings, settings.connect, "connect"))

    def _call(self, method: str, path: str, **kw) -> requests.Response:
        try:
            r = requests.request(method, f"{self.url}{path}", timeout=self.timeout_s, auth=self.http.auth,
                                 verify=self.http.verify, **kw)
        except requests.RequestException as e:
            raise DependencyError(f"Kafka Connect at {self.url} is unreachable: {e}",
                                 hint="start it (`cdc stack up`) or set connect.url in cdc.yaml") from None
        if r.status_code in (401, 403):
            raise ConfigError(f"Kafka Connect at {self.url} refused cdc's credentials (HTTP {r.status_code})",
                              hint="check connect.username and connect.password (or password_file) in cdc.yaml")
        return r

    def put_config(self, name: str, config: dict) -> None:
        r = self._call("PUT", f"/connectors/{name}/config", json=config)
        if not r.ok:
            raise ConnectorError(f"Kafka Connect refused connector {name}: HTTP {r.status_code} {r.text[:2000]}")

    def config(self, name: str) -> dict | None:
        r = self._call("GET", f"/connectors/{name}/config")
        return r.json() if r.ok else None

    def task_configs(self, name: str) -> list[dict]:
        r = self._call("GET", f"/connectors/{name}/tasks")
        return [t.get("config", {}) for t in r.json()] if r.ok else []

    def status(self, name: str) -> dict | None:
        r = self._call("GET", f"/connectors/{name}/status")
        return r.json() if r.ok else None

    def plugins(self, connectors_only: bool = True) -> set[str]:
        """The classes of the connector plugins the worker has installed (and of its
        transformations, converters and predicates, with `connectors_only` false)."""
        r = self._call("GET", "/connector-plugins" + ("" if connectors_only else "?connectorsOnly=false"))
        if not r.ok:
            raise ConnectorError(f"Kafka Connect at {self.url} answered HTTP {r.status_code} for /connector-plugins",
                                 hint="see the Connect worker's log (`cdc stack status` names it)")
        return {p.get("class") for p in r.json()}

    def partition_offsets(self, name: str) -> list[dict]:
        """The connector's committed source offsets, each with its `partition` and `offset`."""
        r = self._call("GET", f"/connectors/{name}/offsets")
        if not r.ok:
            raise ConnectorError(f"Kafka Connect answered HTTP {r.status_code} for the offsets of connector {name}")
        return r.json().get("offsets", [])

    def alter_offsets(self, name: str, offsets: list[dict]) -> None:
        """Set the stopped connector's committed offsets (each a `partition` and `offset`)."""
        r = self._call("PATCH", f"/connectors/{name}/offsets", json={"offsets": offsets})
        if not r.ok:
            raise ConnectorError(f"Kafka Connect refused to alter the offsets of connector {name}: "
                                 f"HTTP {r.status_code} {r.text[:1000]}")

    def stop(self, name: str, timeout_s: float = 60) -> bool:
        """Stop the connector (its tasks end; its config and offsets stay) and wait until it
        is STOPPED; False when there is no such connector."""
        r = self._call("PUT", f"/connectors/{name}/stop")
        if r.status_code == 404:
            return False
        if not r.ok:
            raise ConnectorError(f"Kafka Connect refused to stop connector {name}: HTTP {r.status_code} {r.text}")
        self._wait(name, "not stopped", lambda: (self.status(name) or {}).get("connector", {}).get("state")
                   == "STOPPED", timeout_s, failed_raises=False)  # a failed task is what a stop ends
        return True

    def resume(self, name: str) -> None:
        self._call("PUT", f"/connectors/{name}/resume")

    def offsets(self, name: str) -> list[dict]:
        """The connector's committed source offsets (the `offset` part of each partition)."""
        r = self._call("GET", f"/connectors/{name}/offsets")
        return [o.get("offset") or {} for o in r.json().get("offsets", [])] if r.ok else []

    def not_running(self, name: str) -> list[dict]:
        """The connector (id `connector`) and tasks that are failed, paused or stopped, each
        with its id, state and trace."""
        found = self.status(name) or {}
        down = [{"id": "connector", **found["connector"]}] if found.get("connector", {}).get("state") in DOWN else []
        return down + [t for t in found.get("tasks", []) if t.get("state") in DOWN]

    def restart_failed(self, name: str, timeout_s: float = 30) -> None:
        """Restart the connector and tasks that failed (once the cause is fixed: an outage
        of Kafka or the source, a record over the size limit) and resume a paused or stopped
        connector; return once Connect has taken the request (its state then shows no old
        failure), or after `timeout_s` (a task that fails again is reported by the waits)."""
        down = self.not_running(name)
        if not down:
            return
        if any(d["state"] in ("PAUSED", "STOPPED") for d in down):
            self.resume(name)
        if any(d["state"] == "FAILED" for d in down):
            self._call("POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=true")
        poll_until(lambda: not self.not_running(name), timeout_s, 0.3)

    def delete(self, name: str) -> None:
        r = self._call("DELETE", f"/connectors/{name}")
        if not r.ok and r.status_code != 404:
            raise ConnectorError(f"Kafka Connect refused to delete connector {name}: HTTP {r.status_code} {r.text}")

    def retire(self, name: str, timeout_s: float = 60) -> None:
        """Stop the connector, forget its source offsets and delete it: a connector made
        later under the same name starts afresh (an initial snapshot, not old offsets)."""
        if not self.stop(name, timeout_s):
            return
        r = self._call("DELETE", f"/connectors/{name}/offsets")
        if not r.ok:
            raise ConnectorError(f"Kafka Connect refused to reset the offsets of connector {name}: "
                                 f"HTTP {r.status_code} {r.text}")
        self.delete(name)

    def _wait(self, name: str, what: str, done: Callable[[], bool], timeout_s: float, interval_s: float = 0.3,
              tick: Callable[[], None] | None = None, failed_raises: bool = True) -> None:
        """Poll `done` until it holds (calling `tick` between polls); a failed task raises at
        once with its trace (unless not `failed_raises`)."""
        def between() -> None:
            if tick is not None:
                tick()
            for t in (self.status(name) or {}).get("tasks", []) if failed_raises else []:
                if t.get("state") == "FAILED":
                    raise ConnectorError(f"connector {name} task {t.get('id')} failed:\n{t.get('trace', '')[:3000]}")

        if not poll_until(done, timeout_s, interval_s, between=between):
            raise ConnectorError(f"connector {name}: {what} after {timeout_s:.0f}s; "
                                 f"committed offsets: {self.offsets(name)}",
                                 hint="see the Connect worker's log (`cdc stack status` names it)")

    def wait_task_config(self, name: str, key: str, value: str, timeout_s: float = 120) -> None:
        """Until the connector's tasks run with `key` = `value` (a config change restarts them)."""
        def done() -> bool:
            tasks = self.task_configs(name)
            return bool(tasks) and all(t.get(key) == value for t in tasks)
        self._wait(name, f"tasks have not picked up {key}={value}", done, timeout_s)

    def wait_running(self, name: str, timeout_s: float = 120) -> None:
        """Until the connector and all its tasks run."""
        def done() -> bool:
            st = self.status(name) or {}
            tasks = st.get("tasks", [])
            return st.get("connector", {}).get("state") == "RUNNING" and bool(tasks) and \
                all(t.get("state") == "RUNNING" for t in tasks)
        self._wait(name, "not running", done, timeout_s)

    def wait_streaming(self, name: str, timeout_s: float = 600, tick: Callable[[], None] | None = None) -> None:
        """Until the committed offset shows the initial snapshot finished."""
        def done() -> bool:
            offs = self.offsets(name)
            return bool(offs) and all("snapshot" not in o or o.get("snapshot_completed") for o in offs)
        self._wait(name, "initial snapshot not finished", done, timeout_s, tick=tick)

    def wait_incremental_snapshot(self, name: str, timeout_s: float = 1800,
                                  tick: Callable[[], None] | None = None) -> None:
        """Until no incremental snapshot is in progress in the committed offset."""
        def done() -> bool:
            return not any(k.startswith("incremental_snapshot") for o in self.offsets(name) for k in o)
        self._wait(name, "incremental snapshot still running", done, timeout_s, tick=tick)

    def wait_captured(self, name: str, marker, timeout_s: float = 120) -> None:
        """Until the committed offset is past source transaction `marker` (a source
        module's marker): every change of that transaction is then in Kafka."""
        def done() -> bool:
            return marker.captured_by(self.offsets(name))
        self._wait(name, f"transaction {marker} not captured", done, timeout_s, interval_s=0.2)


def write_secret(dir_: Path, source: str, value: str) -> str:
    """Store a connector secret in a file the local Connect worker reads through its
    FileConfigProvider; return the reference to put in the connector config."""
    dir_.mkdir(parents=True, exist_ok=True)
    path = dir_ / f"{source}.properties"
    escaped = (value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
               .replace("\t", "\\t"))
    # \uXXXX (UTF-16 units) for anything beyond ASCII: read the same in any encoding
    escaped = "".join(c if ord(c) < 128 else "".join(f"\\u{u:04x}" for u in struct.unpack(
        f">{len(c.encode('utf-16-be')) // 2}H", c.encode("utf-16-be"))) for c in escaped)
    if escaped.startswith(" "):
        escaped = "\\" + escaped  # a leading blank would be taken as separator whitespace
    path.write_text("password=" + escaped + "\n")
    path.chmod(0o600)
    return secret_file_ref(dir_, source)


def secret_file_ref(dir_: Path, source: str) -> str:
    """The config provider reference to the secret `write_secret` stores for `source`."""
    return f"${{file:{dir_ / f'{source}.properties'}:password}}"
