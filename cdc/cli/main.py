"""The `cdc` command line. Exit codes, the same in every command (errors.EXIT_CODES):
0 success, 1 a check found a difference, 2 bad usage or configuration, 3 a job or
command failed, 4 a source or a service is unreachable, 5 in flight (run again later),
130/143 interrupted by SIGINT/SIGTERM (a continuous `cdc run` stops on either and exits 0)."""
from __future__ import annotations

import argparse
import os
import sys
import time

from cdc.config import load_settings, load_tables
from cdc.config.models import SINKS
from cdc.errors import CdcError, Interrupted
from cdc.jobs import shutdown
from cdc.log import FORMATS, log, set_format
from cdc.report import document


def _stack(args) -> int:
    from cdc.stack.manager import Stack

    stack = Stack(load_settings(args.config))
    if args.action == "up":
        stack.up()
        print(f"stack up: kafka {stack.kafka.bootstrap}"
              + (f" (SASL_SSL {stack.kafka.sasl_bootstrap})" if stack.kafka.sasl_port else "")
              + f", connect {stack.connect.url}, "
              f"postgres 127.0.0.1:{stack.postgres.port}"
              + (f", mariadb 127.0.0.1:{stack.mariadb.port}" if stack.settings.stack.mariadb_port else "")
              + (f", schema registry {stack.registry.url}" if stack.settings.stack.registry_port else ""))
    elif args.action == "down":
        stack.down(purge=args.purge)
        print("stack down" + (" (state purged)" if args.purge else ""))
    else:
        status = stack.status()
        if args.json:
            print(document.dumps(**status))
        else:
            for name, svc in status["services"].items():
                state = "healthy" if svc["healthy"] else ("running" if svc["pid"] else "stopped")
                print(f"{name:9} {state:8} pid={svc['pid'] or '-'}  log={svc['log']}")
            print(f"kafka_bootstrap {status['kafka_bootstrap']}\nconnect_url     {status['connect_url']}")
            if status["kafka_sasl"]:
                sasl = status["kafka_sasl"]
                print(f"kafka_sasl      {sasl['bootstrap']} ({sasl['protocol']} {sasl['sasl_mechanism']}, user "
                      f"{sasl['username']}, password_file {sasl['password_file']}, ca_file {sasl['ca_file']})")
    return 0


def _register(args) -> int:
    from cdc.register.registrar import register

    settings = load_settings(args.config)
    if args.dry_run:
        print("dry run: nothing is changed")
    register(settings, load_tables(settings, args.table), wait_snapshot=not args.no_wait, dry_run=args.dry_run)
    return 0


def _tables(args) -> int:
    from cdc.register import tables

    settings = load_settings(args.config)
    if args.action == "add":
        path = tables.add(settings, args.schema, args.table, source=args.source, name=args.name, sink=args.sink,
                          key=tuple(k.strip() for k in args.key.split(",")) if args.key else None)
        print(path.read_text(), end="")
        print(f"wrote {path}; next: cdc register --table {path.stem} --dry-run, then without --dry-run")
        return 0
    if args.action == "remove":
        from cdc.register.removal import remove

        (reg,) = load_tables(settings, args.name)
        for line in remove(settings, reg, drop_target=args.drop_target):
            print(f"{reg.name}: {line}")
        return 0
    rows = tables.listing(settings)
    print(document.dumps(tables=rows) if args.json else tables.format_listing(rows))
    return 0


def _capture(args) -> int:
    from cdc.register.registrar import restart_capture

    restart_capture(load_settings(args.config), args.source)
    return 0


def _run(args) -> int:
    from cdc.jobs.runner import run

    settings = load_settings(args.config)
    tables = load_tables(settings, args.table)
    if args.metrics_port:
        from cdc.jobs.metrics import serve

        serve(args.metrics_port)
        print(f"metrics on http://127.0.0.1:{args.metrics_port}/metrics")
    run(settings, tables, available_now=args.available_now)
    return 0


