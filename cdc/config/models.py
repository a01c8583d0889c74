"""Frozen configuration models. Defaults live here and nowhere else, and so do the
descriptions of every key: `python -m cdc.config.reference` turns them into
docs/reference/ and docs/schema/."""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TOPIC_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def check_identifier(value: str, what: str) -> str:
    """Identifiers from configuration reach SQL; accept only plain ones."""
    if not IDENTIFIER.match(value or ""):
        raise ValueError(f"{what} {value!r} is not a plain identifier (letters, digits, underscore; "
                         f"not starting with a digit)")
    return value


def check_key_column(name: str) -> str:
    """A key column is named in the connector's `message.key.columns` and in SQL: a plain
    identifier, whether a registration's `key:` gives it or `cdc tables add` writes it."""
    try:
        return check_identifier(name, "key column")
    except ValueError as e:
        raise ValueError(f"{e}: rename the column at the source, or key the table by other columns "
                         f"(`key:`, `cdc tables add --key COL[,COL...]`)") from None


HOST_NAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
HTTP_URL = re.compile(r"^https?://[^/\s?#]+(/\S*)?$")
MEMORY = re.compile(r"^[0-9]+[kmgtKMGT]?$")  # a JVM memory size: 512m, 2g


def check_host(value: str, what: str) -> str:
    """A host name or IP address (an IPv6 one bare or in brackets), as a client connects to it."""
    try:
        ipaddress.ip_address(value.removeprefix("[").removesuffix("]"))
        return value
    except ValueError:
        pass
    if not HOST_NAME.match(value or ""):
        raise ValueError(f"{what} {value!r} is not a host name or IP address")
    return value


def check_http_url(value: str | None, what: str, example: str) -> str | None:
    """An http(s) URL with a host (unset stays unset)."""
    if value is not None and not HTTP_URL.match(value):
        raise ValueError(f"{what} {value!r} is not an http(s) URL, e.g. {example}")
    return value


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StackSettings(Frozen):
    """The local services `cdc stack up` runs: ports, heaps and the state directory."""

    state_dir: Path = Field(
        Path(".state"),
        description="The directory of the local stack's data and logs, and of the job states and per-table locks "
                    "that `cdc status` reads. With Spark's cluster deploy mode, put it on a mount every driver host "
                    "shares.")
    kafka_port: int = Field(
        19092, ge=1, le=65535,
        description="Port of the local broker's PLAINTEXT listener on 127.0.0.1; `kafka.bootstrap_servers` "
                    "defaults to it.")
    kafka_controller_port: int = Field(
        19093, ge=1, le=65535,
        description="Port of the local broker's KRaft controller listener on 127.0.0.1; only the broker uses it.")
    connect_port: int = Field(
        18083, ge=1, le=65535,
        description="Port of the local Kafka Connect worker's REST API; `connect.url` defaults to it.")
    postgres_port: int = Field(
        15432, ge=1, le=65535,
        description="Port of the local stack's PostgreSQL (`wal_level=logical`); a source on the local stack "
                    "gives the same `port`.")
    mariadb_port: int | None = Field(
        None, ge=1, le=65535,
        description="Port of the local stack's MariaDB, which runs only when this is set (a MariaDB source on the "
                    "local stack). Unset: no MariaDB.")
    registry_port: int | None = Field(
        None, ge=1, le=65535,
        description="Port of the local schema registry (Apicurio), which runs only when this is set: sources with "
                    "`format: avro` need it unless `schema_registry.url` names another registry. Unset: no registry.")
    kafka_heap: str = Field(
        "512m", description="JVM heap of the local broker (its -Xms and -Xmx, in Java's size syntax: 512m, 2g).")
    connect_heap: str = Field(
        "768m", description="JVM heap of the local Kafka Connect worker (its -Xms and -Xmx, e.g. 768m).")
    registry_heap: str = Field(
        "384m", description="JVM heap of the local schema registry (its -Xms and -Xmx, e.g. 384m).")
    kafka_sasl_port: int | None = Field(
        None, ge=1, le=65535,
        description="Port of a second listener of the local broker, SASL_SSL with SCRAM-SHA-512 and a certificate "
                    "made at `stack up`; the Connect worker then reaches Kafka through it, and "
                    "`cdc stack status --json` says how to reach it. Unset: no such listener.")
    start_timeout_s: int = Field(
        180, ge=5,
        description="Seconds `cdc stack up` waits for each local service to be ready before it gives up; raise it "
                    "on a slow machine.")


MIB = 1024 * 1024


