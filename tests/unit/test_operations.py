"""The operations contract: one exit code per kind of outcome in every command, and
`cdc status --check`'s verdict from the rows it read."""
from pathlib import Path

import pytest

from cdc import errors
from cdc.cli.main import main
from cdc.config.models import Settings, SourceSettings
from cdc.report.status import age_s, problems


def row(table: str, state: str = "running", lag: int = 0, age: float | None = 0.0, error: str | None = None) -> dict:
    return {"table": table, "registered": True, "lag": lag, "age_s": age,
            "job": {"state": state, **({"error": error} if error else {})}}


CAPTURING = {"source": "shop", "capturing": True, "reason": None}


def test_status_check_tells_a_failure_from_a_bound_exceeded():
    assert problems([row("s.a"), row("s.b", lag=5, age=30.0)], [CAPTURING]) == (0, [])
    code, found = problems([row("s.a"), row("s.b", lag=5, age=30.0)], [CAPTURING], max_lag=4, max_age_s=60)
    assert code == errors.DIFFERENCE and found == ["table s.b: lag 5 record(s) is over --max-lag 4"]
    code, found = problems([row("s.b", lag=5, age=90.4)], [CAPTURING], max_lag=5, max_age_s=60)
    assert code == errors.DIFFERENCE and found == ["table s.b: 90 s behind is over --max-age 60"]
    code, found = problems([row("s.b", lag=5, age=None)], [CAPTURING], max_age_s=60)  # unknown is not within
    assert code == errors.DIFFERENCE and found == ["table s.b: its age could not be read from Kafka"]
    # a failed job or a stopped capture outranks a table behind
    code, found = problems([row("s.a", "failed", error="boom\nat x"), row("s.b", lag=9)],
                           [{"source": "shop", "capturing": False, "reason": "connector PAUSED"}], max_lag=1)
    assert code == errors.FAILED
    assert found == ["source shop is not capturing: connector PAUSED", "table s.a: job failed: boom",
                     "table s.b: lag 9 record(s) is over --max-lag 1"]
    assert problems([row("s.a", "dead")], [CAPTURING])[0] == errors.FAILED


def test_age_is_zero_when_everything_was_applied_and_unknown_before_registering():
    settings = Settings(root=Path("."))
    assert age_s(settings, {"registered": False}) is None
    assert age_s(settings, {"registered": True, "topic": "t", "committed_offsets": {"0": 7},
                            "kafka_end_offsets": {"0": 7}}) == 0.0


def test_exit_codes_are_one_table():
    assert errors.EXIT_CODES == {0: "success", 1: "a check found a difference", 2: "bad usage or configuration",
                                 3: "a job or command failed", 4: "a source or a service is unreachable",
                                 5: "in flight: run again later"}
    assert errors.ConfigError("x").exit_code == errors.SourceError("x").exit_code == errors.USAGE
    assert errors.DependencyError("x").exit_code == errors.SourceUnreachable("x").exit_code == errors.UNREACHABLE
    assert errors.ApplyError("x").exit_code == errors.ConnectorError("x").exit_code == errors.FAILED
    assert errors.Busy("x").exit_code == errors.IN_FLIGHT


@pytest.mark.parametrize("kind", ["postgresql", "mariadb"])
def test_a_source_nobody_listens_on_is_unreachable_not_misconfigured(kind, tmp_path):
    from cdc.sources import module_of

    settings = Settings(root=tmp_path, sources={"shop": SourceSettings(kind=kind, host="127.0.0.1", port=9,
                                                                       database="shop", user="cdc", password="x")})
    with pytest.raises(errors.SourceUnreachable, match="cannot connect to source 'shop' at 127.0.0.1:9/shop"):
        module_of(settings, "shop").connect(settings, "shop")


def test_status_bounds_are_whole_numbers(capsys):
    with pytest.raises(SystemExit) as usage:
        main(["status", "--check", "--max-lag", "-1"])
    assert usage.value.code == errors.USAGE and "is not a whole number >= 0" in capsys.readouterr().err


def test_an_inactive_slot_over_its_wal_threshold_is_a_problem():
    from cdc.register.capture import format_text

    slot = {"name": "cdc_pg", "active": False, "retained_wal_bytes": 3 * 2**30, "wal_status": "extended",
            "wal_warn_bytes": 2**30, "over_wal_warn": True}
    capture = {**CAPTURING, "source": "pg", "state": "RUNNING", "tasks": [], "slot": slot}
    warning = ("replication slot cdc_pg of source pg is INACTIVE and holds 3.0 GB of WAL, over "
               "sources.pg.slot_wal_warn_mb (1.0 GB)")
    assert format_text([capture])[1].startswith(f"  warning: {warning}: start its connector")
    code, found = problems([row("s.a")], [capture])
    assert code == errors.FAILED and found[0].startswith(warning)
    quiet = {**capture, "slot": {**slot, "over_wal_warn": False}}
    assert len(format_text([quiet])) == 1 and problems([row("s.a")], [quiet]) == (0, [])


def test_status_names_the_shared_query_of_each_running_table(tmp_path):
    from cdc.control import jobstate
    from cdc.report.status import shared_lines

    jobstate.record(tmp_path, "s.a", jobstate.RUNNING, query="shared-2s")
    jobstate.record(tmp_path, "s.b", jobstate.RUNNING, query="shared-2s")
    jobstate.record(tmp_path, "s.c", jobstate.STOPPED, query="shared-2s")  # a query that has ended
    jobstate.record(tmp_path, "s.d", jobstate.RUNNING)  # a query of its own
    rows = [{**row(t), "job": jobstate.read(tmp_path, t)} for t in ("s.a", "s.b", "s.c", "s.d")]
    assert rows[0]["job"]["query"] == "shared-2s" and "query" not in rows[3]["job"]
    assert shared_lines(rows) == ["shared query shared-2s: reads 2 of these tables"]


