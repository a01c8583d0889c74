"""`cdc init`: a commented cdc.yaml for an existing Kafka, Kafka Connect, Iceberg catalog and
source database, from flags, with questions on the terminal for what they leave out. Secrets
are written as `${ENV}` references or `password_file` paths, never as values. The file is
loaded back through cdc.config.loader before it takes its place."""
from __future__ import annotations

import datetime as dt
import os
import re
from contextlib import contextmanager
from pathlib import Path

import yaml

from cdc.cli import prompt
from cdc.config.loader import ENV_REF, load_settings
from cdc.config.models import check_identifier
from cdc.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # OAUTHBEARER: edit the file (token_endpoint_url)
KINDS = ("postgresql", "mariadb")
CATALOGS = ("rest", "sqlite")
PORTS = {"postgresql": 5432, "mariadb": 3306}
ENV_NAME = re.compile(r"^\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")
PLAIN = re.compile(r"^[A-Za-z0-9_./:@,+-]+$")


def add_arguments(p) -> None:
    p.add_argument("--output", "-o", metavar="FILE", default="cdc.yaml", help="where to write it (default cdc.yaml)")
    p.add_argument("--force", action="store_true", help="overwrite FILE when it exists")
    p.add_argument("--kafka", metavar="HOST:PORT[,...]", help="Kafka's bootstrap servers")
    p.add_argument("--kafka-security", choices=PROTOCOLS, help="Kafka's security protocol (default PLAINTEXT)")
    p.add_argument("--kafka-sasl-mechanism", choices=MECHANISMS, help="SASL_*: the mechanism (default SCRAM-SHA-512)")
    p.add_argument("--kafka-user", metavar="NAME", help="SASL_*: the user")
    secret_options(p, "--kafka-password", "SASL_*: the user's password", "KAFKA_PASSWORD")
    p.add_argument("--kafka-ca-file", metavar="PATH",
                   help="SSL, SASL_SSL: the brokers' CA (PEM; default: the system's)")
    p.add_argument("--connect", metavar="URL", help="Kafka Connect's REST API, e.g. http://connect:8083")
    p.add_argument("--schema-registry", metavar="URL", help="a Confluent-compatible schema registry (optional: "
                                                            "for sources with format avro)")
    p.add_argument("--catalog-type", choices=CATALOGS, help="the Iceberg catalog: an Iceberg REST catalog, or a "
                                                            "SQLite file (default rest)")
    p.add_argument("--catalog-uri", metavar="URL", help="rest: the catalog's base URL")
    p.add_argument("--catalog-warehouse", metavar="WAREHOUSE", help="rest: s3://bucket/prefix, a path or the name of "
                                                                    "one of its warehouses (optional); sqlite: a path")
    p.add_argument("--catalog-name", metavar="NAME", default="lake", help="the catalog's name in Spark and pyiceberg "
                                                                          "(default lake)")
    p.add_argument("--source-kind", choices=KINDS, help="the source database (default postgresql)")
    p.add_argument("--source-host", metavar="HOST", help="the source database's host")
    p.add_argument("--source-port", type=int, metavar="N", help="its port (default 5432, MariaDB 3306)")
    p.add_argument("--source-database", metavar="NAME", help="the database to capture")
    p.add_argument("--source-user", metavar="NAME", help="the user Debezium and cdc log in as")
    secret_options(p, "--source-password", "the user's password", "CDC_<SOURCE>_PASSWORD")
    p.add_argument("--source-name", metavar="NAME", help="the source's name in cdc.yaml (default: the database's)")


