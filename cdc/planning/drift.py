"""The kinds of difference `reconcile --deep` finds between a table's source and target rows."""
from __future__ import annotations

MISSING, EXTRA, DIFFERENT, DUPLICATE = "missing", "extra", "different", "duplicate"
KINDS = (MISSING, EXTRA, DIFFERENT, DUPLICATE)


def differences(found: dict) -> int:
    """The differing keys of a compare's result, whatever their kind."""
    return sum(found[kind] for kind in KINDS)
