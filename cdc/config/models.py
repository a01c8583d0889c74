"""Frozen configuration models. Defaults live here and nowhere else."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TOPIC_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def check_identifier(value: str, what: str) -> str:
    """Identifiers from configuration reach SQL; accept only plain ones."""
    if not IDENTIFIER.match(value or ""):
        raise ValueError(f"{what} {value!r} is not a plain identifier (letters, digits, underscore; "
                         f"not starting with a digit)")
    return value


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StackSettings(Frozen):
    """The local services `cdc stack up` runs: ports, heaps and the state directory."""

    state_dir: Path = Path(".state")
    kafka_port: int = Field(19092, ge=1, le=65535)
    kafka_controller_port: int = Field(19093, ge=1, le=65535)
    connect_port: int = Field(18083, ge=1, le=65535)
    postgres_port: int = Field(15432, ge=1, le=65535)
    # MariaDB runs only when a port is set (a MariaDB source on the local stack).
    mariadb_port: int | None = Field(None, ge=1, le=65535)
    # The schema registry runs only when a port is set (a source with `format: avro`).
    registry_port: int | None = Field(None, ge=1, le=65535)
    kafka_heap: str = "512m"
    connect_heap: str = "768m"
    registry_heap: str = "384m"
    # A second listener of the broker, SASL_SSL with SCRAM-SHA-512 and a certificate made
    # at `stack up`; the Connect worker then reaches Kafka through it. None: none.
    kafka_sasl_port: int | None = Field(None, ge=1, le=65535)
    start_timeout_s: int = Field(180, ge=5)


MIB = 1024 * 1024


class TopicSettings(Frozen):
    """How the table topics are made (by `cdc register`, and by the connectors for their own
    topics): set when a topic is created; an existing topic's retention is raised to this."""

    partitions: int = Field(1, ge=1, le=10000)  # a key's changes stay on one partition
    replication_factor: int = Field(-1, ge=-1, le=32)  # -1: the broker's default.replication.factor
    # How long Kafka keeps a change record. None: for ever, so a table's first run (which
    # reads its snapshot from the topic's earliest record) and `replay --from-earliest`
    # always find every change; `cdc register` warns below a table's delete_horizon_hours.
    retention_hours: int | None = Field(None, ge=1)

    @field_validator("replication_factor")
    @classmethod
    def _factor(cls, v: int) -> int:
        if v == 0:
            raise ValueError("replication_factor is -1 (the broker's default) or at least 1")
        return v

    @property
    def retention_ms(self) -> int:
        return -1 if self.retention_hours is None else self.retention_hours * 3_600_000


class KafkaSecurity(Frozen):
    """How every Kafka client of cdc connects (admin and consumers, Spark's Kafka source,
    the MariaDB connector's schema history): the protocol, SASL and TLS. Secrets come from
    the environment (`password: ${KAFKA_PASSWORD}`) or files, never from this file."""

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    username: str | None = None  # SASL user; OAUTHBEARER: the OAuth client id
    password: SecretStr | None = None  # SASL password; OAUTHBEARER: the OAuth client secret
    password_file: Path | None = None
    token_endpoint_url: str | None = None  # OAUTHBEARER: the identity provider's token endpoint
    scope: str | None = None  # OAUTHBEARER: the scope asked for, if the provider wants one
    ca_file: Path | None = None  # TLS: the CA certificate(s) (PEM) the brokers' certificates are checked against
    keystore_file: Path | None = None  # TLS client authentication: a PKCS#12 file with the key and certificate
    keystore_password: SecretStr | None = None
    keystore_password_file: Path | None = None
    # What connector configs (the MariaDB connector's schema history clients) carry in
    # place of the SASL password, for a Connect cluster with a config provider, e.g.
    # "${file:/etc/kafka/secrets.properties:sasl_password}". Unset: the local worker reads
    # a secrets file cdc writes; a remote one gets the password, with a warning.
    connector_password_ref: str | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    @model_validator(mode="after")
    def _consistent(self) -> "KafkaSecurity":
        given = self.model_fields_set
        if self.sasl:
            if self.sasl_mechanism is None:
                raise ValueError(f"protocol {self.protocol} needs sasl_mechanism: PLAIN, SCRAM-SHA-256, "
                                 f"SCRAM-SHA-512 or OAUTHBEARER")
            if not self.username:
                raise ValueError(f"sasl_mechanism {self.sasl_mechanism} needs username"
                                 + (" (the OAuth client id)" if self.sasl_mechanism == "OAUTHBEARER" else ""))
            if self.password is None and self.password_file is None:
                raise ValueError("SASL needs password: ${ENV_NAME} or password_file: PATH")
            if self.sasl_mechanism == "OAUTHBEARER" and not self.token_endpoint_url:
                raise ValueError("sasl_mechanism OAUTHBEARER needs token_endpoint_url")
        else:
            extra = [k for k in ("sasl_mechanism", "username", "password", "password_file", "token_endpoint_url",
                                 "scope", "connector_password_ref") if k in given]
            if extra:
                raise ValueError(f"{', '.join(extra)}: only with protocol SASL_SSL or SASL_PLAINTEXT "
                                 f"(protocol is {self.protocol})")
        if not self.tls:
            extra = [k for k in ("ca_file", "keystore_file", "keystore_password", "keystore_password_file")
                     if k in given]
            if extra:
                raise ValueError(f"{', '.join(extra)}: only with protocol SSL or SASL_SSL (protocol is {self.protocol})")
        if (self.keystore_password is not None or self.keystore_password_file is not None) \
                and self.keystore_file is None:
            raise ValueError("keystore_password without keystore_file")
        return self


