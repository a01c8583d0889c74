"""One exception tree for cdc. Every error says what failed, the value, and what to do."""
from __future__ import annotations


class CdcError(Exception):
    """Base of every error cdc raises on purpose. `exit_code` is the CLI's exit status."""

    exit_code = 3
    retriable = False  # a job retries it for a while (an outage), rather than failing at once

    def __init__(self, message: str, *, hint: str | None = None, table: str | None = None):
        self.message = message
        self.hint = hint
        self.table = table  # the registered table concerned, when there is one
        self.detail: str | None = None  # what a Java failure said in full (stack traces): JSON log only
        super().__init__(f"{message}\n  -> {hint}" if hint else message)


class ConfigError(CdcError, ValueError):
    """cdc.yaml or a table registration is invalid, or the command line is."""

    exit_code = 2


class SourceError(CdcError):
    """The source database cannot be reached or does not hold what a registration names."""

    exit_code = 2


class StackError(CdcError):
    """A local service (Kafka, Connect, PostgreSQL) could not be started or checked."""


class ConnectorError(CdcError):
    """Kafka Connect refused or failed a Debezium connector."""


class DependencyError(CdcError):
    """Kafka, Kafka Connect, the catalog or the warehouse is unreachable: worth retrying for a while."""

    retriable = True


class DecodeError(CdcError, ValueError):
    """A change event does not follow the Debezium envelope rules."""


class ApplyError(CdcError):
    """A micro-batch could not be applied to its target table."""


class CheckFailed(CdcError):
    """A check found a difference (reconciliation drift)."""

    exit_code = 1


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
