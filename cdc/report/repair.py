"""`cdc repair`: the keys `reconcile --deep` finds differing, fixed (planning/repair.py
decides how). The compare runs beside the table's job; the fix runs with the table's
lock, which a continuous job hands over (control/jobstate.py) and takes back after it:
the extra rows are deleted, Debezium reads the other keys again, and the table's job
applies the reads. A second compare says whether the table is now exact."""
from __future__ import annotations

import sys

from pyspark.sql import functions as F

from cdc import errors
from cdc.config.models import Settings, TableRegistration
from cdc.control import jobstate
from cdc.errors import CdcError
from cdc.jobs.supervisor import run
from cdc.jobs.targets import load_target
from cdc.log import log
from cdc.planning.drift import KINDS
from cdc.planning.repair import (MAX_KEYS, RepairPlan, clear_sql, delete_extras_sql, plan_repair,
                                 remember_extras_sql, snapshot_signals)
from cdc.planning.sql import q
from cdc.register.capture import source_capture
from cdc.register.connector import ConnectClient, connector_name
from cdc.report.deep_reads import DeepReads
from cdc.report.reconcile import reconcile_table
from cdc.sinks.catalog import load_catalog
from cdc.sinks.formats import target_refs
from cdc.sinks.session import get_session
from cdc.sinks.targets import LIVE_ROWS, table_columns
from cdc.sources import module_of


def repair(settings: Settings, reg: TableRegistration, max_keys: int = MAX_KEYS, dry_run: bool = False,
           wait_s: float = 60.0) -> dict:
    """What was found, planned and (unless `dry_run`) done, and the compare after it."""
    compared = _compare(settings, reg, max_keys, wait_s)
    plan = plan_repair(reg.name, compared["deep"], reg.mode, max_keys)
    result = {"table": reg.name, "status": compared["status"],
              "found": {k: compared["deep"][k] for k in KINDS}, "keys": compared["deep"]["keys"],
              "plan": plan.counts(), "dry_run": dry_run}
    if dry_run or plan.empty:
        return result
    with jobstate.exclusive(settings.state_dir, [reg.name]):  # a continuous job hands the table over
        _fix(settings, reg, plan, compared["snapshot_id"])
        run(settings, [reg], available_now=True)  # the reads, and the changes made meanwhile
    after = _compare(settings, reg, max_keys, wait_s, required=False)
    result["after"] = {"status": after["status"], **({k: after["deep"][k] for k in KINDS} if "deep" in after else {}),
                       "keys": after.get("deep", {}).get("keys", [])}
    if "deep" not in after:
        result["after"]["reason"] = after.get("reason")
    return result


def _compare(settings: Settings, reg: TableRegistration, max_keys: int, wait_s: float, required: bool = True) -> dict:
    """reconcile --deep's row for the table, with the target snapshot it compared."""
    client, catalog = ConnectClient.of(settings), load_catalog(settings)
    deep = DeepReads(settings, catalog, max_keys + 1)
    row = reconcile_table(settings, catalog, client, reg, wait_s, deep,
                          capture=source_capture(settings, reg.source.name, client))
    if not row.get("deep", {}).get("compared"):
        if not required:
            row.pop("deep", None)
            return row
        reason = row.get("reason") or row.get("deep", {}).get("reason") or row["status"]
        raise CdcError(f"table {reg.name}: its rows were not compared ({row['status']})",
                       hint=reason, table=reg.name)
    return {**row, "snapshot_id": deep.target_snapshots.get(reg.name)}


