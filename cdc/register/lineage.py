"""A registered table's lineage (cdc/lineage) read from what registration recorded: the source
in cdc.yaml, and the target's location, columns, topic and masking key's fingerprint from its
properties (through pyiceberg or delta-rs, without Spark). Lineage never holds replication
back: a run's events are made and sent off the job's thread, and a target that cannot be
read, or an event that cannot be sent, is a warning. The OpenLineage client takes most of a
second to import, so it is imported only when `lineage` is on."""
from __future__ import annotations

import datetime as dt
import queue
import threading
import uuid

from pyiceberg.exceptions import NoSuchTableError

from cdc.config.models import Settings, TableRegistration
from cdc.control import jobstate
from cdc.log import log
from cdc.planning.protect import PROP_MASK_KEY
from cdc.sinks import delta
from cdc.sinks.catalog import load_catalog
from cdc.sinks.targets import table_columns

ENDED_WAIT_S = 30.0  # how long the end of a run waits for its events to be sent


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
    """The apply jobs' runs of one `cdc run`: a START per table as it begins, then COMPLETE,
    or FAIL with the table's error. A continuous job ends a table's run with FAIL when it
    gives the table up, and starts a new one (START) when the table runs again, as it does
    for a table registered while it runs; a table no longer registered ends its run
    (COMPLETE). Events are made and sent in order on a thread of their own (a daemon: a
    lineage server that never answers holds no process back)."""

    def __init__(self, settings: Settings, tables: list[TableRegistration], read=flows):
        self.settings, self.tables, self.read = settings, tables, read  # read: the tables' flows (`flows`)
        self.flows: dict = {}
        self.runs: dict[str, str] = {}  # each table's run id, the last one started
        self.open: set[str] = set()  # the tables whose run has started and not ended
        self._tasks: queue.Queue | None = None  # what the lineage thread does, in order

    def _later(self, task) -> None:
        """`task` run on the lineage thread, after those given before it."""
        if self._tasks is None:
            self._tasks = queue.Queue()
            threading.Thread(target=self._work, daemon=True, name="cdc-lineage").start()
        self._tasks.put(task)

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            try:
                task()
            except Exception as e:  # noqa: BLE001 - lineage never stops replication
                from cdc.lineage.emit import first_line

                log(f"lineage: an event could not be made: {first_line(e)}", level="warning",
                    event="lineage-not-sent")
            finally:
                self._tasks.task_done()

    def started(self) -> None:
        if not self.settings.lineage.on:
            return

        def start() -> None:
            self.flows = self.read(self.settings, self.tables)
            self.runs = {name: new_run_id() for name in self.flows}
            self.open = set(self.flows)
            self._send({name: ("START", None) for name in self.flows})

        self._later(start)

    def record(self, table: str, state: str, error: str | None = None,
               reg: TableRegistration | None = None) -> None:
        """Table `table`'s job state, as the job records it (control/jobstate.py): `failed`
        ends its run with FAIL and `error`; `running` after that (or for a table the run did
        not start with, `reg`) starts a new run, its flow read again."""
        if not self.settings.lineage.on or state not in (jobstate.FAILED, jobstate.RUNNING):
            return

        def send() -> None:
            if state == jobstate.FAILED:
                if table in self.open:
                    self.open.discard(table)
                    self._send({table: ("FAIL", error or "failed")})
                return
            if table in self.open or reg is None:
                return
            flow = self.read(self.settings, [reg]).get(table)
            if flow is not None:
                self.flows[table], self.runs[table] = flow, new_run_id()
                self.open.add(table)
                self._send({table: ("START", None)})

        self._later(send)

    def removed(self, table: str) -> None:
        """Table `table` is no longer registered: its run ends (COMPLETE)."""
        if not self.settings.lineage.on:
            return

        def end() -> None:
            if table in self.open:
                self.open.discard(table)
                self._send({table: ("COMPLETE", None)})

        self._later(end)

    def ended(self, failed: dict[str, str]) -> None:
        """`failed`: the tables that failed, with their error. The runs still open end; the
        events before it are waited for up to ENDED_WAIT_S (no end without its start)."""
        if self._tasks is None:
            return
        done = threading.Event()

        def end() -> None:
            self._send({name: ("FAIL", failed[name]) if name in failed else ("COMPLETE", None)
                        for name in sorted(self.open)})
            self.open.clear()
            done.set()

        self._later(end)
        done.wait(ENDED_WAIT_S)  # still waiting on the catalog or the server after it: the rest is dropped

    def _send(self, states: dict[str, tuple[str, str | None]]) -> None:
        if not states:
            return
        from cdc.lineage import events
        from cdc.lineage.emit import Lineage

        lineage, at = Lineage(self.settings), now()
        lineage.send([events.applied(lineage.namespace, self.flows[name], self.runs[name], at, state, error)
                      for name, (state, error) in sorted(states.items())])