def secret_options(p, flag: str, what: str, default: str) -> None:
    """`<flag>-env NAME` and `<flag>-file PATH`: where a secret is read from, never its value."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(f"{flag}-env", metavar="NAME", help=f"{what}: the environment variable that holds it "
                                                          f"(default {default})")
    group.add_argument(f"{flag}-file", metavar="PATH", help=f"{what}: a file that holds it")


def run(args) -> int:
    out = Path(args.output)
    if out.exists() and not args.force:
        raise ConfigError(f"{out} exists", hint="pass --force to overwrite it, or --output another file")
    if not out.parent.is_dir():
        raise ConfigError(f"{out.parent} is not a directory", hint="create it, or --output another file")
    answers = complete(vars(args), prompt.interactive())
    text = render(answers)
    unset = write_checked(out, text)
    print(f"wrote {out}" + (f"; export {', '.join(unset)} before running cdc" if unset else "")
          + f"; next: cdc --config {out} doctor")
    return 0


def complete(given: dict, interactive: bool) -> dict:
    """The flags' values with defaults filled in, and what is still missing asked for on
    the terminal; without one, a ConfigError naming every missing flag."""
    a = dict(given)
    missing: list[str] = []

    def need(key: str, question: str, default=None, choices=(), optional=False) -> None:
        if a.get(key) is not None:
            return
        if interactive:
            a[key] = prompt.ask(question, default, choices, optional)
        elif default is not None or optional:
            a[key] = default
        else:
            missing.append("--" + key.replace("_", "-"))

    need("kafka", "Kafka bootstrap servers (host:port[,...])")
    need("kafka_security", "Kafka security protocol", "PLAINTEXT", PROTOCOLS)
    protocol = a["kafka_security"] or ""
    sasl = [f"--{k.replace('_', '-')}" for k in ("kafka_sasl_mechanism", "kafka_user", "kafka_password_env",
                                                  "kafka_password_file") if a.get(k)]
    if sasl and not protocol.startswith("SASL_"):
        raise ConfigError(f"{', '.join(sasl)}: only with --kafka-security SASL_SSL or SASL_PLAINTEXT "
                          f"(it is {protocol})")
    if a.get("kafka_ca_file") and not protocol.endswith("SSL"):
        raise ConfigError(f"--kafka-ca-file: only with --kafka-security SSL or SASL_SSL (it is {protocol})")
    if protocol.startswith("SASL_"):
        need("kafka_sasl_mechanism", "SASL mechanism", "SCRAM-SHA-512", MECHANISMS)
        need("kafka_user", "Kafka user")
        secret(a, "kafka_password", "Kafka password", "KAFKA_PASSWORD", interactive)
    if protocol.endswith("SSL"):
        need("kafka_ca_file", "the brokers' CA file (PEM; empty: the system's)", optional=True)
    need("connect", "Kafka Connect REST URL (e.g. http://connect:8083)")
    need("schema_registry", "schema registry URL (empty: none)", optional=True)
    need("catalog_type", "Iceberg catalog type", "rest", CATALOGS)
    if a["catalog_type"] == "rest":
        need("catalog_uri", "REST catalog URL (e.g. http://catalog:8181)")
        need("catalog_warehouse", "warehouse (s3://bucket/prefix; empty: the catalog's default)", optional=True)
    need("source_kind", "source database kind", "postgresql", KINDS)
    need("source_host", "source database host")
    need("source_port", "source database port", str(PORTS.get(a["source_kind"], 5432)))
    need("source_database", "database to capture")
    need("source_user", "database user")
    need("source_name", "the source's name in cdc.yaml", a.get("source_database") or "main")
    if missing:
        raise ConfigError(f"cdc init needs {', '.join(missing)} (standard input is not a terminal to ask on)",
                          hint="give them as options; `cdc init --help` lists them all")
    try:
        check_identifier(str(a["source_name"]), "--source-name")
    except ValueError as e:
        raise ConfigError(str(e), hint="name the source with --source-name NAME (letters, digits, underscore); "
                                       "by default it is the database's name") from None
    secret(a, "source_password", "source password", f"CDC_{str(a['source_name']).upper()}_PASSWORD", interactive)
    try:
        a["source_port"] = int(a["source_port"])
    except ValueError:
        raise ConfigError(f"source port {a['source_port']!r} is not a number") from None
    return a


def secret(a: dict, key: str, what: str, default_env: str, interactive: bool) -> None:
    """`a[key]`: {"password": "${NAME}"} or {"password_file": PATH}, from `<key>_env` or
    `<key>_file`, asked for on a terminal, else the default environment variable."""
    env, path = a.get(f"{key}_env"), a.get(f"{key}_file")
    if env is None and path is None and interactive:
        where = prompt.ask(f"{what} from an environment variable or a file", "env", ("env", "file"))
        if where == "file":
            path = prompt.ask(f"{what} file")
        else:
            env = prompt.ask(f"{what}: the environment variable that holds it", default_env)
    if path is not None:
        a[key] = {"password_file": path}
        return
    m = ENV_NAME.match(env or default_env)
    if not m:
        raise ConfigError(f"{what}: the value given is not an environment variable's name (not shown: it may be "
                          f"the password)",
                          hint="give the variable's name (e.g. PGPASSWORD), never the password itself")
    a[key] = {"password": "${" + m.group(1) + "}"}


def scalar(value) -> str:
    """A YAML scalar that reads back as `value`: plain when that is safe, else quoted."""
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if PLAIN.match(text) and yaml.safe_load(text) == text:
        return text
    return yaml.safe_dump(text, default_style='"', width=10_000).strip()


def render(a: dict) -> str:
    """cdc.yaml's text, with comments for what the answers leave at its default."""
    def line(text: str, comment: str = "") -> str:
        return (f"{text:<34} # {comment}" if comment else text).rstrip() + "\n"

    def password(entry: dict, pad: str) -> str:
        ((k, v),) = entry.items()
        return line(f"{pad}{k}: {v if k == 'password' else scalar(v)}")

    protocol, kind = a["kafka_security"], a["source_kind"]
    out = ["# cdc against an existing Kafka, Kafka Connect, Iceberg catalog and source database,\n",
           f"# written by `cdc init` ({dt.datetime.now(dt.timezone.utc):%Y-%m-%d}); check it with `cdc doctor`.\n",
           "# Relative paths are resolved against this file's directory. Secrets never go here:\n",
           "# `password: ${ENV_NAME}` (exported before cdc runs) or `password_file: PATH`.\n\n",
           "kafka:\n", line(f"  bootstrap_servers: {scalar(a['kafka'])}")]
    if protocol == "PLAINTEXT":
        out += [line("  # security:", "every Kafka client of cdc: admin, consumers, Spark"),
                line("  #   protocol: SASL_SSL", "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL"),
                line("  #   sasl_mechanism: SCRAM-SHA-512"), line("  #   username: cdc"),
                line("  #   password: ${KAFKA_PASSWORD}", "or password_file: /run/secrets/kafka_password")]
    else:
        out += [line("  security:", "every Kafka client of cdc: admin, consumers, Spark"),
                line(f"    protocol: {protocol}")]
        if protocol.startswith("SASL_"):
            out += [line(f"    sasl_mechanism: {a['kafka_sasl_mechanism']}"),
                    line(f"    username: {scalar(a['kafka_user'])}"), password(a["kafka_password"], "    ")]
        if protocol.endswith("SSL"):
            out.append(line(f"    ca_file: {scalar(a['kafka_ca_file'])}", "the brokers' CA (PEM)")
                       if a.get("kafka_ca_file") else
                       line("    # ca_file: /etc/kafka/ca.pem", "the brokers' CA (PEM); unset: the system's"))
    out += [line("  # max_record_bytes: 33554432", "the largest change record capture carries (default 32 MiB)"),
            line("  # topics:", "the table topics, when cdc creates them"),
            line("  #   partitions: 1"),
            line("  #   replication_factor: -1", "-1: the broker's default"),
            line("  #   retention_hours: null", "null: kept for ever (replay from earliest always works)"), "\n",
            "connect:\n", line(f"  url: {scalar(a['connect'])}"),
            line("  # username: cdc", "basic auth, with password: ${CONNECT_PASSWORD} or password_file"),
            line("  # password: ${CONNECT_PASSWORD}"),
            line("  # ca_file: /etc/kafka/ca.pem", "of an https URL; unset: the system's"), "\n"]
    if a.get("schema_registry"):
        out += [line("schema_registry:", "for sources with format: avro"),
                line(f"  url: {scalar(a['schema_registry'])}"), "\n"]
    else:
        out += [line("# schema_registry:", "for sources with format: avro (Confluent's wire format)"),
                line("#   url: http://registry:8081"), "\n"]
    out += ["sources:\n", line(f"  {scalar(a['source_name'])}:"), line(f"    kind: {kind}"),
            line(f"    host: {scalar(a['source_host'])}"), line(f"    port: {a['source_port']}"),
            line(f"    database: {scalar(a['source_database'])}"), line(f"    user: {scalar(a['source_user'])}"),
            password(a["source_password"], "    "),
            line("    # connector_host: db", "the database as Kafka Connect reaches it, when that differs"),
            line("    # connector_password_ref: ${file:/etc/kafka/secrets.properties:password}"),
            line("    #", "what the connector config holds instead of the password (a config provider)"),
            line("    # format: avro", "through the schema registry (default json)"), "\n",
            "catalog:\n", line(f"  name: {scalar(a['catalog_name'])}", "the same name in Spark and in pyiceberg"),
            line(f"  type: {a['catalog_type']}")]
    if a["catalog_type"] == "rest":
        out += [line(f"  uri: {scalar(a['catalog_uri'])}"),
                line(f"  warehouse: {scalar(a['catalog_warehouse'])}") if a.get("catalog_warehouse") else
                line("  # warehouse: s3://bucket/prefix", "unset: the catalog's default"),
                line("  # credential: ${CATALOG_CREDENTIAL}", "OAuth2 client_id:client_secret, or token: ${ENV}"),
                line("  # properties:", "Iceberg catalog properties, for Spark and pyiceberg"),
                line("  #   io-impl: org.apache.iceberg.aws.s3.S3FileIO"), line("  #   client.region: us-east-1")]
    else:
        out += [line("  path: .state/iceberg/catalog.db", "the catalog's SQLite file"),
                line(f"  warehouse: {scalar(a.get('catalog_warehouse') or '.state/iceberg/warehouse')}",
                     "a local path")]
    out += [line("  # format_version: 3", "targets' Iceberg format: 3 (deletion vectors) or 2"), "\n",
            "spark:\n", line("  master: local[2]", "under spark-submit, its --master wins"),
            line("  driver_memory: 2g"),
            line("  checkpoint_dir: .state/checkpoints", "on a cluster: a filesystem mounted alike on every host"),
            "\n", "stack:\n", line("  state_dir: .state", "the jobs' state and logs"), "\n",
            line("# delta:"), line("#   root: .state/delta", "the targets of `sink: delta` registrations"),
            line("# masking:", "the key of registrations' `mask` columns"),
            line("#   key: ${CDC_MASK_KEY}", "or key_file: /run/secrets/cdc_mask_key"), "\n",
            line("tables_dir: tables", "one registration per table: `cdc tables add SCHEMA.TABLE`"),
            line("jars_dir: .cache/jars", "filled by `make setup`; absolute when this file is elsewhere")]
    return "".join(out)


def write_checked(out: Path, text: str) -> list[str]:
    """Write `text` to `out` once it loads as cdc.yaml (variables it refers to that are not
    set stand in with a placeholder); returns those variables. Nothing is left on error."""
    tmp = out.with_name(f".{out.name}.init-{os.getpid()}")
    tmp.write_text(text)
    try:
        unset = sorted({m.group(1) for m in ENV_REF.finditer(uncommented(text))} - set(os.environ))
        with _placeholders(unset):
            try:
                load_settings(tmp)
            except ConfigError as e:
                raise ConfigError(e.message.replace(str(tmp.resolve()), str(out)) + f"\n{out} was not written",
                                  hint="correct the option (or answer) it came from, and run cdc init again") from None
        os.replace(tmp, out)
        return unset
    finally:
        tmp.unlink(missing_ok=True)


def uncommented(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


@contextmanager
def _placeholders(names: list[str]):
    os.environ.update({n: "placeholder" for n in names})
    try:
        yield
    finally:
        for n in names:
            os.environ.pop(n, None)
