"""Moving a MariaDB connector past a statement it cannot read: which transaction, and the
offset that resumes after it (no I/O)."""
from cdc.register.stuck_binlog import Event, Skip, moved_offset, plan_skip


def events(*rows):
    return [Event("bin.000002", 100 * i, kind, 100 * i + 90, info) for i, (kind, info) in enumerate(rows, 1)]


def test_the_first_ddl_naming_the_table_after_the_processed_gtid_is_skipped():
    log = events(("Gtid", "GTID 0-1-7"), ("Query", "use `shop`; ALTER TABLE f4 ADD COLUMN ip INET6"),  # processed
                 ("Gtid", "BEGIN GTID 0-1-8"), ("Query", "BEGIN"), ("Table_map", "table_id: 9 (shop.other)"),
                 ("Xid", "COMMIT /* xid=3 */"),
                 ("Gtid", "GTID 0-1-9"), ("Query", "ALTER TABLE `shop`.`other` ADD COLUMN x INT"),
                 ("Gtid", "GTID 0-1-10"), ("Query", "use `shop`; ALTER TABLE f4 ADD COLUMN ip6 INET6"),
                 ("Gtid", "GTID 0-1-11"), ("Query", "ALTER TABLE shop.f4 DROP COLUMN ip6"))
    skip = plan_skip(log, "0-1-7", "shop", "f4")
    assert skip == Skip("0-1-10", "bin.000002", 1090, "use `shop`; ALTER TABLE f4 ADD COLUMN ip6 INET6")
    assert plan_skip(log, "0-1-7", "shop", "f") is None  # a table named only as part of another's name
    assert plan_skip(log, "0-1-11", "shop", "f4") is None  # all processed


def test_the_moved_offset_resumes_after_the_transaction_in_its_domain():
    offset = {"file": "bin.000001", "pos": 4000, "gtids": "0-1-7,1-2-30", "event": 2, "row": 1, "server_id": 1,
              "ts_sec": 1}
    moved = moved_offset(offset, Skip("0-1-10", "bin.000002", 1090, "ALTER ..."))
    assert moved == {"file": "bin.000002", "pos": 1090, "gtids": "0-1-10,1-2-30", "server_id": 1, "ts_sec": 1}
