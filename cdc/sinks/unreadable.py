"""A registered target that cannot be read (its metadata file moved away or corrupt, a file
it names gone), as that table's problem alone: the commands that read many tables (status,
cut, reconcile) report it in its row and go on with the others."""
from __future__ import annotations

from cdc.config.models import Settings, TableRegistration
from cdc.errors import CdcError
from cdc.sinks.formats import shown_name


def unreadable_target(settings: Settings, reg: TableRegistration, exc: Exception) -> CdcError:
    """A target that is registered and cannot be read (its metadata file moved away or
    corrupt, a file it names gone), as that table's problem: what failed and what to do.
    cdc's own errors are raised again as they are: an unreachable catalog or service is every
    table's problem, and the others carry their own message and exit code."""
    if isinstance(exc, CdcError):
        raise exc
    why = (getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}").splitlines()[0][:300]
    return CdcError(f"its target {shown_name(settings, reg)} cannot be read: {why}", table=reg.name,
                    hint=f"restore what the error names (the target's metadata file, or a file it refers to); or "
                         f"drop the target and re-create it: `cdc register --table {reg.name}`, then "
                         f"`cdc bootstrap --table {reg.name}`")