class TopicSettings(Frozen):
    """How the table topics are made (by `cdc register`, and by the connectors for their own
    topics): set when a topic is created; an existing topic's retention is raised to this."""

    partitions: int = Field(
        1, ge=1, le=10000,
        description="Partitions of each table topic. A key's changes stay on one partition, so they stay in order "
                    "with any count; more partitions spread a table's reads over more Spark tasks.")
    replication_factor: int = Field(
        -1, ge=-1, le=32,
        description="Replicas of each table topic; -1 takes the broker's `default.replication.factor` "
                    "(0 is refused).")
    retention_hours: int | None = Field(
        None, ge=1,
        description="How long Kafka keeps a change record, in hours. Unset (null): for ever, so a table's first "
                    "run (which reads its snapshot from the topic's earliest record) and `replay --from-earliest` "
                    "always find every change; `cdc register` warns below a table's `options.delete_horizon_hours`.")

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

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT",
        description="Kafka's `security.protocol` for every client of cdc: TLS with SSL and SASL_SSL, a SASL login "
                    "with SASL_PLAINTEXT and SASL_SSL. The SASL keys are accepted only with a SASL protocol, the "
                    "TLS keys (`ca_file`, `keystore_*`) only with a TLS one.")
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = Field(
        None,
        description="The SASL mechanism, required with a SASL protocol. OAUTHBEARER gets a token with the OAuth "
                    "client credentials `username` and `password` from `token_endpoint_url`.")
    username: str | None = Field(
        None,
        description="The SASL user (OAUTHBEARER: the OAuth client id); required with a SASL protocol.")
    password: SecretStr | None = Field(
        None,
        description="The SASL password (OAUTHBEARER: the OAuth client secret), as `${ENV_NAME}`. A SASL protocol "
                    "needs it or `password_file`.")
    password_file: Path | None = Field(
        None,
        description="A file holding the SASL password (OAUTHBEARER: the client secret), in place of `password`; "
                    "read when cdc connects.")
    token_endpoint_url: str | None = Field(
        None,
        description="OAUTHBEARER: the identity provider's token endpoint; required with that mechanism.")
    scope: str | None = Field(
        None, description="OAUTHBEARER: the scope asked for, if the provider wants one. Unset: none is asked for.")
    ca_file: Path | None = Field(
        None,
        description="TLS: the CA certificate(s) (PEM) the brokers' certificates are checked against. Unset: each "
                    "client's default trust.")
    keystore_file: Path | None = Field(
        None,
        description="TLS client authentication (mutual TLS): a PKCS#12 file with the client's key and certificate. "
                    "Unset: no client certificate.")
    keystore_password: SecretStr | None = Field(
        None, description="The password of `keystore_file`, as `${ENV_NAME}`; or set `keystore_password_file`.")
    keystore_password_file: Path | None = Field(
        None, description="A file holding the password of `keystore_file`, in place of `keystore_password`.")
    connector_password_ref: str | None = Field(
        None,
        description="What connector configs (the MariaDB connector's schema history clients) carry in place of "
                    "the SASL password, for a Connect cluster with a config provider, e.g. "
                    "`${file:/etc/kafka/secrets.properties:sasl_password}`. Unset: the local worker reads a secrets "
                    "file cdc writes; a remote one gets the password, with a warning.")

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
    """The Kafka cluster that carries the change records: where it is, how cdc's clients
    reach it, how the table topics are made and how large a record may be."""

    bootstrap_servers: str | None = Field(
        None,
        description="The brokers as Kafka's `bootstrap.servers` (host:port, comma-separated), for cdc, the Spark "
                    "jobs and the MariaDB connector's schema history. Unset: the local stack's broker, "
                    "127.0.0.1:`stack.kafka_port`.")
    security: KafkaSecurity = Field(
        KafkaSecurity(), description="How every Kafka client of cdc connects: protocol, SASL and TLS.")
    topics: TopicSettings = Field(
        TopicSettings(), description="How the table topics are made: partitions, replication, retention.")
    max_record_bytes: int = Field(
        32 * MIB, ge=MIB, le=1024 * MIB,
        description="The largest change record (one row's event, as serialized), in bytes, that capture carries: "
                    "the local broker, the topics cdc creates, the connectors' producers and the jobs' consumers "
                    "accept records up to it; another cluster's broker `message.max.bytes` must allow it too. A "
                    "larger row stops its source's capture, and `cdc status` names it with this setting.")
    compression: Literal["zstd", "lz4", "snappy", "gzip", "none"] = Field(
        "zstd",
        description="How the connectors' producers compress change records on their way to Kafka "
                    "(`compression.type`).")

    @field_validator("bootstrap_servers")
    @classmethod
    def _brokers(cls, v: str | None) -> str | None:
        for broker in [] if v is None else [b.strip() for b in v.split(",") if b.strip()]:
            host, sep, port = re.sub(r"^[A-Za-z_]+://", "", broker).rpartition(":")  # SASL_SSL://host:port too
            if not sep or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"broker {broker!r} is not host:port (bootstrap_servers is host:port, "
                                 f"comma-separated, e.g. kafka-1:9092,kafka-2:9092)")
            check_host(host, "broker host")
        return v


