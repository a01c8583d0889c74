"""`cdc doctor`: a preflight of the sources (server settings, the user's privileges, each
registered table) and of Kafka, Kafka Connect, the catalog and the schema registry, run
before registering tables. Every problem is a failed `Check` that says what was found and
what to do. The decisions are pure functions of the values read, tested without a
database (cdc/report/checks.py); the per-kind SQL lives in cdc/report/doctor_<kind>.py."""
from __future__ import annotations

from dataclasses import asdict

from cdc.config.clients import kafka_access
from cdc.config.models import Settings, TableRegistration
from cdc.errors import DIFFERENCE, OK, CdcError, ConfigError
from cdc.report import document
from cdc.report.checks import Check, failed, passed


# ---- the run ----


def checks_of(settings: Settings, name: str):
    """The checks module of source `name`'s kind."""
    if settings.sources[name].kind == "mariadb":
        from cdc.report import doctor_mariadb
        return doctor_mariadb
    from cdc.report import doctor_postgres
    return doctor_postgres


def doctor(settings: Settings, source: str | None = None) -> list[Check]:
    """Every check: the services, then each source (or only `source`) with its registered
    tables. A source that cannot be reached is a failed check; the others go on."""
    from cdc.config.loader import load_tables

    if source is not None and source not in settings.sources:
        raise ConfigError(f"source {source!r} is not in cdc.yaml",
                          hint=f"sources: {', '.join(sorted(settings.sources)) or '(none)'}")
    names = [source] if source else sorted(settings.sources)
    tables = load_tables(settings)
    checks = service_checks(settings, names)
    for name in names:
        checks += source_checks(settings, name, [t for t in tables if t.source.name == name])
    return checks


def source_checks(settings: Settings, name: str, tables: list[TableRegistration]) -> list[Check]:
    from cdc.sources import module_of

    src = settings.sources[name]
    address = f"{src.user}@{src.host}:{src.port}/{src.database}"
    try:
        conn = module_of(settings, name).connect(settings, name)
    except CdcError as e:
        return [failed("connection", e.message, e.hint).at(name)]
    checks = [passed("connection", f"{src.kind} {address}").at(name)]
    try:
        with conn:
            kind = checks_of(settings, name)
            checks += [c.at(name) for c in kind.server_checks(conn, settings, name)]
            for reg in tables:
                checks += [c.at(name, reg.name) for c in kind.table_checks(conn, settings, name, reg)]
    except Exception as e:  # noqa: BLE001 - a query the server refused: reported, and the other sources go on
        checks.append(failed("preflight", f"{address}: {type(e).__name__}: {str(e).strip()[:500]}",
                             "run `cdc doctor` as a user that may read the server's catalogs").at(name))
    return checks


def service_checks(settings: Settings, sources: list[str]) -> list[Check]:
    """Kafka, Kafka Connect and the Debezium plugins `sources` need, the catalog, and the
    schema registry when a source writes Avro."""
    checks = [kafka_check(settings), *connect_checks(settings, sources), catalog_check(settings)]
    avro = [s for s in sources if settings.sources[s].format == "avro"]
    if avro:
        checks.append(registry_check(settings, avro))
    return checks


def kafka_check(settings: Settings) -> Check:
    from cdc.control.kafka import existing_topics

    try:
        topics = existing_topics(kafka_access(settings), timeout_s=10)
    except CdcError as e:
        return failed("kafka", e.message, e.hint)
    return passed("kafka", f"{settings.kafka_bootstrap} answers ({len(topics)} topics)")


def connector_class(settings: Settings, kind: str) -> str:
    """The Debezium connector class of a source kind, as its connector template names it."""
    from cdc.register.connector import read_template

    template = "mariadb-connector.json" if kind == "mariadb" else "postgres-connector.json"
    return read_template(settings, template)["connector.class"]