class KafkaSettings(Frozen):
    bootstrap_servers: str | None = None  # None: the local stack's broker
    security: KafkaSecurity = KafkaSecurity()
    topics: TopicSettings = TopicSettings()
    # The largest change record (one row's event, as serialized) that capture carries: the
    # stack's broker, the topics cdc creates, the connectors' producers and the jobs'
    # consumers accept records up to this size. A larger row stops its source's capture,
    # and `cdc status` names it with this setting.
    max_record_bytes: int = Field(32 * MIB, ge=MIB, le=1024 * MIB)
    # How the connectors' producers compress change records on their way to Kafka.
    compression: Literal["zstd", "lz4", "snappy", "gzip", "none"] = "zstd"


class HttpAccess(Frozen):
    """Credentials and TLS trust of an HTTP service (Kafka Connect's REST API, the schema
    registry): basic auth with the password from the environment or a file."""

    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    ca_file: Path | None = None  # the CA certificate(s) (PEM) of an https URL; unset: the system's

    @model_validator(mode="after")
    def _paired(self) -> "HttpAccess":
        has_password = self.password is not None or self.password_file is not None
        if bool(self.username) != has_password:
            raise ValueError("basic auth needs both username and password (or password_file)")
        return self


class ConnectSettings(HttpAccess):
    url: str | None = None  # None: the local stack's Connect REST API


# The local stack's registry (Apicurio): its Confluent-compatible API and its own.
REGISTRY_CONFLUENT_API, REGISTRY_NATIVE_API = "/apis/ccompat/v7", "/apis/registry/v2"
# The Debezium connector templates cdc ships (package data): the default of `debezium_dir`.
CONNECTOR_TEMPLATES = Path(__file__).resolve().parents[1] / "register" / "templates"


class SchemaRegistrySettings(HttpAccess):
    """The Confluent-compatible schema registry of sources with `format: avro`. Unset: the
    local stack's (`stack.registry_port`)."""

    url: str | None = None  # its Confluent-compatible API, where cdc reads writer schemas by id
    # What the converter template (avro-converter.json) gets as {registry_url}:
    # for the local stack's Apicurio registry, its native API; for a Confluent registry, `url`.
    converter_url: str | None = None