class HttpAccess(Frozen):
    """Credentials and TLS trust of an HTTP service (Kafka Connect's REST API, the schema
    registry): basic auth with the password from the environment or a file."""

    username: str | None = Field(
        None,
        description="The basic-auth user; it needs `password` or `password_file`. Unset: no authentication. A "
                    "refused login exits 2.")
    password: SecretStr | None = Field(
        None, description="The basic-auth password, as `${ENV_NAME}`; or set `password_file`.")
    password_file: Path | None = Field(
        None, description="A file holding the basic-auth password, in place of `password`; read when cdc connects.")
    ca_file: Path | None = Field(
        None,
        description="The CA certificate(s) (PEM) an https URL's certificate is checked against. Unset: the "
                    "system's.")

    @model_validator(mode="after")
    def _paired(self) -> "HttpAccess":
        has_password = self.password is not None or self.password_file is not None
        if bool(self.username) != has_password:
            raise ValueError("basic auth needs both username and password (or password_file)")
        return self


class ConnectSettings(HttpAccess):
    """Kafka Connect's REST API, through which `cdc register` creates and updates one
    Debezium connector per source, with basic auth and TLS trust."""

    url: str | None = Field(
        None,
        description="The Connect REST API's base URL (http or https). Unset: the local stack's worker, "
                    "http://127.0.0.1:`stack.connect_port`.")

    @field_validator("url")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        return check_http_url(v, "url", "http://connect:8083")


# The local stack's registry (Apicurio): its Confluent-compatible API and its own.
REGISTRY_CONFLUENT_API, REGISTRY_NATIVE_API = "/apis/ccompat/v7", "/apis/registry/v2"
# The Debezium side of cdc (debezium/ beside the cdc package, in the repository and as
# installed): the connector templates it ships are the default of `debezium_dir`.
DEBEZIUM = Path(__file__).resolve().parents[2] / "debezium"
CONNECTOR_TEMPLATES = DEBEZIUM / "connectors"


class SchemaRegistrySettings(HttpAccess):
    """The Confluent-compatible schema registry of sources with `format: avro`. Unset: the
    local stack's (`stack.registry_port`)."""

    url: str | None = Field(
        None,
        description="The registry's Confluent-compatible API, where the jobs read writer schemas by id. Unset: "
                    "the local stack's registry (`stack.registry_port`).")
    converter_url: str | None = Field(
        None,
        description="What the converter template (avro-converter.json) gets as `{registry_url}`: where the "
                    "connectors, in Connect, register writer schemas. Unset: `url`, or for the local stack's "
                    "Apicurio registry its native API.")

    @field_validator("url", "converter_url")
    @classmethod
    def _http(cls, v: str | None, info) -> str | None:
        return check_http_url(v, info.field_name, "http://registry:8081")