def connect_checks(settings: Settings, sources: list[str]) -> list[Check]:
    """Kafka Connect answers, and has the Debezium plugin of each kind of source."""
    from cdc.register.connector import ConnectClient

    from cdc.config.loader import load_tables
    from cdc.register.connector import MASK_CLASS

    url = settings.connect_url
    try:
        plugins = ConnectClient.of(settings, timeout_s=10).plugins(connectors_only=False)
    except CdcError as e:
        return [failed("connect", e.message, e.hint)]
    checks = [passed("connect", f"{url} answers ({len(plugins)} plugins)")]
    masking = sorted(t.name for t in load_tables(settings) if t.mask and t.source.name in sources)
    if masking and settings.masking.in_connector:
        checks.append(passed("connect_mask_transform", f"{MASK_CLASS} is installed") if MASK_CLASS in plugins else
                      failed("connect_mask_transform", f"{MASK_CLASS} is not installed in Kafka Connect at {url}, and "
                                                       f"{', '.join(masking[:3])} mask columns",
                             "copy .cache/jars/connect-plugins/cdc-transforms (`make setup` builds it) under the "
                             "workers' plugin.path and restart them, or set masking.in_connector: false"))
    for kind in sorted({settings.sources[s].kind for s in sources}):
        cls = connector_class(settings, kind)
        if cls in plugins:
            checks.append(passed(f"connect_plugin_{kind}", f"{cls} is installed"))
        else:
            checks.append(failed(f"connect_plugin_{kind}", f"{cls} is not installed in Kafka Connect at {url}",
                                 f"unpack Debezium's {kind} connector plugin under the worker's plugin.path and "
                                 f"restart the worker"))
    return checks


def catalog_address(settings: Settings) -> str:
    c = settings.catalog
    return f"REST catalog {c.name} at {c.uri}" if c.type == "rest" else \
        f"sqlite catalog {c.name} at {settings.path(c.path)}"


def catalog_check(settings: Settings) -> Check:
    from cdc.sinks.catalog import load_catalog

    where = catalog_address(settings)
    try:
        namespaces = load_catalog(settings).list_namespaces()
    except Exception as e:  # noqa: BLE001 - pyiceberg's errors have no common base
        return failed("catalog", f"{where} does not open: {type(e).__name__}: {str(e).strip()[:300]}",
                      "check catalog in cdc.yaml (uri, credential, warehouse) and that the catalog runs")
    return passed("catalog", f"{where} opens ({len(namespaces)} namespaces)")


def registry_check(settings: Settings, sources: list[str]) -> Check:
    """The schema registry answers (any answer for a schema id: it runs)."""
    from cdc.decoding.avro import SchemaRegistry

    url = settings.registry_url
    try:
        SchemaRegistry.of(settings, timeout_s=10).schema(1, attempts=1)
    except CdcError as e:
        return failed("schema_registry", f"{e.message} (sources with format avro: {', '.join(sources)})",
                      e.hint or "check schema_registry.url in cdc.yaml and that the registry runs")
    return passed("schema_registry", f"{url} answers")


# ---- output ----


def exit_code(checks: list[Check]) -> int:
    """0 when every check is ok (warnings included), 1 (a difference found) when one failed."""
    return OK if all(c.ok for c in checks) else DIFFERENCE


def summary(checks: list[Check]) -> str:
    failures = sum(not c.ok for c in checks)
    warnings = sum(c.ok and c.warn for c in checks)
    return (f"{len(checks)} checks: {len(checks) - failures - warnings} ok, {warnings} warning(s), "
            f"{failures} failed")


def format_text(checks: list[Check]) -> str:
    """One line per check (status, where, name, what was found), the fix indented below a
    failure or warning, then a summary line."""
    lines = []
    for c in checks:
        where = f"[{c.source}{' ' + c.table if c.table else ''}] " if c.source else ""
        lines.append(f"{c.status:<4}  {where}{c.name}: {c.found}")
        if c.fix and (not c.ok or c.warn):
            lines.append(f"      fix: {c.fix}")
    lines.append(summary(checks))
    return "\n".join(lines)


def format_json(checks: list[Check]) -> str:
    rows = [{"status": c.status, **asdict(c)} for c in checks]
    return document.dumps(ok=exit_code(checks) == 0, checks=rows)
