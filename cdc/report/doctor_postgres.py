"""`cdc doctor` for PostgreSQL sources: what the server, the user and each registered
table hold, read from the catalogs and judged by the decisions in cdc.report.checks."""
from __future__ import annotations

import psycopg

from cdc.config.models import Settings, TableRegistration
from cdc.errors import ConfigError
from cdc.report import checks as d
from cdc.report.checks import Check
from cdc.sources import check_key_not_null, postgres
from cdc.sources.postgres import publication_name, slot_name


def server_checks(conn: psycopg.Connection, settings: Settings, source: str) -> list[Check]:
    """wal_level, free replication slots and WAL senders, the user's REPLICATION, the
    publication, and the slot's retained WAL when it exists."""
    slot, publication = slot_name(settings, source), publication_name(settings, source)
    (wal_level, max_slots, max_senders, slots_used, senders_used, own_exists, own_active, replication, superuser,
     user, database, can_create) = conn.execute(
        "SELECT current_setting('wal_level'), current_setting('max_replication_slots')::int, "
        "current_setting('max_wal_senders')::int, (SELECT count(*) FROM pg_replication_slots), "
        "(SELECT count(*) FROM pg_stat_replication), "
        "EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %(slot)s), "
        "COALESCE((SELECT active FROM pg_replication_slots WHERE slot_name = %(slot)s), false), "
        "r.rolreplication, r.rolsuper, current_user, current_database(), "
        "has_database_privilege(current_database(), 'CREATE') "
        "FROM pg_roles r WHERE r.rolname = current_user", {"slot": slot}).fetchone()
    pub = conn.execute("SELECT pg_get_userbyid(pubowner), pg_has_role(pubowner, 'USAGE') FROM pg_publication "
                       "WHERE pubname = %s", (publication,)).fetchone()
    checks = [d.wal_level_check(wal_level),
              d.slots_check(max_slots, slots_used, slot, own_exists),
              d.wal_senders_check(max_senders, senders_used, own_active),
              d.replication_role_check(user, replication, superuser),
              d.publication_check(publication, user, database, pub is not None, pub[0] if pub else None,
                                  bool(pub and pub[1]), can_create)]
    retained = d.slot_retention_check(postgres.slot_state(conn, slot))
    return checks + ([retained] if retained else [])


def table_checks(conn: psycopg.Connection, settings: Settings, source: str, reg: TableRegistration) -> list[Check]:
    """The table exists, is not a partition, is logged, readable, keyed for updates and
    deletes, publishable (through its root when partitioned), and its columns pass the
    column preflight (once it is logged, readable and keyed)."""
    schema, table = reg.source.schema_, reg.source.table
    where = postgres.qualified(reg)
    # Whether the publication publishes partitions through their root (never before PostgreSQL 13).
    via_root, via_root_params = (("(SELECT p.pubviaroot FROM pg_publication p WHERE p.pubname = %s)",
                                  (publication_name(settings, source),)) if postgres.publishes_via_root(conn)
                                 else ("false", ()))
    row = conn.execute(
        "SELECT c.relkind, c.relpersistence, c.relreplident, "
        "EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), "
        "has_table_privilege(c.oid, 'SELECT'), has_schema_privilege(n.oid, 'USAGE'), "
        "pg_get_userbyid(c.relowner), pg_has_role(c.relowner, 'USAGE'), "
        "EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = %s AND (p.puballtables OR EXISTS ("
        "SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = c.oid))), current_user, "
        "c.relispartition, " + postgres.partitions_sql(conn) + ", " + via_root +
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (publication_name(settings, source), *via_root_params, schema, table)).fetchone()
    exists = d.relation_check(where, row[0] if row else None)
    if not exists.ok:
        return [exists]
    (relkind, persistence, identity, has_pk, can_select, has_usage, owner, owned, published, user, is_partition,
     root, leaves, via_root) = row
    partitioned = d.partition_check(where, relkind, is_partition, root, leaves, publication_name(settings, source),
                                    via_root)
    if is_partition:  # registered alone, it would receive nothing: that one check says what to do
        return [exists, partitioned]
    kept = [d.persistence_check(where, persistence), d.select_check(where, user, schema, can_select, has_usage),
            d.replica_identity_check(where, has_pk, reg.key, identity)]
    checks = [exists, *kept, d.publishable_check(where, user, owner, owned, published),
              *([partitioned] if partitioned else [])]
    if all(c.ok for c in kept):  # the column preflight refuses those too: one failure says it
        checks.append(columns(conn, reg, where))
    return checks


def columns(conn: psycopg.Connection, reg: TableRegistration, where: str) -> Check:
    try:
        described = postgres.describe_table(conn, reg)
        check_key_not_null(postgres, reg, described)  # `register` refuses it too
    except ConfigError as e:
        return d.columns_check(where, e)
    return d.columns_check(where, None, len(described.columns))