class SourceSettings(Frozen):
    """A source database Debezium captures (PostgreSQL or MariaDB). The password comes from
    the environment (`password: ${PGPASSWORD}`) or a file (`password_file`), never from
    this file."""

    kind: Literal["postgresql", "mariadb"] = Field(
        "postgresql",
        description="The database: postgresql (Debezium's PostgreSQL connector, pgoutput, a slot and publication "
                    "of its own) or mariadb (its MariaDB connector, reading the binary log as a replica).")
    format: Literal["json", "avro"] = Field(
        "json",
        description="How the connector writes change events: JSON with schemas, or Confluent's Avro wire format "
                    "through the schema registry (the connector template avro-converter.json). avro needs "
                    "`schema_registry.url` or `stack.registry_port`.")
    host: str = Field(
        "127.0.0.1",
        description="The database's host as cdc reaches it (introspection, bootstrap, reconciliation), and as "
                    "Kafka Connect does unless `connector_host` is set.")
    port: int = Field(
        5432, ge=1, le=65535,
        description="The database's port as cdc reaches it, and as Kafka Connect does unless `connector_port` is "
                    "set; a MariaDB server usually listens on 3306.")
    connector_host: str | None = Field(
        None,
        description="The database's host as Kafka Connect reaches it, when that differs (containers, proxies). "
                    "Unset: `host`.")
    connector_port: int | None = Field(
        None, ge=1, le=65535,
        description="The database's port as Kafka Connect reaches it, when that differs. Unset: `port`.")
    database: str = Field(
        description="The database cdc and the connector connect to, a plain identifier. For MariaDB, a "
                    "registration's `source.schema` names the database of its table.")
    user: str = Field(
        description="The database user cdc and the connector log in as, a plain identifier.")
    password: SecretStr | None = Field(
        None,
        description="The user's password, as `${ENV_NAME}`; or set `password_file`. A source needs one of "
                    "the two.")
    password_file: Path | None = Field(
        None,
        description="A file holding the user's password, in place of `password` (the local stack writes "
                    "`.state/postgres/password`).")
    connector_password_ref: str | None = Field(
        None,
        description="What the connector config holds instead of the password, for a Connect cluster with a "
                    "config provider, e.g. `${file:/etc/kafka/secrets.properties:pg_password}`. Unset: the local "
                    "worker reads a secrets file cdc writes; a remote one gets the password.")
    slot_name: str | None = Field(
        None, description="PostgreSQL: the connector's replication slot. Unset: `cdc_<source name>`.")
    publication_name: str | None = Field(
        None,
        description="PostgreSQL: the connector's publication, narrowed to the registered tables. Unset: "
                    "`cdc_<source name>`.")
    slot_wal_warn_mb: int = Field(
        1024, ge=1,
        description="PostgreSQL, in MiB: `cdc status` warns (and `status --check` exits non-zero) when the slot is "
                    "inactive and holds more WAL than this, since nothing reads it while the database's disk "
                    "fills.")
    server_id: int | None = Field(
        None, ge=1, le=4294967295,
        description="MariaDB: the replica server id the connector reads the binary log as, unique among the "
                    "server's replicas. Unset: derived from the source name (5400-6399).")
    signal_table: str | None = Field(
        None,
        description="Debezium's signal table (schema.table; for MariaDB database.table), which cdc creates and "
                    "through which it asks for incremental snapshots of tables registered after the connector's "
                    "initial snapshot. Unset: `public.cdc_signal` (PostgreSQL), `<database>.cdc_signal` (MariaDB).")
    cut_every_s: float | None = Field(
        None, gt=0,
        description="While `cdc run` runs a table of this source, it advances the source's consistent cut every "
                    "this many seconds (as `cdc cut --every` does beside it), and once at the end of an "
                    "`--available-now` run. Each move of the cut moves the `cdc_consistent` tag of every "
                    "Iceberg target of the source (a metadata commit). Unset: only `cdc cut` advances it.")

    @field_validator("database", "user")
    @classmethod
    def _plain(cls, v: str, info) -> str:
        return check_identifier(v, info.field_name)

    @field_validator("host", "connector_host")
    @classmethod
    def _host(cls, v: str | None, info) -> str | None:
        if v is None or v.startswith("/"):  # a Unix socket's directory (PostgreSQL)
            return v
        return check_host(v, info.field_name)

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

    name: str = Field(
        "lake",
        description="The catalog's name, the same in Spark (`spark.sql.catalog.<name>`) and in pyiceberg "
                    "(`load_catalog(name)`); a JDBC catalog keys its rows by it.")
    type: Literal["sqlite", "rest"] = Field(
        "sqlite",
        description="sqlite: Iceberg's JDBC catalog on the SQLite file `path`, with a local warehouse. rest: an "
                    "Iceberg REST catalog at `uri`; `uri`, `credential`, `token` and `properties` are accepted "
                    "only with it.")
    path: Path = Field(
        Path(".state/iceberg/catalog.db"),
        description="sqlite: the catalog's SQLite file. With Spark's cluster deploy mode, put it on a mount every "
                    "driver host shares.")
    # A Path once validated for sqlite; the stripped string given for rest.
    warehouse: Path | str | None = Field(
        None,
        description="sqlite: a local directory (unset: `.state/iceberg/warehouse`). rest: what the catalog is "
                    "given as `warehouse`, a URI (s3://bucket/prefix), a path or the name of one of its "
                    "warehouses (unset: the catalog's default).")
    uri: str | None = Field(
        None,
        description="rest, required there: the catalog's base http(s) URL, as the driver and executors reach it.")
    credential: SecretStr | None = Field(
        None,
        description="rest: OAuth2 client credentials, `<client_id>:<client_secret>`, as `${ENV_NAME}`.")
    token: SecretStr | None = Field(
        None, description="rest: a bearer token for the catalog, as `${ENV_NAME}`.")
    properties: dict[str, str] = Field(
        {},
        json_schema_extra={"additionalProperties": {"type": ["string", "number", "boolean"]}},
        description="rest: further Iceberg catalog properties for both engines (`io-impl`, `s3.*`, "
                    "`client.region`, ...); numbers and booleans become strings. Values of keys naming a secret, "
                    "password, token or credential are masked in cdc's messages.")
    format_version: Literal[2, 3] = Field(
        3,
        description="The Iceberg format of targets: 3 keeps one deletion vector per data file, so a batch's MERGE "
                    "does not read more delete files with every batch before it; 2 for readers without format v3. "
                    "A target is created at 2 and raised by its job's first start; a version is never lowered.")

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

    key: SecretStr | None = Field(
        None,
        description="The masking key, as `${ENV_NAME}`; or set `key_file`. Needed only when a registration has "
                    "`mask` columns; a target records the key's fingerprint and refuses another key.")
    key_file: Path | None = Field(None, description="A file holding the masking key, in place of `key`.")
    in_connector: bool = Field(
        True,
        description="true: the connector hashes masked columns (cdc's MaskColumns transformation, the same hash), "
                    "so Kafka and the dead letters never hold their clear values, and masked arrays are refused. "
                    "false: every masked column is hashed by the job (a Connect cluster without the "
                    "transformation's jar).")
    connector_key_ref: str | None = Field(
        None,
        description="What a remote Connect cluster's connector config carries for the key: a config provider "
                    "reference, e.g. `${file:/etc/kafka/secrets.properties:cdc_mask_key}`; without it `register` "
                    "refuses rather than show the key. The local worker reads a secrets file cdc writes.")