def test_status_gives_a_failed_tables_remedy_and_an_invalid_registrations_error(tmp_path):
    from cdc.control import jobstate
    from cdc.report import status

    jobstate.record(tmp_path, "s.a", jobstate.FAILED, "column v of s.a changed from int to text",
                    remedy="re-create the target, then `cdc register` and `cdc bootstrap` the table")
    failed = {**row("s.a"), "job": jobstate.read(tmp_path, "s.a"), "dead_letters": 0, "source_commit_time": None,
              "snapshot_id": None}
    assert failed["job"]["remedy"].startswith("re-create the target")
    invalid = {"table": "s.b", "state": status.INVALID, "registered": False, "invalid": "tables/s.b.yaml: unknown key "
               "'x'", "job": {"state": "never-run"}}
    text = status.format_text([failed, invalid])
    assert "  to do: re-create the target, then `cdc register` and `cdc bootstrap` the table" in text
    assert "s.b" in text and "invalid" in text and "registration does not load: tables/s.b.yaml: unknown key" in text
    code, found = status.problems([failed, invalid], [])
    assert code == 3 and "table s.b: its registration does not load: tables/s.b.yaml: unknown key 'x'" in found


def one_table_unreadable(monkeypatch, tmp_path, module):
    """Two registrations of source pg in `tmp_path`, shop.a's target unreadable (its metadata
    file moved away) when `module`'s per-table read reaches it; the services stand aside."""
    import yaml

    from cdc.config import load_settings, load_tables

    (tmp_path / "cdc.yaml").write_text(yaml.safe_dump({
        "sources": {"pg": {"database": "app", "user": "repl", "password": "x"}}, "tables_dir": "tables",
        "stack": {"state_dir": str(tmp_path / "state")}}))
    (tmp_path / "tables").mkdir()
    for t in ("a", "b"):
        (tmp_path / "tables" / f"shop.{t}.yaml").write_text(yaml.safe_dump(
            {"name": f"shop.{t}", "source": {"schema": "shop", "table": t}, "key": ["id"]}))
    settings = load_settings(tmp_path / "cdc.yaml")
    monkeypatch.setattr(module, "load_catalog", lambda settings: None)
    monkeypatch.setattr(module.ConnectClient, "of", classmethod(lambda cls, settings: None))
    monkeypatch.setattr(module, "source_capture", lambda settings, source, client: {
        "source": source, "state": "RUNNING", "capturing": True, "reason": None})
    return settings, load_tables(settings)


def test_status_reports_an_unreadable_target_in_its_row_and_reads_the_others(tmp_path, monkeypatch):
    from cdc.report import status as report_status

    settings, tables = one_table_unreadable(monkeypatch, tmp_path, report_status)

    def table_status(settings, catalog, reg):
        if reg.name == "shop.a":
            raise FileNotFoundError("/w/shop/a/metadata/00007.metadata.json")
        return {**row(reg.name), "kafka_end_offsets": {}, "committed_offsets": {}, "dead_letters": 0,
                "source_commit_time": None, "snapshot_id": 5}

    monkeypatch.setattr(report_status, "table_status", table_status)
    rows, captures = report_status.status(settings, tables)
    a, b = rows
    assert a["table"] == "shop.a" and a["state"] == report_status.UNREADABLE
    assert a["unreadable"] == ("its target lake.shop.a cannot be read: FileNotFoundError: "
                               "/w/shop/a/metadata/00007.metadata.json")
    assert "cdc register --table shop.a" in a["remedy"] and b["table"] == "shop.b" and b["state"] == "running"
    code, found = problems(rows, captures)
    assert code == errors.FAILED and found == [f"table shop.a: {a['unreadable']}"]  # `status --check` exits 3
    text = report_status.format_text(rows)
    assert f"  to do: {a['remedy']}" in text and "shop.b" in text
    # cdc's own errors are not taken for an unreadable target: Kafka out of reach is every table's
    monkeypatch.setattr(report_status, "table_status", lambda *a: (_ for _ in ()).throw(
        errors.DependencyError("Kafka at 127.0.0.1:1 cannot be reached")))
    with pytest.raises(errors.DependencyError):
        report_status.status(settings, tables)


def test_reconcile_reports_an_unreadable_target_in_its_row_and_compares_the_others(tmp_path, monkeypatch):
    from cdc.report import reconcile as report_reconcile

    settings, tables = one_table_unreadable(monkeypatch, tmp_path, report_reconcile)
    recorded = []

    def reconcile_table(settings, catalog, client, reg, wait_s, deep=None, capture=None):
        if reg.name == "shop.a":
            raise FileNotFoundError("/w/shop/a/metadata/00007.metadata.json")
        return {"table": reg.name, "status": report_reconcile.OK, "source_rows": 3, "target_rows": 3, "difference": 0,
                "lag": 0, "dead_letters": 0, "source_commit_time": None}

    monkeypatch.setattr(report_reconcile, "reconcile_table", reconcile_table)
    monkeypatch.setattr(report_reconcile.history, "record", lambda catalog, run, rows: recorded.extend(rows))
    rows = report_reconcile.reconcile(settings, tables)
    assert [(r["table"], r["status"]) for r in rows] == [("shop.a", "UNREADABLE"), ("shop.b", "OK")]
    assert "cannot be read: FileNotFoundError" in rows[0]["reason"]
    assert "cdc register --table shop.a" in rows[0]["reason"]
    assert report_reconcile.exit_code(rows) == errors.FAILED and recorded == rows
    assert "shop.a                       UNREADABLE" in report_reconcile.format_text(rows)