def _replay(args) -> int:
    from cdc.jobs.runner import replay

    settings = load_settings(args.config)
    (reg,) = load_tables(settings, args.table)
    replay(settings, reg, earliest=args.from_earliest, offsets=args.from_offsets, timestamp=args.from_timestamp,
           position=args.from_position)
    return 0


def _bootstrap(args) -> int:
    from cdc.bootstrap.load import bootstrap

    settings = load_settings(args.config)
    (reg,) = load_tables(settings, args.table)
    bootstrap(settings, reg, method=args.method, chunk_rows=args.chunk_rows, restart=args.restart)
    return 0


def _reconcile(args) -> int:
    from cdc.report.reconcile import exit_code, format_json, format_text, reconcile

    settings = load_settings(args.config)
    tables = load_tables(settings, args.table)
    rows = reconcile(settings, tables, wait_s=args.wait, deep=args.deep, limit=args.limit)
    if args.format == "html":
        from cdc.report import history
        from cdc.report.html import format_html
        from cdc.sinks.catalog import load_catalog

        report = format_html(rows, history.read(load_catalog(settings), [t.name for t in tables]))
    else:
        report = format_json(rows) if args.format == "json" else format_text(rows)
    if args.out:
        from pathlib import Path

        Path(args.out).write_text(report + "\n")
        print(f"reconciliation report written to {args.out}")
    else:
        print(report)
    return exit_code(rows)


def _maintain(args) -> int:
    from cdc.jobs.maintenance import maintain

    settings = load_settings(args.config)
    tables = load_tables(settings, args.table)
    while True:
        try:
            maintain(settings, tables)
        except CdcError as e:
            if not args.every:
                raise
            print(f"cdc: error: {e}", file=sys.stderr)  # the next round tries again
        if not args.every:
            return 0
        time.sleep(args.every)


def _status(args) -> int:
    from cdc.report.status import format_text, problems, status

    settings = load_settings(args.config)
    rows, captures = status(settings, load_tables(settings, args.table))
    code, found = problems(rows, captures, args.max_lag, args.max_age)
    if args.json:
        print(document.dumps(ok=code == 0, problems=found, tables=rows, sources=captures))
    else:
        print(format_text(rows, captures) + "".join(f"\ncheck: {line}" for line in found if args.check))
    return code if args.check else 0


