"""A registered table's lineage (cdc/lineage) read from what registration recorded: the source
in cdc.yaml, and the target's location, columns, topic and masking key's fingerprint from its
properties (through pyiceberg or delta-rs, without Spark). The OpenLineage client takes most
of a second to import, so it is imported only when `lineage` is on."""
from __future__ import annotations

import datetime as dt
import uuid

from cdc.config.models import Settings, TableRegistration
from cdc.log import log
from cdc.planning.protect import PROP_MASK_KEY
from cdc.sinks.catalog import load_catalog
from cdc.sinks.found import found_target
from cdc.sinks.targets import table_columns


def flow_of(settings: Settings, catalog, reg: TableRegistration):
    """The table's path from source to target, an events.Flow (None: its target does not exist)."""
    from cdc.lineage import events

    found = found_target(settings, catalog, reg)
    if found is None:
        return None
    columns, key, topic = table_columns(found["properties"])
    src = settings.sources[reg.source.name]
    alias = None if reg.sink == "delta" else events.Place(f"iceberg://{settings.catalog.name}", reg.target)
    return events.Flow(
        table=reg.name,
        source=events.place_of_source(src.kind, src.host, src.port, src.database, reg.source.schema_,
                                      reg.source.table),
        topic=events.place_of_topic(settings.kafka_bootstrap, topic),
        target=events.place_of_location(found["location"]), target_alias=alias,
        columns=tuple((c.name, c.source_type or c.kind) for c in columns), key=key,
        masked=tuple(reg.mask), excluded=tuple(reg.exclude),
        mask_fingerprint=found["properties"].get(PROP_MASK_KEY), masked_in_connector=settings.masking.in_connector,
        mode=reg.mode, sink=reg.sink)


def flows(settings: Settings, tables: list[TableRegistration]) -> dict:
    """The flows of the tables whose targets exist, by table name; none while the targets
    cannot be read (a warning: lineage never holds replication back)."""
    if not tables:
        return {}
    try:
        catalog = load_catalog(settings)
        found = {reg.name: flow_of(settings, catalog, reg) for reg in tables}
    except Exception as e:  # noqa: BLE001 - the catalog or storage unreachable: the jobs meet it themselves
        log(f"lineage: the targets could not be read, no event is sent: {str(e).splitlines()[0][:300]}",
            level="warning", event="lineage-not-sent")
        return {}
    return {name: flow for name, flow in found.items() if flow is not None}


def new_run_id() -> str:
    return str(uuid.uuid4())


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def enabled(settings: Settings) -> bool:
    return settings.lineage.transport != "none"


def send_registered(settings: Settings, tables: list[TableRegistration]) -> None:
    """After `cdc register`: each table's capture job, source table -> topic."""
    if not enabled(settings):
        return
    from cdc.lineage import events
    from cdc.lineage.emit import Lineage

    lineage = Lineage(settings)
    lineage.send([events.captured(lineage.namespace, flow, new_run_id(), now())
                  for flow in flows(settings, tables).values()])


class RunLineage:
    """The apply jobs' runs of one `cdc run`: a START per table as it begins, then COMPLETE, or
    FAIL with the table's error."""

    def __init__(self, settings: Settings, tables: list[TableRegistration]):
        self.settings = settings
        self.flows = flows(settings, tables) if enabled(settings) else {}
        self.runs = {name: new_run_id() for name in self.flows}

    def started(self) -> None:
        self._send({name: ("START", None) for name in self.flows})

    def ended(self, failed: dict[str, str]) -> None:
        """`failed`: the tables that failed, with their error."""
        self._send({name: ("FAIL", failed[name]) if name in failed else ("COMPLETE", None) for name in self.flows})

    def _send(self, states: dict[str, tuple[str, str | None]]) -> None:
        if not self.flows:
            return
        from cdc.lineage import events
        from cdc.lineage.emit import Lineage

        lineage, at = Lineage(self.settings), now()
        lineage.send([events.applied(lineage.namespace, self.flows[name], self.runs[name], at, state, error)
                      for name, (state, error) in sorted(states.items())])