class SourceSettings(Frozen):
    """A source database Debezium captures (PostgreSQL or MariaDB). The password comes from
    the environment (`password: ${PGPASSWORD}`) or a file (`password_file`), never from
    this file."""

    kind: Literal["postgresql", "mariadb"] = "postgresql"
    # How the connector writes change events: JSON with schemas, or Confluent's Avro wire
    # format through the schema registry (the connector template avro-converter.json).
    format: Literal["json", "avro"] = "json"
    host: str = "127.0.0.1"
    port: int = Field(5432, ge=1, le=65535)
    # The database as Kafka Connect reaches it, when that differs (containers, proxies).
    connector_host: str | None = None
    connector_port: int | None = Field(None, ge=1, le=65535)
    database: str
    user: str
    password: SecretStr | None = None
    password_file: Path | None = None
    # What the connector config holds instead of the password, for a Connect cluster with
    # a config provider, e.g. "${file:/etc/kafka/secrets.properties:pg_password}". Unset:
    # the local worker reads a secrets file cdc writes; a remote one gets the password.
    connector_password_ref: str | None = None
    slot_name: str | None = None  # PostgreSQL; default: cdc_<source name>
    publication_name: str | None = None  # PostgreSQL; default: cdc_<source name>
    # PostgreSQL: `cdc status` warns (and `status --check` exits non-zero) when the slot is
    # inactive and holds more WAL than this: nothing reads it while the database's disk fills.
    slot_wal_warn_mb: int = Field(1024, ge=1)
    # MariaDB: the replica server id the connector reads the binary log as; unique among
    # the server's replicas. Default: derived from the source name (5400-6399).
    server_id: int | None = Field(None, ge=1, le=4294967295)
    # Debezium's signal table (schema.table; for MariaDB database.table): cdc asks it for
    # incremental snapshots of tables registered after the connector's initial snapshot.
    # Default: public.cdc_signal (PostgreSQL), <database>.cdc_signal (MariaDB).
    signal_table: str | None = None

    @field_validator("database", "user")
    @classmethod
    def _plain(cls, v: str, info) -> str:
        return check_identifier(v, info.field_name)

    @field_validator("signal_table")
    @classmethod
    def _signal(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = v.split(".")
        if len(parts) != 2:
            raise ValueError(f"signal_table {v!r} must be <schema>.<table>")
        for part in parts:
            check_identifier(part, "signal_table part")
        return v

    @model_validator(mode="after")
    def _defaults(self) -> "SourceSettings":
        if self.signal_table is None:
            default = f"{self.database}.cdc_signal" if self.kind == "mariadb" else "public.cdc_signal"
            object.__setattr__(self, "signal_table", default)
        return self


# Catalog properties cdc sets from the catalog's own keys: `properties` may not repeat them.
CATALOG_OWN_PROPERTIES = ("name", "type", "catalog-impl", "uri", "warehouse", "credential", "token")
# Properties whose value is a secret (s3.secret-access-key, ...): masked wherever cdc shows them.
SECRET_PROPERTY = re.compile(r"secret|password|token|credential", re.IGNORECASE)
URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class CatalogSettings(Frozen):
    """The Iceberg catalog, opened by Spark (SparkCatalog) and by pyiceberg under the same
    name. `sqlite`: Iceberg's JDBC catalog on a SQLite file, which pyiceberg's SqlCatalog
    opens too (schema version V1 on both sides), the warehouse a local path. `rest`: an
    Iceberg REST catalog at `uri`, the warehouse a URI (s3://bucket/prefix) or a path, and
    `properties` (Iceberg catalog properties such as io-impl and s3.*) for both engines;
    `credential` and `token` come from the environment (`${ENV}`), never from this file."""

    name: str = "lake"
    type: Literal["sqlite", "rest"] = "sqlite"
    path: Path = Path(".state/iceberg/catalog.db")  # sqlite: the catalog's SQLite file
    # sqlite: a local directory (a Path once validated; default .state/iceberg/warehouse).
    # rest: what the catalog is given as `warehouse` (a URI or a path); unset: its default.
    warehouse: Path | str | None = None
    uri: str | None = None  # rest: the catalog's base URL, as the driver and executors reach it
    credential: SecretStr | None = None  # rest: OAuth2 client credentials, "<client_id>:<client_secret>"
    token: SecretStr | None = None  # rest: a bearer token
    properties: dict[str, str] = {}  # rest: further catalog properties, str -> str
    # The Iceberg format of targets: 3 keeps one deletion vector per data file, so a batch's
    # MERGE does not read more delete files with every batch before it; 2 for readers
    # without format v3 (a target is created at 2 and raised by its job's first start).
    format_version: Literal[2, 3] = 3

    @field_validator("name")
    @classmethod
    def _plain(cls, v: str) -> str:
        return check_identifier(v, "catalog name")

    @field_validator("uri")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"uri {v!r} is not an http(s) URL: give the REST catalog's base URL, "
                             f"e.g. http://127.0.0.1:18181")
        return v.rstrip("/") if v else v

    @field_validator("properties", mode="before")
    @classmethod
    def _properties(cls, v):
        """YAML scalars become the strings Iceberg expects (true -> "true"); anything else,
        and keys cdc sets itself, are refused by name."""
        if not isinstance(v, dict):
            raise ValueError(f"properties must be a mapping of catalog property names to values, "
                             f"found {type(v).__name__}")
        out = {}
        for key, value in v.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"properties: the key {key!r} is not a property name")
            if key in CATALOG_OWN_PROPERTIES:
                raise ValueError(f"properties[{key!r}]: set catalog.{key} instead" if key != "catalog-impl"
                                 else f"properties[{key!r}]: cdc chooses the catalog by catalog.type")
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, (int, float)):
                value = str(value)
            elif not isinstance(value, str):
                shown = "" if SECRET_PROPERTY.search(key) else f" {value!r}"
                raise ValueError(f"properties[{key!r}]: the value{shown} must be a string, number or "
                                 f"boolean, not {type(value).__name__}")
            out[key] = value
        return out

    @model_validator(mode="after")
    def _by_type(self) -> "CatalogSettings":
        given = self.model_fields_set
        if self.type == "sqlite":
            extra = [k for k in ("uri", "credential", "token", "properties") if k in given]
            if extra:
                raise ValueError(f"{', '.join(extra)}: only for type rest (a sqlite catalog takes path and "
                                 f"warehouse): remove {'them' if len(extra) > 1 else 'it'}, or set type: rest")
            warehouse = self.warehouse if self.warehouse is not None else Path(".state/iceberg/warehouse")
            if isinstance(warehouse, str) and URI_SCHEME.match(warehouse):
                raise ValueError(f"warehouse {warehouse!r}: a sqlite catalog's warehouse is a local path; "
                                 f"object storage needs type rest")
            object.__setattr__(self, "warehouse", Path(warehouse))
            return self
        if self.uri is None:
            raise ValueError("uri is required for type rest: the REST catalog's base URL, "
                             "e.g. http://127.0.0.1:18181")
        if "path" in given:
            raise ValueError(f"path {str(self.path)!r}: a rest catalog has no SQLite file: remove it")
        if self.warehouse is not None:
            warehouse = str(self.warehouse).strip()
            if not warehouse:
                raise ValueError("warehouse is empty: give a URI (s3://bucket/prefix) or a path, or remove it")
            object.__setattr__(self, "warehouse", warehouse)
        return self

    def __repr_args__(self):
        for key, value in super().__repr_args__():
            if key == "properties":
                value = {k: "**********" if SECRET_PROPERTY.search(k) else v for k, v in value.items()}
            yield key, value