class LineageSettings(Frozen):
    """OpenLineage events (what Marquez, DataHub and other lineage tools read) of registrations
    and runs: each table's capture (source table -> topic) and apply (topic -> target) jobs,
    with the masked and excluded columns and the masking key's fingerprint. Off by default."""

    transport: Literal["none", "file", "http"] = Field(
        "none",
        description="Where events go: none (off), file (one JSON event a line, appended to `file`) or http "
                    "(POSTed to `url` + `endpoint`).")
    file: Path | None = Field(None, description="transport file: the file the events are appended to.")
    url: str | None = Field(
        None, description="transport http: the lineage server's base URL, e.g. http://marquez:5000.")
    endpoint: str = Field("api/v1/lineage", description="transport http: the path events are POSTed to.")
    api_key: SecretStr | None = Field(
        None, description="transport http: a bearer API key, as `${ENV_NAME}`; or set `api_key_file`.")
    api_key_file: Path | None = Field(None, description="A file holding the API key, in place of `api_key`.")
    ca_file: Path | None = Field(
        None,
        description="transport http: the CA certificate(s) (PEM) an https URL's certificate is checked against. "
                    "Unset: the system's.")
    namespace: str = Field(
        "cdc", description="The namespace of cdc's jobs in the lineage graph (an environment's name, say).")
    timeout_s: float = Field(5.0, gt=0, description="transport http: how long a POST may take.")

    @field_validator("url")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        return check_http_url(v, "url", "http://marquez:5000")

    @property
    def on(self) -> bool:
        return self.transport != "none"

    @model_validator(mode="after")
    def _complete(self) -> "LineageSettings":
        if self.transport == "file" and self.file is None:
            raise ValueError("transport file needs `file`, the file events are appended to")
        if self.transport == "http" and self.url is None:
            raise ValueError("transport http needs `url`, the lineage server's base URL")
        return self


class DeltaSettings(Frozen):
    """Where the targets of `sink: delta` registrations live: one Delta table per target at
    `<root>/<namespace>/<table>`, with its delete memory and dead letters beside it."""

    root: Path = Field(
        Path(".state/delta"),
        description="The directory of the Delta targets, a local or mounted path (no URI: object storage is not "
                    "supported for Delta targets yet).")

    @field_validator("root", mode="before")
    @classmethod
    def _plain_path(cls, v):
        if "`" in str(v) or URI_SCHEME.match(str(v)):
            raise ValueError(f"root {str(v)!r}: give a local or mounted directory (no URI, no backquote)")
        return v


