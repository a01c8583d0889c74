"""One exception tree for cdc. Every error says what failed, the value, and what to do.

Each error's `exit_code` is the command line's exit status, the same in every command
(docs/operations.md, "Exit codes and JSON"):"""
from __future__ import annotations

OK = 0  # done; every check passed
DIFFERENCE = 1  # a check found a difference: drift, a failed preflight check, a bound exceeded
USAGE = 2  # bad usage or configuration (cdc.yaml, a registration, the command line, a refused name)
FAILED = 3  # a job or command failed: a table given up, a connector refused, capture stopped
UNREACHABLE = 4  # a source database or a service (Kafka, Connect, catalog, registry) cannot be reached
IN_FLIGHT = 5  # not settled yet: changes still in transit, or another process holds the table
EXIT_CODES = {OK: "success", DIFFERENCE: "a check found a difference", USAGE: "bad usage or configuration",
              FAILED: "a job or command failed", UNREACHABLE: "a source or a service is unreachable",
              IN_FLIGHT: "in flight: run again later"}  # and 128 + N: stopped by signal N (130, 143)


class CdcError(Exception):
    """Base of every error cdc raises on purpose. `exit_code` is the CLI's exit status."""

    exit_code = FAILED
    retriable = False  # a job retries it for a while (an outage), rather than failing at once

    def __init__(self, message: str, *, hint: str | None = None, table: str | None = None):
        self.message = message
        self.hint = hint
        self.table = table  # the registered table concerned, when there is one
        self.detail: str | None = None  # what a Java failure said in full (stack traces): JSON log only
        super().__init__(f"{message}\n  -> {hint}" if hint else message)


class ConfigError(CdcError, ValueError):
    """cdc.yaml or a table registration is invalid, or the command line is."""

    exit_code = USAGE


class SourceError(CdcError):
    """The source database does not hold what a registration names, or is not set up for capture."""

    exit_code = USAGE


class SourceUnreachable(SourceError):
    """The source database cannot be reached (down, refused, or the login is wrong)."""

    exit_code = UNREACHABLE


class StackError(CdcError):
    """A local service (Kafka, Connect, PostgreSQL) could not be started or checked."""


class ConnectorError(CdcError):
    """Kafka Connect refused or failed a Debezium connector."""


class DependencyError(CdcError):
    """Kafka, Kafka Connect, the catalog or the warehouse is unreachable: worth retrying for a while."""

    exit_code = UNREACHABLE
    retriable = True


class DecodeError(CdcError, ValueError):
    """A change event does not follow the Debezium envelope rules."""


class ApplyError(CdcError):
    """A micro-batch could not be applied to its target table."""


class Busy(CdcError):
    """Another process holds the table (a job, a replay or a bootstrap): run again later."""

    exit_code = IN_FLIGHT


class Interrupted(BaseException):
    """SIGINT or SIGTERM interrupted a command: no failure of cdc, so outside the CdcError
    tree, and a BaseException, which no `except Exception` of a retry loop takes for a
    failure (not a KeyboardInterrupt either: py4j logs those with a traceback). The
    command line exits 128 + the signal's number (130 SIGINT, 143 SIGTERM)."""

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.signal = signal.Signals(signum).name
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {self.signal}")