class MaskingSettings(Frozen):
    """The key of the keyed hash (HMAC-SHA256) that a registration's `mask` columns get:
    from the environment (`key: ${CDC_MASK_KEY}`) or a file (`key_file`), never from this
    file. The same key gives the same hash, so masked values still join and group."""

    key: SecretStr | None = None
    key_file: Path | None = None
    # Text columns are hashed by the connector (cdc's MaskColumns transformation, the same
    # hash), so Kafka and the dead letters never hold their clear values; other masked
    # columns are hashed by the job. false: every masked column is hashed by the job (a
    # Connect cluster without the transformation's jar).
    in_connector: bool = True
    # What a remote Connect cluster's connector config carries for the key: a config
    # provider reference, e.g. "${file:/etc/kafka/secrets.properties:cdc_mask_key}". The
    # local worker reads a secrets file cdc writes.
    connector_key_ref: str | None = None


class DeltaSettings(Frozen):
    """Where the targets of `sink: delta` registrations live: one Delta table per target at
    <root>/<namespace>/<table>, with its delete memory and dead letters beside it."""

    root: Path = Path(".state/delta")

    @field_validator("root", mode="before")
    @classmethod
    def _plain_path(cls, v):
        if "`" in str(v) or URI_SCHEME.match(str(v)):
            raise ValueError(f"root {str(v)!r}: give a local or mounted directory (no URI, no backquote)")
        return v


