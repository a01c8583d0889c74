"""What a failure of a table's job means, in one line: a dependency down (Kafka, the
catalog, the warehouse), named with its address and worth retrying; a verdict that
retrying cannot mend (the target's schema or a value does not fit), named with Spark's
reason and failed at once; or a failure cdc cannot name, retried as an outage might be.
Java's own account (stack traces) goes to the JSON log's `detail` and the Spark log file."""
from __future__ import annotations

import re

from cdc.config.models import Settings, TableRegistration
from cdc.control.gaps import REFILL
from cdc.errors import ApplyError, CdcError, ConfigError, DependencyError
from cdc.sinks.formats import storage_location
from cdc.sinks.session import spark_log

KAFKA = re.compile(r"org\.apache\.kafka\.common\.(?:errors\.(?:TimeoutException|NetworkException|DisconnectException)"
                   r"|KafkaException)|Timed out waiting for a node assignment|Failed to construct kafka"
                   r"|Broker transport failure")
# Kafka refused cdc's credentials or TLS handshake: a configuration error, not an outage.
KAFKA_REFUSED = re.compile(r"org\.apache\.kafka\.common\.errors\.(?:SaslAuthenticationException|SslAuthenticationException"
                           r"|AuthenticationException|TopicAuthorizationException|GroupAuthorizationException"
                           r"|ClusterAuthorizationException)[^\n]*")
CATALOG = re.compile(r"Failed to load catalog|UncheckedSQLException: Failed to connect|SQLITE_CANTOPEN"
                     r"|org\.apache\.iceberg\.exceptions\.(?:RESTException|ServiceUnavailableException"
                     r"|ServiceFailureException)")
STORAGE = re.compile(r"NotFoundException: File does not exist|java\.io\.FileNotFoundException|AccessDeniedException"
                     r"|Permission denied|No space left on device|Mkdirs failed|Not a directory|RuntimeIOException"
                     r"|S3Exception|SdkClientException|Unable to execute HTTP request")
SPARK_ERROR = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\] ([^\n]*?)\s*SQLSTATE: ([0-9A-Z]{5})")
WRAPPERS = {"STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR"}  # Spark's envelope around the cause
CDC_ERROR = re.compile(r"cdc\.errors\.(\w+): (.*?)(?:\n\s*at |\Z)", re.S)


def diagnose(settings: Settings, reg: TableRegistration | None, name: str, exc: BaseException) -> CdcError:
    """The failure of table `name`'s job as a CdcError: a DependencyError for an outage, an
    error with `retriable` set for a failure cdc cannot name, else a verdict."""
    if isinstance(exc, CdcError):
        return exc
    error = _diagnose(settings, reg, name, str(exc))
    error.detail = str(exc)[:20000]
    return error


def _diagnose(settings: Settings, reg: TableRegistration | None, name: str, text: str) -> CdcError:
    own = CDC_ERROR.search(text)
    if own:  # a CdcError raised inside a batch, wrapped by Spark: an outage stays one
        kind = DependencyError if own.group(1) == DependencyError.__name__ else ApplyError
        said, _, hint = own.group(2).strip().partition("\n  -> ")  # CdcError's text: its message, then its hint
        said = said.removeprefix(f"table {name}: ")  # the applier's own errors name the table
        return kind(f"table {name}: {said[:3000]}", hint=hint.strip()[:2000] or None, table=name)
    if "KAFKA_DATA_LOSS" in text or "data loss" in text.lower():
        return ApplyError(f"table {name}: Kafka no longer holds offsets the job has not applied "
                          f"({_cause(text)[:500]})",
                          hint="the gap cannot be replayed from Kafka; " + REFILL.format(table=name), table=name)
    refused = KAFKA_REFUSED.search(text)
    if refused:
        return ConfigError(f"table {name}: Kafka at {settings.kafka_bootstrap} refused cdc: {refused.group(0)[:500]}",
                           hint="check kafka.security in cdc.yaml (protocol, sasl_mechanism, username, password, "
                                "ca_file; files must exist where Spark's executors run) and the user's ACLs",
                           table=name)
    outage = _outage(settings, reg, text)
    if outage is not None:
        outage.table = name
        return outage
    verdict = _verdict(text)
    if verdict is not None:
        kind, reason, state = verdict
        return ApplyError(f"table {name}: {reason} ([{kind}], SQLSTATE {state})",
                          hint="retrying cannot mend this: the target's schema or a change's values do not fit; "
                               "fix what the error names (the target's columns: `cdc status`, the registration), "
                               "then run the job again", table=name)
    error = ApplyError(f"table {name}: unexpected failure: {_cause(text)[:500]}",
                       hint="if it persists, the full Java trace is in the JSON log (`--log-format json`) and in "
                            f"{spark_log(settings)}", table=name)
    error.retriable = True
    return error


