"""Several tables' small batches of a shared query in one Spark job: one task that reads their
topics' ranges (with one Kafka consumer: reading.kafka_records), decodes, counts and writes
each table's part (sinks/direct.py's `write_parts`), then each table committed on its own, as
its batch alone would be. A table whose part needs a query (a bad record, a truncate, a schema
not judged yet...) is left to a batch of its own; the others are not held back by it."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from cdc.jobs.reading import spanning
from cdc.log import log
from cdc.sinks.direct import write_parts
from cdc.sinks.session import make_active

TOGETHER = "together"  # a table's step of the job it shared with others, in its batch's log line
COMMITTERS = 4  # tables committed at once after their parts are written (a commit waits mostly on the catalog)


class Together:
    """A shared query's `apply_together` (jobs/shared.py): `appliers` and `sessions` by table
    (the SharedBatch's own), `read` the records of a read's ranges (reading.kafka_records's
    arguments after the session's)."""

    def __init__(self, appliers: dict, sessions: dict, read):
        self.appliers, self.sessions, self.read = appliers, sessions, read

    def __call__(self, ranges: dict[str, tuple], waited_s: float) -> dict[str, bool | BaseException]:
        """Apply the tables' `ranges` (name -> (batch id, start, end, records)) in one job, after
        `waited_s` for a slot; by table, True when applied, False when it needs a batch of its
        own, or its error."""
        done: dict[str, bool | BaseException] = {}
        first = self.sessions[next(iter(ranges))]
        make_active(first)
        batch = self._read(first, ranges)
        parts = {}
        for name, (batch_id, start, end, records) in ranges.items():
            try:
                part = self.appliers[name].direct_part(self.sessions[name], batch.schema, start, end, records,
                                                      batch_id, waited_s)
            except Exception as e:  # noqa: BLE001 - the table's failure, not the others'
                done[name] = e
                continue
            if part is None:
                done[name] = False
            else:
                parts[name] = part
        if not parts:
            return done
        if len(parts) < len(ranges):  # read only the tables that take part
            batch = self._read(first, {name: ranges[name] for name in parts})
        began = time.monotonic()
        try:
            written = write_parts(first, batch, [p.jvm for p in parts.values()],
                                  min(p.applier.direct_bytes for p in parts.values()))
        except Exception as e:  # noqa: BLE001 - each table then takes a batch of its own
            log(f"the job of {len(parts)} tables' batches failed, each is applied alone: "
                f"{str(e).splitlines()[0][:300]}",
                event="together-failed", level="warning", tables=sorted(parts))
            return done | {name: False for name in parts}
        took = time.monotonic() - began
        decode, write, compile_, prepare, read, find = (sum(t) for t in zip(*(w.task_s() for w in written)))
        read /= len(written)  # the task's, in each part's
        log(f"{len(parts)} tables' batches decoded and written by one job in {took:.2f}s (preparing {prepare:.2f}s; "
            f"its task: reading {read:.2f}s, decoding {decode:.2f}s, of it compiling {compile_:.2f}s, writing "
            f"{write:.2f}s, of it finding the current rows {find:.2f}s)",
            event="together", tables=sorted(parts), seconds=round(took, 3), decode_s=round(decode, 3),
            write_s=round(write, 3))
        for part in parts.values():
            part.applier.timer.steps[TOGETHER] = took  # the job all of them shared
        with ThreadPoolExecutor(min(COMMITTERS, len(parts)), thread_name_prefix="cdc-commit") as pool:
            futures = {name: pool.submit(_done, part, w) for (name, part), w in zip(parts.items(), written)}
        for name, future in futures.items():
            try:
                done[name] = future.result()
            except Exception as e:  # noqa: BLE001 - the table's failure, not the others'
                done[name] = e
        return done

    def _read(self, spark, ranges: dict[str, tuple]):
        return self.read(spark, spanning([(self.appliers[name].topic, start, end)
                                          for name, (_, start, end, _) in ranges.items()]))


def _done(part, written) -> bool:
    make_active(part.spark)  # on the committing thread
    return part.applier.direct_done(part, written)