def _doctor(args) -> int:
    from cdc.report.doctor import doctor, exit_code, format_json, format_text

    checks = doctor(load_settings(args.config), args.source)
    print(format_json(checks) if args.json else format_text(checks))
    return exit_code(checks)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cdc", description="Debezium change events applied to Apache Iceberg.")
    p.add_argument("--config", help="path to cdc.yaml (default: ./cdc.yaml or $CDC_CONFIG)")
    p.add_argument("--log-format", choices=FORMATS,
                   help="log lines on stderr as text, or one JSON object per line (default: $CDC_LOG_FORMAT or text)")
    sub = p.add_subparsers(dest="command", required=True)

    st = sub.add_parser("stack", help="start, stop or inspect the local stack")
    st.add_argument("action", choices=["up", "down", "status"])
    st.add_argument("--purge", action="store_true", help="with down: delete all local state")
    st.add_argument("--json", action="store_true", help="with status: print JSON")
    st.set_defaults(func=_stack)

    rg = sub.add_parser("register", help="create the Debezium connector and the Iceberg targets")
    rg.add_argument("--table", help="only this registered table (default: all)")
    rg.add_argument("--dry-run", action="store_true",
                    help="print the target, topic and connector changes it would make, and make none")
    rg.add_argument("--no-wait", action="store_true",
                    help="return once the connector runs, without waiting for Debezium's snapshot of the new "
                         "tables (it goes on in the connector; `cdc run` applies it as it arrives)")
    rg.set_defaults(func=_register)

    tb = sub.add_parser("tables", help="add a registration from the source's table, or list the registrations")
    tsub = tb.add_subparsers(dest="action", required=True)
    ta = tsub.add_parser("add", help="introspect a source table and write tables/<name>.yaml")
    ta.add_argument("--schema", required=True, help="the source schema (MariaDB: database)")
    ta.add_argument("--table", required=True, help="the source table")
    ta.add_argument("--source", help="the source in cdc.yaml (default: the only one)")
    ta.add_argument("--name", metavar="NS.TABLE", help="the registration and target name (default: SCHEMA.TABLE)")
    ta.add_argument("--key", metavar="COL[,COL...]", help="key columns (default: the primary key; required "
                                                          "for a table without one)")
    ta.add_argument("--sink", choices=SINKS, default="iceberg",
                    help="the target's format: a table of the Iceberg catalog, or a Delta table under delta.root")
    ta.set_defaults(func=_tables)
    tr = tsub.add_parser("remove", help="take a registered table out of capture: its connector stops capturing "
                                        "it (the last table of a source: the connector, slot and publication "
                                        "go), its registration file, checkpoint and job state go; its target stays, "
                                        "marked out of capture, unless --drop-target")
    tr.add_argument("name", metavar="NAME", help="the registered table (namespace.table)")
    tr.add_argument("--drop-target", action="store_true",
                    help="also drop its target, delete memory and dead letters (with their files) and its topic")
    tr.set_defaults(func=_tables)
    tl = tsub.add_parser("list", help="each registration with its state")
    tl.add_argument("--json", action="store_true", help="print JSON")
    tl.set_defaults(func=_tables)

    cp = sub.add_parser("capture", help="act on the sources' Debezium connectors in Kafka Connect")
    csub = cp.add_subparsers(dest="action", required=True)
    cr = csub.add_parser("restart", help="restart failed connectors and tasks and resume paused ones (once the "
                                         "cause is fixed), then show their fresh state; exit 3 when a source "
                                         "still does not capture")
    cr.add_argument("--source", metavar="NAME", help="only this source of cdc.yaml (default: every source with "
                                                     "registered tables)")
    cr.set_defaults(func=_capture)

    rn = sub.add_parser("run", help="replicate registered tables from Kafka into Iceberg")
    rn.add_argument("--table", help="only this registered table (default: all)")
    rn.add_argument("--available-now", action="store_true",
                    help="process what is in Kafka now, commit, and exit")
    rn.add_argument("--metrics-port", type=_port, metavar="N",
                    help="serve Prometheus metrics on http://<host>:N/metrics while the job runs")
    rn.set_defaults(func=_run)

    ss = sub.add_parser("status", help="lag, committed position, last snapshot and job state per table")
    ss.add_argument("--table", help="only this registered table (default: all)")
    ss.add_argument("--json", action="store_true", help="print JSON")
    ss.add_argument("--check", action="store_true",
                    help="exit 3 when a source does not capture or a table's job has failed or died, else 1 when "
                         "a table is over --max-lag or --max-age, else 0")
    ss.add_argument("--max-lag", type=_bound, metavar="RECORDS",
                    help="with --check: a table with more records in Kafka not yet applied is behind")
    ss.add_argument("--max-age", type=_bound, metavar="SECONDS",
                    help="with --check: a table whose oldest change not yet applied is older is behind")
    ss.set_defaults(func=_status)

    dr = sub.add_parser("doctor", help="preflight before registering tables: the sources' settings (PostgreSQL: "
                                       "wal_level, free slots and WAL senders, REPLICATION, the publication; "
                                       "MariaDB: binary log format and row image, GTID, grants), each registered "
                                       "table (exists, logged, readable, keyed, columns Debezium and Spark take), "
                                       "and Kafka, Kafka Connect's Debezium plugins, the catalog and the schema "
                                       "registry; each problem with its fix (exit 0 all ok, 1 a check failed)")
    dr.add_argument("--source", metavar="NAME", help="only this source of cdc.yaml (default: every source)")
    dr.add_argument("--json", action="store_true", help='print {"schema_version": 1, "checks": [...]}')
    dr.set_defaults(func=_doctor)

    rp = sub.add_parser("replay", help="re-read a window of a table's topic and re-apply it")
    rp.add_argument("--table", required=True, help="the registered table")
    window = rp.add_mutually_exclusive_group(required=True)
    window.add_argument("--from-earliest", action="store_true", help="from the oldest record Kafka holds")
    window.add_argument("--from-offsets", metavar="JSON", help='e.g. \'{"<topic>": {"0": 1200}}\'')
    window.add_argument("--from-timestamp", metavar="TS", help="epoch milliseconds or ISO-8601 (UTC by default)")
    window.add_argument("--from-position", metavar="POS", help="a _cdc_position value")
    rp.set_defaults(func=_replay)

    rc = sub.add_parser("reconcile", help="source against target row counts (and rows, with --deep) per table: "
                                          "OK, DRIFT, IN-FLIGHT or CAPTURE-STOPPED (exit 0 all OK, 1 a drift, 5 only "
                                          "in flight, 3 capture stopped); every run "
                                          "is appended to cdc_meta.reconcile_history")
    rc.add_argument("--table", help="only this registered table (default: all)")
    rc.add_argument("--format", choices=["text", "json", "html"], default="text",
                    help="html: one page with each table's counts and lag over the runs kept in the history table")
    rc.add_argument("--deep", action="store_true",
                    help="also compare the rows: checksums of key ranges on both sides, bisected down to the keys "
                         "that differ (PostgreSQL sources; reads the table through Spark)")
    rc.add_argument("--limit", type=_positive, default=100, metavar="N",
                    help="with --deep: list at most N differing keys per table (default 100)")
    rc.add_argument("--out", metavar="FILE", help="write the report here instead of standard output")
    rc.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                    help="how long to wait for the target to catch up with the source's position (default 60)")
    rc.set_defaults(func=_reconcile)

    mt = sub.add_parser("maintain", help="compact data and delete files, expire old snapshots, remove orphan files; "
                                         "safe while the job runs")
    mt.add_argument("--table", help="only this registered table (default: all)")
    mt.add_argument("--every", type=_positive, metavar="SECONDS", help="run again every SECONDS, until interrupted")
    mt.set_defaults(func=_maintain)

    bs = sub.add_parser("bootstrap", help="fill a table's target from the source, then stream on")
    bs.add_argument("--table", required=True, help="the registered table")
    bs.add_argument("--method", choices=["jdbc", "debezium"],
                    help="jdbc: parallel read in one exported snapshot (the default for PostgreSQL); debezium: incremental snapshot "
                         "through the signal table (the default for MariaDB). An unfinished bootstrap resumes with its own method")
    bs.add_argument("--chunk-rows", type=_positive, default=500_000, metavar="N",
                    help="jdbc: rows per committed chunk, the unit a resumed bootstrap restarts from")
    bs.add_argument("--restart", action="store_true", help="start an unfinished bootstrap over")
    bs.set_defaults(func=_bootstrap)
    return p


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return value


def _bound(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    set_format(args.log_format or (os.environ.get("CDC_LOG_FORMAT") if os.environ.get("CDC_LOG_FORMAT") in FORMATS
                                   else "text"))
    if args.command == "stack" and (args.purge and args.action != "down" or args.json and args.action != "status"):
        print("cdc: --purge goes with `stack down`, --json with `stack status`", file=sys.stderr)
        return 2
    try:
        with shutdown.handled():
            try:
                return args.func(args)
            finally:
                if shutdown.received():  # stopped, or being interrupted: Spark goes before this process
                    from cdc.sinks.session import stop_spark

                    stop_spark()
    except CdcError as e:
        log(f"cdc: error: {e}", level="error", event="error", error=e.message, hint=e.hint, exit_code=e.exit_code)
        return e.exit_code
    except Interrupted as e:
        log(f"cdc {args.command}: interrupted by {e.signal}; what it committed is kept (run it again to finish)",
            level="warning", event="interrupted", signal=e.signal, exit_code=e.exit_code)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 - anything unplanned: a traceback, and "other failure"
        import traceback

        traceback.print_exc()
        print("cdc: error: unexpected failure (traceback above)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
