"""`cdc doctor`'s checks: a `Check` says what was found and what to do, and the decisions
are pure functions of the values a source shows (tested without a database)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from cdc.errors import CdcError
from cdc.register.capture import size
from cdc.sources.postgres import ident


@dataclass(frozen=True)
class Check:
    """One thing looked at: `ok` or not, what was `found`, and the `fix` when there is one
    to make. A warning (`warn`) is ok but worth reading."""

    name: str  # a stable id, e.g. wal_level
    ok: bool
    found: str
    fix: str | None = None
    source: str | None = None
    table: str | None = None  # the registration's name
    warn: bool = False

    @property
    def status(self) -> str:
        return "FAIL" if not self.ok else "warn" if self.warn else "ok"

    def at(self, source: str | None = None, table: str | None = None) -> "Check":
        """The same check, for `source` (and `table`)."""
        return Check(self.name, self.ok, self.found, self.fix, source or self.source, table or self.table, self.warn)


def passed(name: str, found: str) -> Check:
    return Check(name, True, found)


def failed(name: str, found: str, fix: str | None) -> Check:
    return Check(name, False, found, fix)


def warning(name: str, found: str, fix: str) -> Check:
    return Check(name, True, found, fix, warn=True)


# ---- PostgreSQL decisions ----


def wal_level_check(value: str) -> Check:
    if value == "logical":
        return passed("wal_level", "logical")
    return failed("wal_level", f"{value} (logical decoding needs logical)",
                  "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL")


def slots_check(max_slots: int, used: int, own_slot: str, own_exists: bool) -> Check:
    """A replication slot for the connector: its own, or a free one."""
    free = max_slots - used
    found = f"{used} of max_replication_slots={max_slots} in use, {max(free, 0)} free"
    if own_exists:
        return passed("replication_slots", f"{found}; slot {own_slot} exists")
    if free >= 1:
        return passed("replication_slots", f"{found}; slot {own_slot} will be created")
    return failed("replication_slots", f"{found}; slot {own_slot} does not exist yet",
                  "drop a slot no longer used (SELECT pg_drop_replication_slot('<name>')), or raise it: "
                  f"ALTER SYSTEM SET max_replication_slots = {max_slots + 1}; then restart PostgreSQL")


def wal_senders_check(max_senders: int, used: int, own_active: bool) -> Check:
    """A WAL sender process for the connector (it holds one while it streams)."""
    free = max_senders - used
    found = f"{used} of max_wal_senders={max_senders} in use, {max(free, 0)} free"
    if own_active:
        return passed("wal_senders", f"{found}; the connector streams already")
    if free >= 1:
        return passed("wal_senders", found)
    return failed("wal_senders", found, f"ALTER SYSTEM SET max_wal_senders = {max_senders + 1}; then restart "
                                        f"PostgreSQL (or stop a replication client no longer used)")


def replication_role_check(user: str, replication: bool, superuser: bool) -> Check:
    if superuser or replication:
        return passed("replication_privilege", f"role {user} has " + ("SUPERUSER" if superuser else "REPLICATION"))
    return failed("replication_privilege", f"role {user} has neither REPLICATION nor SUPERUSER",
                  f"ALTER ROLE {ident(user)} REPLICATION (as a superuser)")


def publication_check(name: str, user: str, database: str, exists: bool, owner: str | None, owned: bool,
                      can_create: bool) -> Check:
    """The connector creates and alters its publication (publication.autocreate.mode
    filtered): the user owns it, or may create it."""
    if exists and owned:
        return passed("publication", f"publication {name} exists, owned by {owner}")
    if exists:
        return failed("publication", f"publication {name} is owned by {owner}, not by {user}: the connector "
                                     f"cannot change its tables",
                      f"ALTER PUBLICATION {ident(name)} OWNER TO {ident(user)}")
    if can_create:
        return passed("publication", f"publication {name} does not exist; {user} may create it (the connector "
                                     f"does)")
    return failed("publication", f"publication {name} does not exist and {user} may not create it (no CREATE on "
                                 f"database {database})",
                  f"GRANT CREATE ON DATABASE {ident(database)} TO {ident(user)}, or create the publication as {user}")


def slot_retention_check(state: dict | None) -> Check | None:
    """An inactive slot holds back WAL until its connector streams again (None: no slot)."""
    if state is None:
        return None
    held = size(state["retained_wal_bytes"])
    found = f"slot {state['name']} is {'active' if state['active'] else 'INACTIVE'}, {held} of WAL held" + (
        f" (wal_status {state['wal_status']})" if state.get("wal_status") else "")
    if state["active"]:
        return passed("slot_retained_wal", found)
    return warning("slot_retained_wal", found, "start its connector (`cdc register`, or `cdc capture restart`), or, "
                                               "for a retired source, drop the slot: "
                                               f"SELECT pg_drop_replication_slot('{state['name']}')")


RELKINDS = {"r": "table", "p": "partitioned table", "v": "view", "m": "materialized view", "f": "foreign table",
            "S": "sequence", "c": "composite type", "i": "index"}


def relation_check(where: str, relkind: str | None) -> Check:
    """The registered table exists and is a table Debezium captures."""
    if relkind in ("r", "p"):
        return passed("table_exists", f"{where} is a {RELKINDS[relkind]}")
    if relkind is None:
        return failed("table_exists", f"{where} does not exist", "create it, or fix source.schema/source.table in "
                                                                "the registration")
    return failed("table_exists", f"{where} is a {RELKINDS.get(relkind, relkind)}, not a table",
                  "register a table: logical replication publishes tables only")


def partition_check(where: str, relkind: str, is_partition: bool, root: str | None, partitions: int,
                    publication: str, via_root: bool | None) -> Check | None:
    """cdc captures a partitioned table through its root: the publication publishes the
    changes of every partition (those attached later too) as the root's
    (`publish_via_partition_root`, which `cdc register` sets). A partition registered
    alone would then receive none. None for a table that is neither."""
    if is_partition:
        return failed("partitioned", f"{where} is a partition of {root}: its changes are published as changes of "
                                     f"{root}, so a registration of the partition receives none",
                      f"register {root} instead (cdc tables add {root}): its target holds every partition's rows")
    if relkind != "p":
        return None
    if via_root is False:
        return failed("partitioned", f"{where} is partitioned, and publication {publication} publishes the changes "
                                     f"of its partitions under their own names, which the connector does not capture: "
                                     f"no change after the snapshot reaches Kafka",
                      f"run `cdc register` (it sets publish_via_partition_root on {publication}), or ALTER "
                      f"PUBLICATION {ident(publication)} SET (publish_via_partition_root = true)")
    return passed("partitioned", f"{where} is partitioned ({partitions} partition(s)): the changes of every partition, "
                                 f"those attached later too, are captured as changes of {where}")


def persistence_check(where: str, relpersistence: str) -> Check:
    """Unlogged and temporary tables write no WAL: nothing of them is captured."""
    if relpersistence == "p":
        return passed("table_logged", f"{where} is logged")
    kind = "UNLOGGED" if relpersistence == "u" else "TEMPORARY"
    fix = f"ALTER TABLE {where} SET LOGGED" if relpersistence == "u" else "register a permanent table"
    return failed("table_logged", f"{where} is {kind}: it writes no WAL, so no change of it is captured", fix)


def select_check(where: str, user: str, schema: str, has_select: bool, has_usage: bool) -> Check:
    """The connector's snapshot (and cdc's counts) read the table as the user."""
    missing = ([] if has_usage else [f"USAGE on schema {schema}"]) + ([] if has_select else [f"SELECT on {where}"])
    if not missing:
        return passed("select_privilege", f"{user} may read {where}")
    fix = "; ".join(([f"GRANT USAGE ON SCHEMA {ident(schema)} TO {ident(user)}"] if not has_usage else [])
                    + ([f"GRANT SELECT ON {where} TO {ident(user)}"] if not has_select else []))
    return failed("select_privilege", f"{user} lacks " + " and ".join(missing), fix)


REPLICA_IDENTITY = {"d": "default", "n": "nothing", "f": "full", "i": "index"}


def replica_identity_check(where: str, has_primary_key: bool, key: tuple[str, ...] | None,
                           identity: str) -> Check:
    """Updates and deletes carry the row's key: a primary key (replica identity default),
    or the registration's `key:` with REPLICA IDENTITY FULL (or an index)."""
    shown = REPLICA_IDENTITY.get(identity, identity)
    if identity == "n":
        return failed("replica_identity", f"{where} has REPLICA IDENTITY NOTHING: updates and deletes carry no "
                                          f"old row",
                      f"ALTER TABLE {where} REPLICA IDENTITY " + ("DEFAULT" if has_primary_key else "FULL"))
    if has_primary_key:
        return passed("replica_identity", f"{where} has a primary key (replica identity {shown})")
    if key is None:
        return failed("replica_identity", f"{where} has no primary key and the registration gives no key columns",
                      "add a primary key at the source, or name the key columns: `key:` in the registration")
    if identity in ("f", "i"):
        return passed("replica_identity", f"{where} has no primary key; key {', '.join(key)}, replica identity "
                                          f"{shown}")
    return failed("replica_identity", f"{where} has no primary key and replica identity {shown}: PostgreSQL "
                                      f"publishes no old row for updates and deletes (key {', '.join(key)})",
                  f"ALTER TABLE {where} REPLICA IDENTITY FULL")