def _fix(settings: Settings, reg: TableRegistration, plan: RepairPlan, snapshot_id) -> None:
    spark = get_session(settings).newSession()
    ref, table = load_target(spark, settings, reg)
    deletes_ref = target_refs(settings, reg)[1]
    key = table_columns(table.properties())[1]
    types = {f.name: f.dataType for f in spark.table(ref).schema.fields if f.name in key}
    at = f" VERSION AS OF {int(snapshot_id)}" if snapshot_id is not None else ""
    if plan.delete:
        rows = spark.sql(f"SELECT * FROM {ref}{at} WHERE {LIVE_ROWS[reg.mode]}")  # history: the current versions
        compared = rows.select(*[q(k) for k in key], "_cdc_position").join(_keys(spark, plan.delete, key, types),
                                                                            list(key), "left_semi")
        compared.createOrReplaceTempView("cdc_repair_rows")
        spark.sql(remember_extras_sql(deletes_ref, "cdc_repair_rows", key))
        spark.sql(delete_extras_sql(ref, "cdc_repair_rows", key, reg.mode))
        log(f"{len(plan.delete)} row(s) the source does not hold deleted from the target", table=reg.name,
            event="repair-deleted", stream=sys.stdout, rows=len(plan.delete))
    if plan.clear:
        _keys(spark, plan.clear, key, types).createOrReplaceTempView("cdc_repair_clear")
        spark.sql(clear_sql(ref, "cdc_repair_clear", key, reg.mode))
    if plan.reread:
        _reread(settings, reg, key, list(plan.reread))


def _keys(spark, keys: tuple[dict, ...], key: tuple[str, ...], types: dict):
    """The keys as a frame of the target's key types (from their JSON form: report/deep.py)."""
    text = spark.createDataFrame([[None if k[c] is None else str(k[c]) for c in key] for k in keys],
                                 ", ".join(f"{q(c)} string" for c in key))
    return text.select(*[(F.unhex(q(c)) if types[c].typeName() == "binary" else F.col(q(c))).cast(types[c]).alias(c)
                         for c in key])


def _reread(settings: Settings, reg: TableRegistration, key: tuple[str, ...], keys: list[dict]) -> None:
    """Debezium's incremental snapshot of the keys, one signal after the other, each waited for."""
    src = settings.sources[reg.source.name]
    name = connector_name(reg.source.name)
    client = ConnectClient.of(settings)
    kind = module_of(settings, reg.source.name)
    with kind.connect(settings, reg.source.name) as conn:
        binary = {c.name for c in kind.describe_table(conn, reg).columns if c.kind == "binary"}

        def literal(column: str, value) -> str:
            return kind.literal(conn, bytes.fromhex(value) if column in binary and value is not None else value)

        signals = snapshot_signals(f"{reg.source.schema_}.{reg.source.table}", key, keys, kind.ident, literal,
                                   kind.signal_data_chars(conn, src.signal_table))
        for i, data in enumerate(signals, 1):
            marker = kind.send_snapshot_signal(conn, src.signal_table, data)
            log(f"Debezium reads {len(keys)} key(s) again (signal {i} of {len(signals)})", table=reg.name,
                event="repair-reading", stream=sys.stdout, keys=len(keys))
            client.wait_captured(name, marker)
            client.wait_incremental_snapshot(name)


def exit_code(result: dict) -> int:
    """0: nothing differs (after the repair, or found), or a dry run; 1: keys still differ
    once compared at a commit after the repair; 5 (in flight): the compare after it could
    not be made within the wait."""
    if result["dry_run"] or "after" not in result:
        return 0
    return {"OK": errors.OK, "DRIFT": errors.DIFFERENCE}.get(result["after"]["status"], errors.IN_FLIGHT)


def format_text(result: dict) -> str:
    found, plan = result["found"], result["plan"]
    total = sum(found.values())
    lines = [f"{result['table']}: {total} key(s) differ"
             + (": " + ", ".join(f"{n} {kind}" for kind, n in found.items() if n) if total else "")]
    if total:
        shown = ", ".join(f"{k['kind']} {k['key']}" for k in result["keys"][:10])
        lines.append(f"  keys: {shown}{', ...' if len(result['keys']) > 10 else ''}")
        verb = "would " if result["dry_run"] else ""
        lines.append(f"  {verb}delete {plan['delete']} row(s) the source does not hold, {plan['clear']} key(s) held "
                     f"twice, and {verb}read {plan['reread']} key(s) again from the source through Debezium")
    if "after" in result:
        after = result["after"]
        left = sum(after.get(kind, 0) for kind in KINDS)
        lines.append(f"  after the repair: {after['status']}" + (f", {left} key(s) still differ" if left else "")
                     + (f" (not compared: {after['reason']})" if after.get("reason") else ""))
        if after.get("keys"):
            shown = ", ".join(f"{k['kind']} {k['key']}" for k in after["keys"][:10])
            lines.append(f"  still differing: {shown}{', ...' if len(after['keys']) > 10 else ''}")
    return "\n".join(lines)
