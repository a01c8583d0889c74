"""A registered table's lineage (cdc/lineage) read from what registration recorded: the source
in cdc.yaml, and the target's location, columns, topic and masking key's fingerprint from its
properties (through pyiceberg or delta-rs, without Spark). Lineage never holds replication
back: a run's events are made and sent off the job's thread, and a target that cannot be
read, or an event that cannot be sent, is a warning. The OpenLineage client takes most of a
second to import, so it is imported only when `lineage` is on."""
from __future__ import annotations

import datetime as dt
import threading
import uuid

from pyiceberg.exceptions import NoSuchTableError

from cdc.config.models import Settings, TableRegistration
from cdc.log import log
from cdc.planning.protect import PROP_MASK_KEY
from cdc.sinks import delta
from cdc.sinks.catalog import load_catalog
from cdc.sinks.targets import table_columns

ENDED_WAIT_S = 30.0  # how long the end of a run waits for its START events to be sent


def _recorded(settings: Settings, catalog, reg: TableRegistration) -> tuple[dict, str] | None:
    """The target's properties and location (None: it does not exist)."""
    if reg.sink == "delta":
        table = delta.open_table(delta.location(settings, reg.target))
        return None if table is None else (delta.properties(table), table.table_uri)
    try:
        table = catalog.load_table(reg.target)
    except NoSuchTableError:
        return None
    return table.properties, table.metadata.location


def flow_of(settings: Settings, catalog, reg: TableRegistration):
    """The table's path from source to target, an events.Flow (None: its target does not exist)."""
    from cdc.lineage import events

    recorded = _recorded(settings, catalog, reg)
    if recorded is None:
        return None
    properties, location = recorded
    columns, _, topic = table_columns(properties)
    src = settings.sources[reg.source.name]
    alias = None if reg.sink == "delta" else events.Place(f"iceberg://{settings.catalog.name}", reg.target)
    return events.Flow(
        table=reg.name,
        source=events.place_of_source(src.kind, src.host, src.port, src.database, reg.source.schema_,
                                      reg.source.table),
        topic=events.place_of_topic(settings.kafka_bootstrap, topic),
        target=events.place_of_location(location), target_alias=alias,
        columns=tuple((c.name, c.source_type or c.kind) for c in columns),
        masked=tuple(reg.mask), excluded=tuple(reg.exclude),
        mask_fingerprint=properties.get(PROP_MASK_KEY), masked_in_connector=settings.masking.in_connector)


def flows(settings: Settings, tables: list[TableRegistration]) -> dict:
    """The flows of the tables whose targets exist, by table name; none while the targets
    cannot be read (a warning)."""
    if not tables:
        return {}
    try:
        catalog = load_catalog(settings)
        found = {reg.name: flow_of(settings, catalog, reg) for reg in tables}
    except Exception as e:  # noqa: BLE001 - the catalog or storage unreachable: the jobs meet it themselves
        from cdc.lineage.emit import first_line

        log(f"lineage: the targets could not be read, no event is sent: {first_line(e)}", level="warning",
            event="lineage-not-sent")
        return {}
    return {name: flow for name, flow in found.items() if flow is not None}


def new_run_id() -> str:
    return str(uuid.uuid4())


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def send_registered(settings: Settings, tables: list[TableRegistration]) -> None:
    """After `cdc register`: each table's capture job, source table -> topic."""
    if not settings.lineage.on:
        return
    from cdc.lineage import events
    from cdc.lineage.emit import Lineage

    lineage = Lineage(settings)
    lineage.send([events.captured(lineage.namespace, flow, new_run_id(), now())
                  for flow in flows(settings, tables).values()])


class RunLineage:
    """The apply jobs' runs of one `cdc run`: a START per table as it begins (made and sent on
    a thread of its own), then COMPLETE, or FAIL with the table's error."""

    def __init__(self, settings: Settings, tables: list[TableRegistration], read=flows):
        self.settings, self.tables, self.read = settings, tables, read  # read: the tables' flows (`flows`)
        self.flows: dict = {}
        self.runs: dict[str, str] = {}
        self._starting: threading.Thread | None = None

    def started(self) -> None:
        if not self.settings.lineage.on:
            return

        def start() -> None:
            self.flows = self.read(self.settings, self.tables)
            self.runs = {name: new_run_id() for name in self.flows}
            self._send({name: ("START", None) for name in self.flows})

        self._starting = threading.Thread(target=start, daemon=True, name="cdc-lineage")
        self._starting.start()

    def ended(self, failed: dict[str, str]) -> None:
        """`failed`: the tables that failed, with their error."""
        if self._starting is not None:
            self._starting.join(ENDED_WAIT_S)
            if self._starting.is_alive():  # still waiting on the catalog or the server: no end without a start
                return
        self._send({name: ("FAIL", failed[name]) if name in failed else ("COMPLETE", None) for name in self.flows})

    def _send(self, states: dict[str, tuple[str, str | None]]) -> None:
        if not states:
            return
        from cdc.lineage import events
        from cdc.lineage.emit import Lineage

        lineage, at = Lineage(self.settings), now()
        lineage.send([events.applied(lineage.namespace, self.flows[name], self.runs[name], at, state, error)
                      for name, (state, error) in sorted(states.items())])