def publishable_check(where: str, user: str, owner: str, owned: bool, published: bool) -> Check:
    """The connector adds the table to its publication, which takes the table's ownership
    (a superuser, or a member of the owning role), unless the table is in it already."""
    if published:
        return passed("table_owner", f"{where} is in the publication already")
    if owned:
        return passed("table_owner", f"{user} may add {where} (owned by {owner}) to the publication")
    return failed("table_owner", f"{where} is owned by {owner}: {user} cannot add it to the publication",
                  f"GRANT {ident(owner)} TO {ident(user)}, or add the table to the publication as its owner")


def columns_check(where: str, error: CdcError | None, columns: int | None = None) -> Check:
    """The column preflight (describe_table): what Debezium or Spark would refuse."""
    if error is None:
        return passed("columns", f"{where}: {columns} columns, none refused")
    return failed("columns", error.message, error.hint)


# ---- MariaDB decisions ----

BINLOG_FIX = {"log_bin": "start mariadbd with --log-bin", "binlog_format": "SET GLOBAL binlog_format = 'ROW' (and "
              "binlog_format=ROW in the server's configuration)", "binlog_row_image": "SET GLOBAL binlog_row_image = "
              "'FULL' (and binlog_row_image=FULL in the server's configuration)"}


def binlog_checks(values: dict, wanted: tuple[tuple[str, str], ...]) -> list[Check]:
    """One check per binary log setting (`wanted`: name, value needed)."""
    checks = []
    for key, want in wanted:
        value = values.get(key)
        if str(value).upper() == want:
            checks.append(passed(key, f"{key}={value}"))
        else:
            checks.append(failed(key, f"{key}={value} (needs {want})", BINLOG_FIX.get(key)))
    return checks


