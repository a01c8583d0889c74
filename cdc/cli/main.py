"""The `cdc` command line. Exit codes, the same in every command (errors.EXIT_CODES):
0 success, 1 a check found a difference, 2 bad usage or configuration, 3 a job or
command failed, 4 a source or a service is unreachable, 5 in flight (run again later),
130/143 interrupted by SIGINT/SIGTERM (a continuous `cdc run` stops on either and exits 0)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from importlib import metadata
from pathlib import Path

from cdc.cli import init, prompt
from cdc.config import load_settings, load_tables
from cdc.config.loader import is_pattern
from cdc.config.models import SINKS
from cdc.errors import CdcError, ConfigError, Interrupted
from cdc.jobs import shutdown
from cdc.log import FORMATS, log, set_format
from cdc.planning.repair import MAX_KEYS
from cdc.report import document


def _stack(args):
    from cdc.stack.manager import Stack

    return Stack(load_settings(args.config))


def _stack_up(args) -> int:
    stack = _stack(args)
    stack.up()
    print(f"stack up: kafka {stack.kafka.bootstrap}"
          + (f" (SASL_SSL {stack.kafka.sasl_bootstrap})" if stack.kafka.sasl_port else "")
          + f", connect {stack.connect.url}, "
          f"postgres 127.0.0.1:{stack.postgres.port}"
          + (f", mariadb 127.0.0.1:{stack.mariadb.port}" if stack.settings.stack.mariadb_port else "")
          + (f", schema registry {stack.registry.url}" if stack.settings.stack.registry_port else ""))
    return 0


def _stack_down(args) -> int:
    _stack(args).down(purge=args.purge)
    print("stack down" + (" (state purged)" if args.purge else ""))
    return 0


def _stack_status(args) -> int:
    status = _stack(args).status()
    if args.json:
        print(document.dumps(**status))
        return 0
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
    bad: list = []
    tables = load_tables(settings, args.table, invalid=bad)
    for b in bad:  # one bad file is its table's problem: the others are registered
        log(f"its registration does not load, so it is not registered: {b.error}", table=b.name, level="error",
            event="registration-invalid")
    if tables:
        register(settings, tables, wait_snapshot=not args.no_wait, dry_run=args.dry_run)
    if bad:  # the others are registered: exit as bad configuration does
        raise ConfigError(f"table(s) {', '.join(b.name for b in bad)} not registered: their registration does not "
                          f"load", hint="; ".join(str(b.error).splitlines()[0] for b in bad))
    return 0


def _tables(args) -> int:
    from cdc.register import tables

    settings = load_settings(args.config)
    if args.action == "add":
        schema, table = _source_table(args)
        path = tables.add(settings, schema, table, source=args.source, name=args.name, sink=args.sink,
                          key=tuple(k.strip() for k in args.key.split(",")) if args.key else None)
        print(path.read_text(), end="")
        print(f"wrote {path}; next: cdc register --table {path.stem} --dry-run, then without --dry-run")
        return 0
    if args.action == "remove":
        from cdc.register.removal import remove

        if is_pattern(args.name):
            raise ConfigError(f"tables remove takes one registered table's name, not a pattern: {args.name!r}",
                              hint="run `cdc tables list` for the names")
        (reg,) = load_tables(settings, args.name)
        for line in remove(settings, reg, drop_target=args.drop_target):
            print(f"{reg.name}: {line}")
        return 0
    rows = tables.listing(settings)
    print(document.dumps(tables=rows) if args.json else tables.format_listing(rows))
    return 0


def _source_table(args) -> tuple[str, str]:
    """`tables add`'s source table: SOURCE_TABLE (SCHEMA.TABLE, or TABLE with --schema), or
    the deprecated `--table TABLE`."""
    given = args.source_table
    if args.old_table is not None:
        if given is not None:
            raise ConfigError(f"tables add got the source table twice ({given!r} and --table {args.old_table!r})",
                              hint="give it once: cdc tables add SCHEMA.TABLE")
        _deprecated("`cdc tables add --table TABLE` (the source table)", "`cdc tables add SCHEMA.TABLE`")
        given = args.old_table
    if given is None:
        raise ConfigError("tables add needs the source table", hint="cdc tables add SCHEMA.TABLE, e.g. shop.orders")
    schema, _, table = given.rpartition(".")
    if args.schema and schema and schema != args.schema:
        raise ConfigError(f"source table {given!r} is not in --schema {args.schema!r}",
                          hint="give SCHEMA.TABLE alone, or TABLE with --schema")
    if not (schema or args.schema):
        raise ConfigError(f"source table {given!r} needs its schema (MariaDB: database)",
                          hint=f"cdc tables add SCHEMA.{given}, or add --schema SCHEMA")
    return schema or args.schema, table


def _deprecated(old: str, new: str) -> None:
    log(f"deprecated: {old}: use {new}", level="warning", event="deprecated")


def _capture(args) -> int:
    from cdc.register.registrar import restart_capture

    restart_capture(load_settings(args.config), args.source)
    return 0


def _run(args) -> int:
    from cdc.jobs.supervisor import run
    from cdc.report.cut import keep_advancing

    settings = load_settings(args.config)
    bad: list = []
    tables = load_tables(settings, args.table, invalid=bad)
    for b in bad:  # one bad file stops its table, not the others
        log(f"its registration does not load, so it is not run: {b.error}", table=b.name, level="error",
            event="registration-invalid")
    if tables:
        if args.metrics_port:
            from cdc.jobs.metrics import serve

            serve(args.metrics_port)
            print(f"metrics on http://127.0.0.1:{args.metrics_port}/metrics")
        run(settings, tables, available_now=args.available_now, cut=keep_advancing, selection=args.table)
    if bad:  # the others ran: exit as a failed table does
        raise CdcError(f"table(s) {', '.join(b.name for b in bad)} not run: their registration does not load",
                       hint="; ".join(str(b.error).splitlines()[0] for b in bad))
    return 0


def _replay(args) -> int:
    from cdc.jobs.replay import replay

    settings = load_settings(args.config)
    reg = _one_table(settings, args.table, "replay")
    replay(settings, reg, earliest=args.from_earliest, offsets=args.from_offsets, timestamp=args.from_timestamp,
           position=args.from_position)
    return 0


def _bootstrap(args) -> int:
    from cdc.bootstrap.load import bootstrap

    settings = load_settings(args.config)
    reg = _one_table(settings, args.table, "bootstrap")
    bootstrap(settings, reg, method=args.method, chunk_rows=args.chunk_rows, restart=args.restart,
              confirm=None if args.yes else lambda question: prompt.confirm(question, "--yes"))
    return 0


def _one_table(settings, names: list[str], command: str):
    """The one registration a command that acts on a single table selects."""
    tables = load_tables(settings, names)
    if len(names) > 1 or len(tables) != 1:
        raise ConfigError(f"cdc {command} acts on one table; --table {' --table '.join(names)} selects "
                          f"{len(tables)} ({', '.join(t.name for t in tables)})",
                          hint=f"give one registered table's name: run `cdc {command} --table NAME` once per table")
    return tables[0]


def _reconcile(args) -> int:
    from cdc.report.reconcile import exit_code, format_json, format_text, invalid_row, reconcile

    settings = load_settings(args.config)
    if args.out:
        check_out_folder(args.out)
    bad: list = []  # registrations that do not load: their tables' rows say so, the others are checked
    tables = load_tables(settings, args.table, invalid=bad)
    rows = reconcile(settings, tables, wait_s=args.wait, deep=args.deep, limit=args.limit) if tables else []
    rows += [invalid_row(b) for b in bad]
    form = "json" if args.json else args.format or "text"
    if form == "html":
        from cdc.report import history
        from cdc.report.html import format_html
        from cdc.sinks.catalog import load_catalog

        report = format_html(rows, history.read(load_catalog(settings), [t.name for t in tables]))
    else:
        report = format_json(rows) if form == "json" else format_text(rows)
    if args.out:
        Path(args.out).write_text(report + "\n")
        print(f"reconciliation report written to {args.out}")
    else:
        print(report)
    return exit_code(rows)


def check_out_folder(out: str) -> None:
    """`--out FILE`: its folder exists and takes a file, checked before the work it reports."""
    folder = Path(out).resolve().parent
    if not folder.is_dir():
        raise ConfigError(f"--out {out}: folder {folder} does not exist", hint=f"create it (mkdir -p {folder}) "
                                                                               f"or write the report elsewhere")
    if Path(out).is_dir():
        raise ConfigError(f"--out {out} is a folder", hint="give a file's path, e.g. --out reports/reconcile.html")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"--out {out}: folder {folder} is not writable by this user",
                          hint="write the report elsewhere")


def _rounds(every: int | None, one_round) -> int:
    """`one_round()` once, or again every `every` seconds until interrupted; a failed round
    is told on stderr and the next one tries again."""
    while True:
        try:
            one_round()
        except CdcError as e:
            if not every:
                raise
            print(f"cdc: error: {e}", file=sys.stderr)
        if not every:
            return 0
        time.sleep(every)


def _repair(args) -> int:
    from cdc.report.repair import exit_code, format_text, repair

    settings = load_settings(args.config)
    result = repair(settings, _one_table(settings, args.table, "repair"), max_keys=args.max_keys,
                    dry_run=args.dry_run, wait_s=args.wait)
    print(document.dumps(ok=exit_code(result) == 0, **result) if args.json else format_text(result))
    return exit_code(result)


def _maintain(args) -> int:
    from cdc.jobs.maintenance import maintain

    settings = load_settings(args.config)
    tables = load_tables(settings, args.table)
    return _rounds(args.every, lambda: maintain(settings, tables))


def _pause(args) -> int:
    import threading

    from cdc.control import jobstate
    from cdc.jobs import shutdown

    settings = load_settings(args.config)
    reg = _one_table(settings, args.table, "pause")
    ended = threading.Event()
    with shutdown.graceful(ended.set), jobstate.exclusive(settings.state_dir, [reg.name]):
        until = f"for {args.for_s} s" if args.for_s else "until Ctrl-C"
        log(f"paused {until}: no job applies the table; its changes wait in Kafka", table=reg.name, event="paused",
            stream=sys.stdout)
        ended.wait(args.for_s)
    log("given back: its job applies it again", table=reg.name, event="resumed", stream=sys.stdout)
    return 0


def _status(args) -> int:
    from cdc.report.status import format_text, problems, status

    settings = load_settings(args.config)
    bad: list = []  # registrations that do not load: their tables' rows say so, the others are read
    rows, captures = status(settings, load_tables(settings, args.table, invalid=bad), invalid=bad)
    code, found = problems(rows, captures, args.max_lag, args.max_age)
    if args.json:
        print(document.dumps(ok=code == 0, problems=found, tables=rows, sources=captures))
    else:
        print(format_text(rows, captures) + "".join(f"\ncheck: {line}" for line in found if args.check))
    return code if args.check else 0


def _cut(args) -> int:
    from cdc.report.cut import advance, format_text, report
    from cdc.sinks.catalog import load_catalog

    settings = load_settings(args.config)
    if args.source is not None and args.source not in settings.sources:
        raise ConfigError(f"no source {args.source!r} in cdc.yaml", hint=f"one of: {', '.join(settings.sources)}")
    catalog = load_catalog(settings)

    def one_round() -> None:
        bad: list = []  # registrations that do not load: said after the cut of the others
        tables = load_tables(settings, invalid=bad)
        sources = [args.source] if args.source else sorted({t.source.name for t in tables})
        published = [advance(settings, s, [t for t in tables if t.source.name == s], catalog) for s in sources]
        found = [report(p) for p in published]
        print(document.dumps(sources=found) if args.json else format_text(found), flush=True)
        failed = [f"{e.table}: {e.message}" for p in published for e in p.unreadable]
        failed += [f"{b.name}: its registration does not load: {str(b.error).splitlines()[0]}" for b in bad]
        hints = [e.hint for p in published for e in p.unreadable] + (["fix the registration file"] if bad else [])
        if failed:  # the others' cut stands: exit as a failed table does
            raise CdcError(f"the cut left out table(s) it could not read: {'; '.join(failed)}", hint="; ".join(hints))

    return _rounds(args.every, one_round)


def _doctor(args) -> int:
    from cdc.report.doctor import doctor, exit_code, format_json, format_text

    checks = doctor(load_settings(args.config), args.source)
    print(format_json(checks) if args.json else format_text(checks))
    return exit_code(checks)


CONFIG_HELP = "path to cdc.yaml (default: ./cdc.yaml or $CDC_CONFIG)"
LOG_FORMAT_HELP = "log lines on stderr as text, or one JSON object per line (default: $CDC_LOG_FORMAT or text)"
TABLES_HELP = ("only this registered table, or those a pattern such as 'shop.*' matches; repeat for several "
               "(default: all)")
ONE_TABLE_HELP = "the registered table (one)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cdc", description="Debezium change events applied to Apache Iceberg.")
    p.add_argument("--config", metavar="PATH", help=CONFIG_HELP)
    p.add_argument("--log-format", choices=FORMATS, help=LOG_FORMAT_HELP)
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    # The same two options after a subcommand's name; unset there, the ones before it stand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help=CONFIG_HELP)
    common.add_argument("--log-format", choices=FORMATS, default=argparse.SUPPRESS, help=LOG_FORMAT_HELP)

    def command(parent, name: str, text: str, func=None, more: str = "") -> argparse.ArgumentParser:
        c = parent.add_parser(name, help=text, description=text + more, parents=[common])
        if func is not None:
            c.set_defaults(func=func)
        return c

    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    command(sub, "init", "write a commented cdc.yaml for an existing Kafka, Kafka Connect, Iceberg catalog and source",
            init.run, more=" database, from these options, asking on the terminal for what they leave out (when "
                           "standard input is one); the file is checked as cdc.yaml before it is written, and an "
                           "existing one is kept unless --force")
    init.add_arguments(sub.choices["init"])

    st = command(sub, "stack", "start, stop or inspect the local stack")
    ssub = st.add_subparsers(dest="action", required=True, metavar="ACTION")
    command(ssub, "up", "start the local stack's services in the background (logs and data in the state directory)",
            _stack_up)
    down = command(ssub, "down", "stop the local stack's services", _stack_down)
    down.add_argument("--purge", action="store_true",
                      help="also delete all local state (the state directory: data, warehouse, checkpoints)")
    status = command(ssub, "status", "each service's state, and how to reach Kafka, Connect, PostgreSQL and the "
                                     "catalog", _stack_status)
    status.add_argument("--json", action="store_true",
                        help="print JSON: kafka_bootstrap, kafka_sasl, connect_url, postgres_dsn, catalog, services")

    rg = command(sub, "register", "create the Debezium connector and the Iceberg targets", _register)
    rg.add_argument("--table", action="append", metavar="NAME", help=TABLES_HELP)
    rg.add_argument("--dry-run", action="store_true",
                    help="print the target, topic and connector changes it would make, and make none")
    rg.add_argument("--no-wait", action="store_true",
                    help="return once the connector runs, without waiting for Debezium's snapshot of the new "
                         "tables (it goes on in the connector; `cdc run` applies it as it arrives)")

    tb = command(sub, "tables", "add a registration from the source's table, remove one, or list the registrations")
    tsub = tb.add_subparsers(dest="action", required=True, metavar="ACTION")
    ta = command(tsub, "add", "introspect a source table and write tables/<name>.yaml", _tables)
    ta.add_argument("source_table", nargs="?", metavar="SOURCE_TABLE",
                    help="the source table: SCHEMA.TABLE (MariaDB: DATABASE.TABLE), or TABLE with --schema")
    ta.add_argument("--schema", help="the source schema (MariaDB: database) of a SOURCE_TABLE given without it")
    ta.add_argument("--table", dest="old_table", metavar="TABLE",
                    help="deprecated: the source table; give SOURCE_TABLE instead")
    ta.add_argument("--source", help="the source in cdc.yaml (default: the only one)")
    ta.add_argument("--name", metavar="NS.TABLE", help="the registration and target name (default: SCHEMA.TABLE)")
    ta.add_argument("--key", metavar="COL[,COL...]", help="key columns (default: the primary key; required "
                                                          "for a table without one)")
    ta.add_argument("--sink", choices=SINKS, default="iceberg",
                    help="the target's format: a table of the Iceberg catalog, or a Delta table under delta.root")
    tr = command(tsub, "remove", "take a registered table out of capture: its connector stops capturing it (the last "
                                 "table of a source: the connector, slot and publication go), its registration file, "
                                 "checkpoint and job state go; its target stays, marked out of capture, unless "
                                 "--drop-target", _tables)
    tr.add_argument("name", metavar="NAME", help="the registered table (namespace.table)")
    tr.add_argument("--drop-target", action="store_true",
                    help="also drop its target, delete memory and dead letters (with their files) and its topic")
    tl = command(tsub, "list", "each registration with its state", _tables)
    tl.add_argument("--json", action="store_true", help="print JSON")

    cp = command(sub, "capture", "act on the sources' Debezium connectors in Kafka Connect")
    csub = cp.add_subparsers(dest="action", required=True, metavar="ACTION")
    cr = command(csub, "restart", "restart failed connectors and tasks and resume paused ones (once the cause is "
                                  "fixed), then show their fresh state; exit 3 when a source still does not capture",
                 _capture)
    cr.add_argument("--source", metavar="NAME", help="only this source of cdc.yaml (default: every source with "
                                                     "registered tables)")

    rn = command(sub, "run", "replicate registered tables from Kafka into Iceberg", _run,
                 more="; without --available-now it follows the registrations --table selects (default: all): a "
                      "table registered while it runs is started once `cdc register` has made its target and topic, "
                      "one whose registration is removed is stopped, one whose registration changes is started "
                      "again with it, without a restart")
    rn.add_argument("--table", action="append", metavar="NAME", help=TABLES_HELP)
    rn.add_argument("--available-now", action="store_true",
                    help="process what is in Kafka now, commit, and exit")
    rn.add_argument("--metrics-port", type=_port, metavar="N",
                    help="serve Prometheus metrics on http://<host>:N/metrics while the job runs")

    ss = command(sub, "status", "lag, committed position, last snapshot and job state per table", _status)
    ss.add_argument("--table", action="append", metavar="NAME", help=TABLES_HELP)
    ss.add_argument("--json", action="store_true", help="print JSON")
    ss.add_argument("--check", action="store_true",
                    help="exit 3 when a source does not capture, a table's job has failed or died (or no "
                         "running job takes it: not-running) or its target cannot be read, else 1 when a table is "
                         "over --max-lag or --max-age, else 0")
    ss.add_argument("--max-lag", type=_bound, metavar="RECORDS",
                    help="with --check: a table with more records in Kafka not yet applied is behind")
    ss.add_argument("--max-age", type=_bound, metavar="SECONDS",
                    help="with --check: a table whose oldest change not yet applied is older is behind")

    ct = command(sub, "cut", "advance and show each source's consistent cut: a snapshot of every Iceberg target "
                             "and a version of every Delta one at which all of them hold the same source "
                             "transactions, the snapshots tagged cdc_consistent (read `... VERSION AS OF "
                             "'cdc_consistent'`, a Delta table `VERSION AS OF <version>`), with its source "
                             "transaction, its age, and the tables that hold it back or are left out (exit 3 "
                             "when a table's target or registration cannot be read: the others' cut is made)", _cut)
    ct.add_argument("--source", metavar="NAME", help="only this source of cdc.yaml (default: every source with "
                                                     "registered tables)")
    ct.add_argument("--json", action="store_true", help="print JSON")
    ct.add_argument("--every", type=_positive, metavar="SECONDS",
                    help="advance it again every SECONDS, until interrupted (each round prints the cut)")

    dr = command(sub, "doctor", "preflight before registering tables: the sources' settings (PostgreSQL: wal_level, "
                                "free slots and WAL senders, REPLICATION, the publication; MariaDB: binary log format "
                                "and row image, GTID, grants), each registered table (exists, logged, readable, keyed, "
                                "columns Debezium and Spark take), and Kafka, Kafka Connect's Debezium plugins, the "
                                "catalog and the schema registry; each problem with its fix (exit 0 all ok, 1 a check "
                                "failed)", _doctor)
    dr.add_argument("--source", metavar="NAME", help="only this source of cdc.yaml (default: every source)")
    dr.add_argument("--json", action="store_true", help='print {"schema_version": 1, "ok": ..., "checks": [...]}')

    rp = command(sub, "replay", "re-read a window of a table's topic and re-apply it", _replay)
    rp.add_argument("--table", action="append", required=True, metavar="NAME", help=ONE_TABLE_HELP)
    window = rp.add_mutually_exclusive_group(required=True)
    window.add_argument("--from-earliest", action="store_true", help="from the oldest record Kafka holds")
    window.add_argument("--from-offsets", metavar="JSON", help='e.g. \'{"<topic>": {"0": 1200}}\'')
    window.add_argument("--from-timestamp", metavar="TS", help="epoch milliseconds or ISO-8601 (UTC by default)")
    window.add_argument("--from-position", metavar="POS", help="a _cdc_position value")

    rc = command(sub, "reconcile", "source against target row counts (and rows, with --deep) per table: OK, DRIFT, "
                                   "IN-FLIGHT, CAPTURE-STOPPED or UNREADABLE (exit 0 all OK, 1 a drift, 5 only in "
                                   "flight, 3 capture stopped or a target that cannot be read); every run is "
                                   "appended to cdc_meta.reconcile_history", _reconcile)
    rc.add_argument("--table", action="append", metavar="NAME", help=TABLES_HELP)
    form = rc.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print JSON (the same as --format json)")
    form.add_argument("--format", choices=["text", "json", "html"],
                      help="text (the default), json, or html: one page with each table's counts and lag over the "
                           "runs kept in the history table")
    rc.add_argument("--deep", action="store_true",
                    help="also compare the rows: checksums of key ranges on both sides, bisected down to the keys "
                         "that differ (both source kinds; reads the table through Spark)")
    rc.add_argument("--limit", type=_positive, default=100, metavar="N",
                    help="with --deep: list at most N differing keys per table (default 100)")
    rc.add_argument("--out", metavar="FILE", help="write the report here instead of standard output")
    rc.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                    help="how long to wait for a target commit at the source's count, which a running job is "
                         "asked to make (default 60)")

    rr = command(sub, "repair", "fix the keys `reconcile --deep` finds differing: delete the target's rows the source "
                                "does not hold, and have Debezium read the others again (both source kinds; exit 0 "
                                "when the table is then exact, 1 when keys still differ, 5 when the compare after "
                                "it could not be made within --wait)", _repair)
    rr.add_argument("--table", action="append", required=True, metavar="NAME", help=ONE_TABLE_HELP)
    rr.add_argument("--dry-run", action="store_true", help="say what would be fixed, and change nothing")
    rr.add_argument("--max-keys", type=_positive, default=MAX_KEYS, metavar="N",
                    help=f"refuse a drift of more keys than this, which `cdc bootstrap` refills for less (default "
                         f"{MAX_KEYS})")
    rr.add_argument("--json", action="store_true", help="print JSON")
    rr.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                    help="how long each compare waits for a target commit at the source's count (default 60)")

    mt = command(sub, "maintain", "compact data and delete files, expire old snapshots, remove orphan files; safe "
                                  "while the job runs: a continuous job hands each table over for its maintenance "
                                  "and takes it back after it", _maintain)
    mt.add_argument("--table", action="append", metavar="NAME", help=TABLES_HELP)
    mt.add_argument("--every", type=_positive, metavar="SECONDS", help="run again every SECONDS, until interrupted")

    pa = command(sub, "pause", "hold a table back from its running job (it stops applying the table, then takes it "
                               "back) until Ctrl-C, SIGTERM or --for seconds: room for a statement of your own on a "
                               "target that changes every second (a DELETE, a rewrite), which would otherwise lose "
                               "the race with the job's commits", _pause)
    pa.add_argument("--table", action="append", required=True, metavar="NAME", help=ONE_TABLE_HELP)
    pa.add_argument("--for", dest="for_s", type=_positive, metavar="SECONDS",
                    help="give the table back after SECONDS (default: when interrupted)")

    bs = command(sub, "bootstrap", "fill a table's target from the source, then stream on; a target that holds rows "
                                   "is emptied first, after a question on the terminal (or --yes)", _bootstrap)
    bs.add_argument("--table", action="append", required=True, metavar="NAME", help=ONE_TABLE_HELP)
    bs.add_argument("--method", choices=["jdbc", "debezium"],
                    help="jdbc: parallel read in one exported snapshot (the default for PostgreSQL); debezium: incremental snapshot "
                         "through the signal table (the default for MariaDB). An unfinished bootstrap resumes with its own method")
    bs.add_argument("--chunk-rows", type=_positive, default=500_000, metavar="N",
                    help="jdbc: rows per committed chunk, the unit a resumed bootstrap restarts from")
    bs.add_argument("--restart", action="store_true", help="start an unfinished bootstrap over")
    bs.add_argument("--yes", "-y", action="store_true",
                    help="empty a target that holds rows without asking (needed when standard input is not a terminal)")
    return p


def version() -> str:
    """The installed package's version, else pyproject.toml's (a source checkout)."""
    try:
        return metadata.version("cdc")
    except metadata.PackageNotFoundError:
        import tomllib

        try:
            pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


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
