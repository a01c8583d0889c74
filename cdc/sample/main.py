"""`make run`: create the sample shop database (once), register its tables, replicate the
snapshot, apply a burst of changes at the source, replicate again, and print the
reconciliation report. Exit 1 when a table is not OK."""
from __future__ import annotations

import sys
from pathlib import Path

import psycopg

from cdc.config import load_settings, load_tables
from cdc.errors import CdcError
from cdc.jobs.supervisor import run
from cdc.register.connector import ConnectClient, connector_name
from cdc.register.registrar import register
from cdc.report import history
from cdc.report.html import format_html
from cdc.report.reconcile import exit_code, format_text, reconcile
from cdc.sinks.catalog import load_catalog
from cdc.sources import postgres

SCHEMA = "shop"


def burst(conn: psycopg.Connection, round_no: int) -> int:
    """Inserts, updates and deletes, including several updates of one row in one
    transaction and a delete followed by a re-insert of the same key. Returns the last
    transaction id."""
    base = 10_000 * round_no
    with conn.transaction():
        conn.execute("INSERT INTO shop.customers (id, email, full_name, created_at) "
                     "SELECT %s + g, 'new' || (%s + g) || '@example.com', 'New ' || g, now() "
                     "FROM generate_series(1, 50) g", (base, base))
        conn.execute("INSERT INTO shop.orders SELECT %s + g, %s + g, 1 + g %% 100, 1, 9.99, 'placed', now(), NULL "
                     "FROM generate_series(1, 50) g", (base, base))
    with conn.transaction():  # several updates of one row in one transaction
        for status in ("paid", "packed", "shipped"):
            conn.execute("UPDATE shop.orders SET status = %s WHERE id = %s", (status, base + 1))
        conn.execute("UPDATE shop.products SET stock = stock - 1, price = price + 0.01 WHERE id <= 20")
    with conn.transaction():
        conn.execute("UPDATE shop.customers SET vip = NOT vip, profile = profile || '{\"touched\": true}' "
                     "WHERE id %% 25 = %s", (round_no % 25,))
        conn.execute("DELETE FROM shop.orders WHERE id IN (SELECT id FROM shop.orders WHERE status = 'placed' "
                     "ORDER BY id LIMIT 40)")
    with conn.transaction():  # delete, then re-insert the same key
        conn.execute("DELETE FROM shop.orders WHERE id = %s", (base + 2,))
        conn.execute("INSERT INTO shop.orders VALUES (%s, %s, 2, 3, 29.97, 'replaced', now(), 're-inserted')",
                     (base + 2, base + 2))
        return conn.execute("SELECT txid_current()").fetchone()[0]


def main() -> int:
    settings = load_settings()
    tables = [t for t in load_tables(settings) if t.source.schema_ == SCHEMA]
    if not tables:
        print(f"no registrations for schema {SCHEMA} under {settings.tables_dir}/", file=sys.stderr)
        return 2
    source = tables[0].source.name
    try:
        with postgres.connect(settings, source) as conn:
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,)).fetchone()
            if not exists:
                print("creating the sample database (schema shop)")
                conn.execute((Path(__file__).parent / "shop.sql").read_text())
            register(settings, tables)
            print("replicating what Kafka holds (the snapshot on a first run)")
            run(settings, tables, available_now=True)
            round_no = conn.execute("SELECT count(*) FROM shop.customers WHERE id > 10000").fetchone()[0] // 50 + 1
            print(f"applying change burst #{round_no} at the source")
            burst(conn, round_no)
            marker = postgres.write_marker(conn, settings.sources[source].signal_table)
        ConnectClient.of(settings).wait_captured(connector_name(source), marker)
        print("replicating the burst")
        run(settings, tables, available_now=True)
        rows = reconcile(settings, tables)
        page = settings.state_dir / "reconcile.html"
        page.write_text(format_html(rows, history.read(load_catalog(settings), [t.name for t in tables])))
    except CdcError as e:
        print(f"cdc: error: {e}", file=sys.stderr)
        return e.exit_code
    print("\nreconciliation (`cdc reconcile`):\n" + format_text(rows))
    print(f"the same as a page, with every run so far charted: {page}")
    return exit_code(rows)


if __name__ == "__main__":
    sys.exit(main())