def _outage(settings: Settings, reg: TableRegistration | None, text: str) -> DependencyError | None:
    """A dependency the text shows down, named with its address (None: none is)."""
    if KAFKA.search(text):
        return DependencyError(f"Kafka at {settings.kafka_bootstrap} is unreachable ({_cause(text, KAFKA)[:300]})",
                               hint="bring the brokers back (`cdc stack up` for the local stack) or fix "
                                    "kafka.bootstrap_servers in cdc.yaml")
    c = settings.catalog
    if CATALOG.search(text) or ("REQUIRES_SINGLE_PART_NAMESPACE" in text and f"`{c.name}`" in text):
        where = c.uri if c.type == "rest" else settings.path(c.path)
        cause = _cause(text, CATALOG) if CATALOG.search(text) else probe_catalog(settings)
        return DependencyError(f"catalog {c.name} at {where} is unreachable ({cause[:300]})",
                               hint="bring the catalog back, or fix catalog.* in cdc.yaml")
    if STORAGE.search(text):
        where = storage_location(settings, reg)
        return DependencyError(f"warehouse at {where or 'the catalog default'} cannot be read or written "
                               f"({_cause(text, STORAGE)[:300]})",
                               hint="make the storage readable and writable again (a mount, a bucket's "
                                    "credentials, free space); files the target's metadata names must exist")
    return None


def _verdict(text: str) -> tuple[str, str, str] | None:
    """(error class, message, SQLSTATE) of a Spark error retrying cannot mend: an analysis
    error (SQLSTATE class 42: a column or table that does not fit) or a data error (22)."""
    for kind, message, state in SPARK_ERROR.findall(text):
        if kind in WRAPPERS:
            continue
        return (kind, message, state) if state[:2] in ("42", "22") else None
    return None


def cause_of(e: BaseException) -> str:
    """What an error says in one line: a Java exception's own message (its last cause), not
    py4j's "An error occurred while calling ..."."""
    lines = [line.strip().removeprefix(": ") for line in str(e).splitlines()]
    return _cause("\n".join(line for line in lines if not line.startswith("An error occurred while calling")))


def _cause(text: str, pattern: re.Pattern | None = None) -> str:
    """The line of `text` that says most: the last `Caused by:` (or the first line matching
    `pattern`), without Java's `Caused by:` prefix and stack lines."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("at ")]
    if pattern is not None:
        matching = [line for line in lines if pattern.search(line)]
        if matching:
            lines = matching
    causes = [line[len("Caused by:"):].strip() for line in lines if line.startswith("Caused by:")]
    if causes:
        return causes[-1]
    errors = [f"{m[1]} [{m[0]}]" for m in SPARK_ERROR.findall(text) if m[0] not in WRAPPERS]
    return errors[0] if errors and pattern is None else (lines[0] if lines else "no message")


def probe_catalog(settings: Settings) -> str:
    """Why the catalog cannot be opened, asked through pyiceberg (its answer's first line)."""
    from cdc.sinks.catalog import load_catalog

    try:
        load_catalog(settings).list_namespaces()
    except Exception as e:  # noqa: BLE001 - any client's failure is the answer
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return "Spark could not load it; pyiceberg can now"