class SparkSettings(Frozen):
    master: str = "local[2]"
    driver_memory: str = "2g"
    shuffle_partitions: int = Field(4, ge=1)
    checkpoint_dir: Path = Path(".state/checkpoints")
    # How long a job retries (with backoff) while Kafka or the catalog is unreachable
    # before it exits non-zero.
    retry_for_s: int = Field(300, ge=0)
    extra_conf: dict[str, str] = {}


class Settings(Frozen):
    """cdc.yaml. Relative paths are resolved against the file's directory (`root`)."""

    root: Path = Path(".")
    stack: StackSettings = StackSettings()
    kafka: KafkaSettings = KafkaSettings()
    connect: ConnectSettings = ConnectSettings()
    sources: dict[str, SourceSettings] = {}
    schema_registry: SchemaRegistrySettings = SchemaRegistrySettings()
    catalog: CatalogSettings = CatalogSettings()
    delta: DeltaSettings = DeltaSettings()
    spark: SparkSettings = SparkSettings()
    masking: MaskingSettings = MaskingSettings()
    tables_dir: Path = Path("tables")
    jars_dir: Path = Path(".cache/jars")  # filled by `make setup` from jvm/pom.xml
    # Debezium connector templates (<kind>-connector.json, avro-converter.json); unset: the
    # ones cdc ships. A directory given here replaces them all.
    debezium_dir: Path | None = None

    @field_validator("sources")
    @classmethod
    def _source_names(cls, v: dict[str, SourceSettings]) -> dict[str, SourceSettings]:
        for name in v:
            check_identifier(name, "source name")
        return v

    def path(self, p: Path) -> Path:
        """A configured path made absolute against the config's directory."""
        return p if p.is_absolute() else (self.root / p).resolve()

    @property
    def state_dir(self) -> Path:
        return self.path(self.stack.state_dir)

    @property
    def connector_templates(self) -> Path:
        """The directory of the connector templates `register` fills in."""
        return CONNECTOR_TEMPLATES if self.debezium_dir is None else self.path(self.debezium_dir)

    @property
    def kafka_bootstrap(self) -> str:
        return self.kafka.bootstrap_servers or f"127.0.0.1:{self.stack.kafka_port}"

    @property
    def connect_url(self) -> str:
        return (self.connect.url or f"http://127.0.0.1:{self.stack.connect_port}").rstrip("/")

    @property
    def registry_url(self) -> str | None:
        """The schema registry's Confluent-compatible API (None: there is none)."""
        if self.schema_registry.url:
            return self.schema_registry.url.rstrip("/")
        return f"http://127.0.0.1:{self.stack.registry_port}{REGISTRY_CONFLUENT_API}" if self.stack.registry_port else None

    @property
    def registry_converter_url(self) -> str | None:
        if self.schema_registry.converter_url or self.schema_registry.url:
            return (self.schema_registry.converter_url or self.schema_registry.url).rstrip("/")
        return f"http://127.0.0.1:{self.stack.registry_port}{REGISTRY_NATIVE_API}" if self.stack.registry_port else None

    @model_validator(mode="after")
    def _templates_exist(self) -> "Settings":
        if self.debezium_dir is not None and not self.connector_templates.is_dir():
            raise ValueError(f"debezium_dir {str(self.connector_templates)!r} is not a directory: give a directory "
                             f"of connector templates, or remove the key to use the ones cdc ships")
        return self

    @model_validator(mode="after")
    def _registry_for_avro(self) -> "Settings":
        avro = sorted(name for name, s in self.sources.items() if s.format == "avro")
        if avro and self.registry_url is None:
            raise ValueError(f"source(s) {', '.join(avro)} have format avro, which needs a schema registry: set "
                             f"stack.registry_port (the local stack's) or schema_registry.url")
        return self


class SourceRef(Frozen):
    name: str | None = None  # default: the only source in cdc.yaml
    schema_: str = Field(alias="schema")
    table: str

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @field_validator("schema_", "table")
    @classmethod
    def _plain(cls, v: str, info) -> str:
        return check_identifier(v, f"source {info.field_name.rstrip('_')}")


class Partitioning(Frozen):
    """Target layout: rows bucketed by the first key column (0 = unpartitioned)."""

    buckets: int = Field(8, ge=0, le=4096)


