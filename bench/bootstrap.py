"""Bootstrap rates on one table: the JDBC method (a parallel read in one exported
snapshot, appended in bulk) against the Debezium method (the connector's incremental
snapshot through Kafka, applied by the job). Each is timed end to end by `cdc bootstrap`,
catch-up included, and the target then holds exactly the source's rows."""
from __future__ import annotations

from bench.workload import create_source_table, registration, timed
from cdc.bootstrap.load import bootstrap
from cdc.planning.merge import table_ref
from cdc.register.connector import ConnectClient, connector_name
from cdc.register.registrar import register
from cdc.sources import postgres


def measure(spark, settings, rows: int) -> dict:
    reg = registration(settings, "boot", captured=True)
    create_source_table(settings, reg)
    register(settings, [reg])
    create_source_table(settings, reg, rows)  # streamed in; then each method reads the table again
    with postgres.connect(settings, reg.source.name) as conn:
        marker = postgres.write_marker(conn, settings.sources[reg.source.name].signal_table)
    ConnectClient.of(settings).wait_captured(connector_name(reg.source.name), marker, timeout_s=900)
    ref = table_ref(settings.catalog.name, reg.target)
    out = {"bootstrap_rows": rows}
    for method in ("jdbc", "debezium"):
        seconds = timed(lambda: bootstrap(settings, reg, method=method))
        held = spark.table(ref).count()
        if held != rows:
            raise RuntimeError(f"the {method} bootstrap left {held} rows in {ref}, the source has {rows}")
        out[f"bootstrap_{method}_rows_per_s"] = round(rows / seconds)
        print(f"bootstrap {method}: {rows:,} rows in {seconds:.1f}s, {rows / seconds:,.0f} rows/s", flush=True)
    out["bootstrap_jdbc_vs_debezium"] = round(out["bootstrap_jdbc_rows_per_s"] / out["bootstrap_debezium_rows_per_s"], 2)
    return out
