"""`register`'s watch over Debezium's snapshot: a table with rows whose topic gained no
record when the snapshot is over is named, not marked snapshotted."""
from __future__ import annotations

from cdc.config.models import TableRegistration
from cdc.register.registrar import SnapshotProgress


class Source:
    """A source module's two questions, answered from a dict of table -> rows."""

    def __init__(self, rows: dict[str, int]):
        self.rows = rows

    def estimate_rows(self, conn, reg: TableRegistration) -> int:
        return self.rows[reg.source.table]

    def has_rows(self, conn, reg: TableRegistration) -> bool:
        return self.rows[reg.source.table] > 0


class Topics(SnapshotProgress):
    """Each topic's records, read from a list of readings in turn."""

    def __init__(self, readings: list[dict[str, int]], *args):
        self.readings = readings
        super().__init__(*args)

    def _by_topic(self) -> dict[str, int]:
        return self.readings.pop(0)


def reg(table: str, name: str | None = None) -> TableRegistration:
    return TableRegistration(name=name or f"shop.{table}", source={"name": "src", "schema": "shop", "table": table})


def test_a_table_with_rows_whose_topic_gained_nothing_is_named():
    tables = [reg("full"), reg("empty"), reg("missed")]
    before = {"src.shop.full": 10, "src.shop.empty": 0, "src.shop.missed": 4}
    after = {"src.shop.full": 13, "src.shop.empty": 0, "src.shop.missed": 4}
    source = Source({"full": 3, "empty": 0, "missed": 2})
    progress = Topics([before, after], None, source, None, tables)
    assert progress.estimate == 5 and [t.name for t in progress.silent(source, None)] == ["shop.missed"]


def test_two_registrations_of_one_table_share_its_topic():
    tables = [reg("twin"), reg("twin", "shop.twin_history")]
    progress = Topics([{"src.shop.twin": 0}, {"src.shop.twin": 5}], None, Source({"twin": 5}), None, tables)
    assert progress.topics == ["src.shop.twin"] and progress.silent(Source({"twin": 5}), None) == []


def test_nothing_is_asked_when_no_table_is_watched():
    progress = Topics([], None, Source({}), None, [])
    assert progress.silent(Source({}), None) == []