class TableOptions(Frozen):
    # A record that cannot be decoded or applied: set aside in <target>__cdc_dead_letters
    # and the job goes on (dlq), or the job stops with nothing of the batch committed (fail).
    on_error: Literal["dlq", "fail"] = "dlq"
    # Micro-batch sizing. A batch takes what Kafka holds, at most max_offsets_per_trigger
    # records (a backlog is caught up in batches of that size, back to back); a continuous
    # job starts one every trigger_interval_s, or, with min_offsets_per_trigger, once that
    # many records wait or max_trigger_delay_s has passed (fewer, larger commits).
    max_offsets_per_trigger: int | None = Field(None, ge=1)
    trigger_interval_s: float = Field(2.0, gt=0, le=3600)
    min_offsets_per_trigger: int | None = Field(None, ge=1)
    max_trigger_delay_s: int = Field(60, ge=1)
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    # How long a deleted key is remembered (by source commit time), so that a late or
    # replayed older change of that key cannot bring the row back.
    delete_horizon_hours: int = Field(168, ge=0)
    # `cdc maintain`: snapshots older than this go (never the newest one with cdc offsets).
    snapshot_retention_hours: int = Field(24, ge=0)


MODES = ("upsert", "history", "soft_delete")
SINKS = ("iceberg", "delta")


class TableRegistration(Frozen):
    """tables/<namespace>.<table>.yaml: one replicated source table."""

    name: str
    source: SourceRef
    key: tuple[str, ...] | None = None  # None: the source's primary key
    target: str | None = None  # default: `name`
    # iceberg: a table of the Iceberg catalog; delta: a Delta Lake table under delta.root.
    sink: Literal["iceberg", "delta"] = "iceberg"
    # upsert: the target holds each key's current row; history: every version of every row
    # with its validity interval (SCD type 2); soft_delete: a deleted row stays, marked.
    mode: Literal["upsert", "history", "soft_delete"] = "upsert"
    exclude: tuple[str, ...] = ()  # source columns that never reach the target
    mask: tuple[str, ...] = ()  # source columns stored as a keyed hash (masking.key in cdc.yaml)
    partitioning: Partitioning = Partitioning()
    options: TableOptions = TableOptions()
    # How the rows the table holds when it is registered reach the target. initial:
    # Debezium snapshots them (the connector's initial snapshot, or an incremental one when
    # the connector runs already); never: they don't, only later changes do; jdbc: `cdc
    # bootstrap` reads them in parallel (a large PostgreSQL table), and the job waits for it.
    snapshot: Literal["initial", "never", "jdbc"] = "initial"
    file: Path | None = Field(None, exclude=True)

    @field_validator("name", "target")
    @classmethod
    def _qualified(cls, v: str | None, info) -> str | None:
        if v is None:
            return v
        parts = v.split(".")
        if len(parts) != 2:
            raise ValueError(f"{info.field_name} {v!r} must be <namespace>.<table>")
        for part in parts:
            check_identifier(part, info.field_name + " part")
        return v

    @field_validator("key")
    @classmethod
    def _key(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None:
            if not v:
                raise ValueError("key must name at least one column, or be omitted")
            for col in v:
                check_identifier(col, "key column")
        return v

    @field_validator("exclude", "mask")
    @classmethod
    def _columns(cls, v: tuple[str, ...], info) -> tuple[str, ...]:
        # Source column names, any the source allows: data, quoted wherever they reach SQL.
        for col in v:
            if not col or "\x00" in col:
                raise ValueError(f"{info.field_name} column {col!r}: give a source column's name")
        return v

    @model_validator(mode="after")
    def _protected_columns(self) -> "TableRegistration":
        both = sorted(set(self.exclude) & set(self.mask))
        if both:
            raise ValueError(f"column(s) {', '.join(both)} are both in exclude and in mask: name each in one")
        keyed = sorted(set(self.key or ()) & (set(self.exclude) | set(self.mask)))
        if keyed:
            raise ValueError(f"key column(s) {', '.join(keyed)} cannot be excluded or masked: the target "
                             f"needs the key in clear to apply changes and to reconcile")
        return self

    @model_validator(mode="after")
    def _default_target(self) -> "TableRegistration":
        if self.target is None:
            object.__setattr__(self, "target", self.name)
        return self

    @property
    def namespace(self) -> str:
        return self.target.split(".")[0]

    @property
    def table(self) -> str:
        return self.target.split(".")[1]