class SparkSettings(Frozen):
    """The SparkSession of the jobs (`cdc run`, `replay`, `bootstrap`, `maintain`). Under
    spark-submit, what it is given wins: its `--master`, `--conf` and
    `spark-defaults.conf`."""

    master: str = Field(
        "local[2]",
        description="Spark's `spark.master`: `local[N]` runs the jobs in one JVM on this machine with N cores, "
                    "`spark://host:7077` on a standalone cluster; under spark-submit its `--master` wins.")
    driver_memory: str = Field(
        "2g",
        description="Spark's `spark.driver.memory` (512m, 2g); under spark-submit the driver runs already, so "
                    "give `--driver-memory` there.")

    @field_validator("driver_memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        if not MEMORY.match(v):
            raise ValueError(f"driver_memory {v!r} is not a JVM memory size: a number of bytes with k, m, g or t, "
                             f"e.g. 512m or 2g")
        return v
    shuffle_partitions: int = Field(
        4, ge=1,
        description="Spark's `spark.sql.shuffle.partitions` for each batch's dedupe and MERGE (and the partitions "
                    "of a Delta table's log state); raise it with the cores of a cluster.")
    checkpoint_dir: Path = Field(
        Path(".state/checkpoints"),
        description="The Structured Streaming checkpoints, one directory per table; a local or mounted path "
                    "(not an s3a:// URI), on a mount every driver host shares with cluster deploy mode.")
    batches_at_once: int | None = Field(
        None, ge=1,
        description="Batches a job applies at once, over all its tables (default: twice the cores of "
                    "`master`); the others wait, the biggest first, a batch's claim doubling every 10 s it "
                    "waits. Each batch is planned on the driver, so more at once on a few cores makes each "
                    "slower, not the job faster.")
    shared_query: bool = Field(
        True,
        description="One streaming query plans the batches of all the job's tables that share a trigger interval "
                    "and set no batch sizes of their own; only the tables with changes are applied, the most "
                    "changes first, each reading all that is planned for it in one commit with its own offsets: a "
                    "quiet table costs nothing between its changes. A table that fails leaves it for a query of its "
                    "own, and joins it again once that query runs without failing. Off: one query per table (a job "
                    "of one table has one either way).")
    retry_for_s: int = Field(
        300, ge=0,
        description="Seconds a job retries a table's failure that an outage explains (Kafka, the catalog or "
                    "the warehouse out of reach), with backoff, before it gives the table up: its job state becomes "
                    "failed with the last error, the other tables go on, and a continuous job tries it again every "
                    "60 s. A job whose every table is given up exits 3, naming each error.")
    direct_writes: bool = Field(
        True,
        description="A batch of an Iceberg upsert target with nothing to look up in the target (no truncate, "
                    "key change or unchanged value left out; at most 50,000 records) is written as a "
                    "data file and deletion vectors and committed as one RowDelta, without planning a MERGE; "
                    "every other batch, and every Delta one, goes through the MERGE. Off: every batch does.")
    extra_conf: dict[str, str] = Field(
        {},
        description="Further Spark properties (name to string value), set last so they override cdc's own; "
                    "spark-submit's still win.")


class Settings(Frozen):
    """cdc.yaml: the local stack, the Kafka cluster, Kafka Connect, the source databases,
    the catalog and the jobs. Relative paths are resolved against the file's directory;
    `--config PATH` or `$CDC_CONFIG` picks another file than ./cdc.yaml."""

    root: SkipJsonSchema[Path] = Field(
        Path("."), description="The directory of cdc.yaml, set by the loader; not a key of the file.")
    stack: StackSettings = Field(
        StackSettings(), description="The local stack that `cdc stack up` runs: ports, heaps, state directory.")
    kafka: KafkaSettings = Field(
        KafkaSettings(), description="The Kafka cluster: brokers, security, topics and record size.")
    connect: ConnectSettings = Field(
        ConnectSettings(), description="Kafka Connect's REST API, where the Debezium connectors are registered.")
    sources: dict[str, SourceSettings] = Field(
        {},
        description="The source databases, by name (a plain identifier): what a registration's `source.name` names, "
                    "the connector's name (`cdc-<name>`) and the prefix of its topics (`<name>.<schema>.<table>`).")
    schema_registry: SchemaRegistrySettings = Field(
        SchemaRegistrySettings(), description="The schema registry of sources with `format: avro`.")
    catalog: CatalogSettings = Field(
        CatalogSettings(), description="The Iceberg catalog of the targets, for Spark and pyiceberg.")
    delta: DeltaSettings = Field(DeltaSettings(), description="Where the targets of `sink: delta` registrations live.")
    spark: SparkSettings = Field(SparkSettings(), description="The SparkSession of the jobs.")
    masking: MaskingSettings = Field(MaskingSettings(), description="The key of registrations' `mask` columns.")
    lineage: LineageSettings = Field(
        LineageSettings(), description="OpenLineage events of registrations and runs (off by default).")
    tables_dir: Path = Field(
        Path("tables"),
        description="The directory of the table registrations, one `<namespace>.<table>.yaml` per table.")
    jars_dir: Path = Field(
        Path(".cache/jars"),
        description="The JVM jars `make setup` fetches from jvm/pom.xml; Spark takes `<jars_dir>/spark` unless "
                    "spark-submit is given `--jars`.")
    debezium_dir: Path | None = Field(
        None,
        description="A directory of Debezium connector templates (`<kind>-connector.json`, "
                    "`avro-converter.json`) that replaces all of the ones cdc ships. Unset: cdc's own, "
                    "debezium/connectors.")

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
    """The source table the registration captures, in one of cdc.yaml's `sources`."""

    name: str | None = Field(
        None,
        description="The source in cdc.yaml's `sources`. Unset: the only source there; required when cdc.yaml "
                    "has several.")
    schema_: str = Field(
        alias="schema",
        description="The table's schema (PostgreSQL) or database (MariaDB), a plain identifier.")
    table: str = Field(description="The table's name at the source, a plain identifier.")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @field_validator("schema_", "table")
    @classmethod
    def _plain(cls, v: str, info) -> str:
        return check_identifier(v, f"source {info.field_name.rstrip('_')}")


class Partitioning(Frozen):
    """The target's layout: rows bucketed by the first key column (0: unpartitioned)."""

    buckets: int = Field(
        0, ge=0, le=4096,
        description="Buckets of an Iceberg target's partition spec, a bucket transform of the first key column, "
                    "set when the target is created; 0: unpartitioned. A batch writes a data file (and a "
                    "deletion vector per file it changes) in each bucket its changes fall in: with 8, every small "
                    "batch wrote 8 files, rewritten together every `options.compact_every_files` batches. Delta "
                    "targets are unpartitioned.")


class TableOptions(Frozen):
    """How the table's job reads and applies its topic: what a bad record does, how large
    and how frequent the micro-batches are, where a first run starts, and how long deleted
    keys and old snapshots are kept."""

    on_error: Literal["dlq", "fail"] = Field(
        "dlq",
        description="A record that cannot be decoded or applied: dlq sets it aside in "
                    "`<target>__cdc_dead_letters` and the job goes on; fail stops the job with nothing of the "
                    "batch committed.")
    max_offsets_per_trigger: int | None = Field(
        None, ge=1,
        description="The most records a batch takes; a backlog is then caught up in batches of that size, back to "
                    "back. Unset: sized when the job starts, so that the raw records of the batches of all its "
                    "tables under way at once fit in half of the memory (the driver's heap in local mode), "
                    "from the size of the topic's newest records; between 10,000 and 1,000,000 records.")
    trigger_interval_s: float = Field(
        1.0, gt=0, le=3600,
        description="Seconds between the batches of a continuous job (not `--available-now`). A table's change "
                    "is visible about this plus one batch's time after its source commit; a shorter interval makes "
                    "more, smaller commits (and files to rewrite) while changes flow, and costs nothing while none "
                    "do.")
    min_offsets_per_trigger: int | None = Field(
        None, ge=1,
        description="A continuous job waits until this many records are there, or `max_trigger_delay_s` has "
                    "passed: fewer, larger commits for a table that changes slowly. Unset: no minimum.")
    max_trigger_delay_s: int = Field(
        60, ge=1,
        description="Seconds a continuous job waits for `min_offsets_per_trigger` records before it takes what "
                    "there is; only with that option.")
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest",
        description="Where the table's first run reads its topic from, before the target holds committed offsets: "
                    "earliest (the snapshot and every change Kafka keeps) or latest (only what arrives from then "
                    "on). Later runs resume from the target's offsets. A target `register` creates for a topic that "
                    "already holds records starts after them (its snapshot brings the rows).")
    delete_horizon_hours: int = Field(
        168, ge=0,
        description="Hours a deleted key is remembered (by source commit time), so that a late or replayed older "
                    "change of that key cannot bring the row back; keep `kafka.topics.retention_hours` at least "
                    "this long.")
    compact_every_files: int = Field(
        16, ge=0,
        description="A running job rewrites a target's and its delete memory's small data files (under 1 MiB) "
                    "into few (Iceberg's rewrite, Delta's OPTIMIZE) once this many data files a partition were "
                    "added to the target (with 8 buckets, "
                    "8 times this many), or this many inserts made to its delete memory, since its start or its "
                    "last rewrite, between two batches: each batch adds files, and a batch's cost grows with the "
                    "files it reads until they are rewritten (a rewrite costs about as much as one or two small "
                    "batches). 0: never.")
    max_snapshots: int = Field(
        1000, ge=0,
        description="The most snapshots a running job keeps of an Iceberg target, of its delete memory and of its "
                    "dead letters: once a tenth more were made, the oldest expire (never the newest with cdc "
                    "offsets), between two batches. Every commit writes each snapshot kept (about 2 KB) into the "
                    "table's metadata file again, so a table committing every 2 s would hold 43,200 of them a day "
                    "and each batch would cost more. Time travel reaches back this many commits; `cdc maintain` "
                    "expires older snapshots further by `snapshot_retention_hours`. 0: the job expires none.")
    snapshot_retention_hours: int = Field(
        24, ge=0,
        description="`cdc maintain` expires the target's snapshots older than this many hours (never the newest "
                    "one with cdc offsets); for Delta, its VACUUM retention.")
    direct_writes: bool | None = Field(
        None,
        description="This table's batches written without a MERGE where they can be (see `spark.direct_writes`); "
                    "false: every batch of it goes through the MERGE. Unset: `spark.direct_writes`.")


