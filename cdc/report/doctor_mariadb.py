"""`cdc doctor` for MariaDB sources: the binary log's settings, GTIDs, retention, the
user's grants and each registered table, judged by the decisions in cdc.report.checks."""
from __future__ import annotations

import pymysql

from cdc.config.models import Settings, TableRegistration
from cdc.errors import ConfigError
from cdc.report import checks as d
from cdc.report.checks import Check
from cdc.sources import check_key_not_null, mariadb


def _rows(conn: pymysql.Connection, sql: str, params=()) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def server_checks(conn: pymysql.Connection, settings: Settings, source: str) -> list[Check]:
    """log_bin, binlog_format, binlog_row_image, the GTID position, binary log retention and
    the user's privileges."""
    checks = d.binlog_checks(mariadb.binlog_settings(conn), mariadb.BINLOG_WANTED)
    ((gtid_pos, strict, domain, expire_s, expire_days, account),) = _rows(
        conn, "SELECT @@gtid_binlog_pos, @@gtid_strict_mode, @@gtid_domain_id, @@binlog_expire_logs_seconds, "
              "@@expire_logs_days, CURRENT_USER()")
    user, _, host = account.rpartition("@")
    grants = [r[0] for r in _rows(conn, "SHOW GRANTS FOR CURRENT_USER()")]
    return checks + [d.gtid_check(gtid_pos, strict, domain), d.binlog_retention_check(expire_s, expire_days),
                     d.grants_check(f"'{user}'@'{host}'", settings.sources[source].database, grants)]


def table_checks(conn: pymysql.Connection, settings: Settings, source: str, reg: TableRegistration) -> list[Check]:
    """The table exists (and the user sees it), has a key, and its columns pass the column
    preflight."""
    schema, table = reg.source.schema_, reg.source.table
    where = mariadb.qualified(reg)
    found = _rows(conn, "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                  (schema, table))
    if not found:
        return [d.failed("table_exists", f"{where} does not exist (or the user has no privilege on it)",
                         "create it, grant the user SELECT on it, or fix source.schema/source.table in the "
                         "registration")]
    if found[0][0] != "BASE TABLE":
        return [d.failed("table_exists", f"{where} is a {str(found[0][0]).lower()}, not a table",
                         "register a table: the binary log holds row changes of tables only")]
    has_pk = bool(_rows(conn, "SELECT 1 FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = %s "
                              "AND TABLE_NAME = %s AND CONSTRAINT_TYPE = 'PRIMARY KEY'", (schema, table)))
    checks = [d.passed("table_exists", f"{where} is a table"), d.key_check(where, has_pk, reg.key)]
    if checks[1].ok:
        try:
            described = mariadb.describe_table(conn, reg)
            check_key_not_null(mariadb, reg, described)  # `register` refuses it too
        except ConfigError as e:
            checks.append(d.columns_check(where, e))
        else:
            checks.append(d.columns_check(where, None, len(described.columns)))
    return checks
