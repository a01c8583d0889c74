"""Schema evolution (design rule 7), decided from names and kinds alone: which source
columns the target gains, which it widens, and which changes stop the table's job."""
from __future__ import annotations

from dataclasses import dataclass, replace

from cdc.errors import ApplyError
from cdc.sources.types import Column

# (old kind, new kind) pairs whose target type widens safely, or stays the same.
WIDENINGS = {("int", "long"), ("float", "double"), ("timestamp_ms", "timestamp_us"), ("time_ms", "time_us")}


@dataclass(frozen=True)
class Evolution:
    columns: tuple[Column, ...]  # the target's columns afterwards, in order
    added: tuple[Column, ...] = ()
    widened: tuple[Column, ...] = ()  # with their new kind

    @property
    def changed(self) -> bool:
        return bool(self.added or self.widened)


def _widens(old: Column, new: Column) -> bool:
    if old.spark_type == new.spark_type or (old.kind, new.kind) in WIDENINGS:
        return True
    return (old.kind == new.kind == "decimal" and new.scale == old.scale and new.precision >= old.precision)


def evolve(table: str, current: tuple[Column, ...], seen: list[Column], key: tuple[str, ...],
           older: list[Column] = ()) -> Evolution:
    """`current` columns against those a batch's newest events describe (`seen`), after
    those of its older events (`older`, oldest first: there a narrower form of a column, a
    record from before a widening, fits as it is). A column the events no longer carry
    stays (nullable). A change that is no safe widening raises."""
    by_name = {c.name: c for c in current}
    added, widened = [], []
    for is_older, new in [(True, c) for c in older] + [(False, c) for c in seen]:
        old = by_name.get(new.name)
        if old is None:
            added.append(replace(new, nullable=True))
            by_name[new.name] = added[-1]
            continue
        if old.spark_type == new.spark_type and old.kind == new.kind:
            continue
        if is_older and _widens(new, old):
            continue
        if not _widens(old, new) or new.name in key and old.spark_type != new.spark_type:
            raise ApplyError(
                f"table {table}: column {new.name!r} changed type at the source from {old.source_type or old.kind} "
                f"({old.spark_type}) to {new.source_type or new.kind} ({new.spark_type}), which is not a safe "
                f"widening of the target column",
                hint=f"nothing of this batch was committed; to take the new type, drop the target and its "
                     f"__cdc_* tables, then `cdc register --table {table}` and `cdc bootstrap --table {table}`",
                table=table)
        if old.spark_type != new.spark_type or old.kind != new.kind:
            widened.append(replace(new, nullable=old.nullable))
            by_name[new.name] = widened[-1]
    columns = tuple(by_name[c.name] for c in current) + tuple(added)
    return Evolution(columns, tuple(added), tuple(widened))