MODES = ("upsert", "history", "soft_delete")
SINKS = ("iceberg", "delta")


class TableRegistration(Frozen):
    """`tables/<namespace>.<table>.yaml`: one replicated source table, with its source, key,
    target and options. `cdc tables add` writes one from the source's columns."""

    name: str = Field(
        description="The table's name in cdc, `<namespace>.<table>`: the file is `<name>.yaml`, commands take it "
                    "as `--table`, and it names the target unless `target` is set.")
    source: SourceRef = Field(description="The source table: its source, schema and table.")
    key: tuple[str, ...] | None = Field(
        None,
        description="The key columns whose changes are applied per key. Unset: the source's primary key; a table "
                    "without one needs its key named here. Key columns are plain identifiers and NOT NULL at the source "
                    "(`register` refuses a column that allows NULL), and cannot be excluded or masked.")
    target: str | None = Field(
        None,
        description="The target table, `<namespace>.<table>` in the Iceberg catalog or under `delta.root`. Unset: "
                    "`name`.")
    sink: Literal["iceberg", "delta"] = Field(
        "iceberg",
        description="iceberg: a table of the Iceberg catalog (`catalog` in cdc.yaml); delta: a Delta Lake table at "
                    "`<delta.root>/<namespace>/<table>`, with the same semantics.")
    mode: Literal["upsert", "history", "soft_delete"] = Field(
        "upsert",
        description="upsert: the target holds each key's current row; history: every version of every row, with "
                    "`_cdc_valid_from`, `_cdc_valid_to` and `_cdc_current` (SCD type 2); soft_delete: a deleted "
                    "row stays, marked `_cdc_deleted`. A target keeps the mode it was created with.")
    exclude: tuple[str, ...] = Field(
        (),
        description="Source columns that never reach the target, nor Kafka (the connector's "
                    "`column.exclude.list`). A column is in `exclude` or in `mask`, not both.")
    mask: tuple[str, ...] = Field(
        (),
        description="Source columns stored as a keyed hash, HMAC-SHA256(`masking.key` of cdc.yaml, value as "
                    "text) in hex, so they still join and group. The connector hashes them before Kafka unless "
                    "`masking.in_connector` is false.")
    partitioning: Partitioning = Field(Partitioning(), description="The target's layout.")
    options: TableOptions = Field(
        TableOptions(), description="How the table's job runs: bad records, batch sizing, starting offsets, "
                                    "retention of deletes and snapshots.")
    snapshot: Literal["initial", "never", "jdbc"] = Field(
        "initial",
        description="How the rows the table holds when it is registered reach the target. initial: Debezium "
                    "snapshots them (the connector's initial snapshot, or an incremental one when it runs "
                    "already); never: they don't, only later changes do; jdbc: `cdc bootstrap` reads them in "
                    "parallel (a large PostgreSQL table), and the job waits for it.")
    file: SkipJsonSchema[Path | None] = Field(
        None, exclude=True, description="The registration's file, set by the loader; not a key of the file.")

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
                check_key_column(col)
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