def gtid_check(binlog_pos: str | None, strict_mode, domain_id) -> Check:
    found = f"gtid_binlog_pos={binlog_pos or '(empty)'}, gtid_domain_id={domain_id}, gtid_strict_mode={strict_mode}"
    if binlog_pos:
        return passed("gtid", found)
    return warning("gtid", found + ": no transaction in the binary log yet",
                   "nothing to do: the first transaction gives a GTID position")


DAY_S = 86400


def binlog_retention_check(expire_seconds, expire_days) -> Check:
    """How long binary logs are kept: a connector stopped for longer loses its position."""
    seconds = int(expire_seconds or 0) or int(float(expire_days or 0) * DAY_S)
    if seconds == 0:
        return passed("binlog_retention", "binary logs are never expired (binlog_expire_logs_seconds=0)")
    found = f"binlog_expire_logs_seconds={seconds} ({seconds / DAY_S:.1f} days)"
    if seconds < DAY_S:
        return warning("binlog_retention", found + ": a connector stopped for longer loses its position",
                       "SET GLOBAL binlog_expire_logs_seconds = 604800 (a week; and in the server's configuration)")
    return passed("binlog_retention", found)


_GRANT = re.compile(r"^GRANT\s+(.+?)\s+ON\s+(?:(?:TABLE|FUNCTION|PROCEDURE|PACKAGE)\s+)?(\S+)\s+TO\s", re.I | re.S)
# Each privilege Debezium's MariaDB connector needs, with the names it goes by.
MARIADB_PRIVILEGES = (("REPLICATION SLAVE", ("REPLICATION SLAVE", "REPLICATION REPLICA")),
                      ("REPLICATION CLIENT", ("REPLICATION CLIENT", "BINLOG MONITOR", "SLAVE MONITOR",
                                              "REPLICA MONITOR")),
                      ("RELOAD", ("RELOAD",)))


def parse_grants(lines: list[str]) -> dict[str, set[str]]:
    """SHOW GRANTS lines as {object (`*.*`, `db`.*, ...): privileges}; role grants and the
    password part are left out."""
    out: dict[str, set[str]] = {}
    for line in lines:
        m = _GRANT.match(line.strip())
        if not m:
            continue
        privileges = re.sub(r"\([^)]*\)", "", m.group(1))  # column lists: SELECT (a, b)
        out.setdefault(m.group(2).replace("`", ""), set()).update(
            " ".join(p.split()).upper() for p in privileges.split(",") if p.strip())
    return out


def grants_check(account: str, database: str, lines: list[str]) -> Check:
    """REPLICATION SLAVE, REPLICATION CLIENT (BINLOG MONITOR) and RELOAD on *.*, SELECT on
    the database (or ALL PRIVILEGES)."""
    grants = parse_grants(lines)
    on_all = grants.get("*.*", set())
    on_db = on_all | grants.get(f"{database}.*", set())
    missing = [] if "ALL PRIVILEGES" in on_all else [
        need for need, names in MARIADB_PRIVILEGES if not on_all & set(names)]
    select = "ALL PRIVILEGES" in on_db or "SELECT" in on_db
    shown = "; ".join(f"{', '.join(sorted(p))} on {obj}" for obj, p in sorted(grants.items())) or "none"
    if not missing and select:
        return passed("privileges", f"{account}: {shown}")
    fix = "; ".join(([f"GRANT {', '.join(missing)} ON *.* TO {account}"] if missing else [])
                    + ([] if select else [f"GRANT SELECT ON `{database}`.* TO {account}"]))
    lacking = missing + ([] if select else [f"SELECT on {database}"])
    return failed("privileges", f"{account} lacks {', '.join(lacking)} (has: {shown})", fix)


def key_check(where: str, has_primary_key: bool, key: tuple[str, ...] | None) -> Check:
    """A MariaDB table's changes are keyed by its primary key or the registration's `key:`."""
    if has_primary_key:
        return passed("key", f"{where} has a primary key")
    if key is not None:
        return passed("key", f"{where} has no primary key; key {', '.join(key)} from the registration")
    return failed("key", f"{where} has no primary key and the registration gives no key columns",
                  "add a primary key at the source, or name the key columns: `key:` in the registration")
