import json

from cdc.report.reconcile import CAPTURE_STOPPED, DRIFT, IN_FLIGHT, OK, exit_code, format_json, format_text, verdict


def test_verdict_compares_only_at_a_commit_that_ends_at_the_count():
    assert verdict(10, 10, at_count=True) == OK
    assert verdict(10, 9, at_count=True) == DRIFT
    assert verdict(10, 11, at_count=True) == DRIFT
    # no commit at the count: equal counts say nothing (a change may be on its way)
    assert verdict(10, 10, at_count=False) == IN_FLIGHT
    assert verdict(10, None, at_count=False) == IN_FLIGHT


def test_in_flight_hint_says_what_to_do_for_the_table_as_it_is():
    from cdc.report.reconcile import not_compared

    assert "cdc register" in not_compared(True, False, "never-run", None)
    assert "connector" in not_compared(False, True, "running", 5)
    assert "run its job" in not_compared(True, True, "stopped", 5)
    running = not_compared(True, True, "running", 12)
    assert "run its job" not in running and "lag 12" in running and "--wait" in running


def test_exit_code_and_text_report():
    row = {"table": "a.b", "status": OK, "source_rows": 3, "target_rows": 3, "difference": 0, "lag": 0,
           "dead_letters": 0, "source_commit_time": None}
    assert exit_code([row]) == 0 and exit_code([row, {**row, "status": DRIFT}]) == 1
    # a scheduler runs it again later when changes are only in transit; a stopped capture is a failure
    assert exit_code([row, {**row, "status": IN_FLIGHT}]) == 5
    assert exit_code([{**row, "status": IN_FLIGHT}, {**row, "status": DRIFT}]) == 1
    assert exit_code([{**row, "status": DRIFT}, {**row, "status": CAPTURE_STOPPED}]) == 3
    assert json.loads(format_json([row])) == {"schema_version": 1, "ok": True, "tables": [row]}
    text = format_text([row, {**row, "table": "a.c", "status": DRIFT, "target_rows": 2, "difference": -1}])
    assert "a.c" in text and "DRIFT" in text and text.endswith("1 of 2 table(s) OK")


def test_bisection_descends_into_the_differing_ranges_until_few_rows_are_left():
    from cdc.report.deep import LEAF_ROWS, Bisection

    b = Bisection().descend()
    assert (b.level, b.shift, b.prefixes) == (1, 60, None)
    assert not b.found([(3, LEAF_ROWS), (11, LEAF_ROWS)])  # too many rows left: one level more
    b.descend()
    assert (b.shift, b.prefixes) == (56, [3, 11])
    assert b.found([(3 * 16 + 2, 40), (11 * 16, 1)])
    assert b.steps == [{"level": 1, "ranges": 16, "differing": 2, "rows": 2 * LEAF_ROWS},
                       {"level": 2, "ranges": 32, "differing": 2, "rows": 41}]
    assert Bisection().descend().found([]) is True  # nothing differs: done at level 1


def test_deep_lines_and_html_report():
    import datetime as dt

    from cdc.report.html import format_html
    from cdc.report.reconcile import deep_lines

    found = {"compared": True, "rows": {"source": 30, "target": 28}, "levels": [
        {"level": 1, "ranges": 16, "differing": 2, "rows": 5}], "missing": 2, "extra": 0, "different": 1, "duplicate": 0,
        "keys": [{"kind": "different", "key": {"id": 3}}, {"kind": "missing", "key": {"id": 28}}], "limit": 2}
    lines = deep_lines(found)
    assert "2 missing in the target, 0 extra, 1 different, 0 duplicate" in lines[0]
    assert lines[1].split() == ["different", "id=3"] and "1 more" in lines[-1]
    row = {"table": "a.<b>", "status": DRIFT, "source_rows": 30, "target_rows": 28, "difference": -2, "lag": 0,
           "dead_letters": 0, "source_position": "0/1", "target_position": None, "source_commit_time": None,
           "checked_at": "2026-01-01T00:00:00Z", "deep": found}
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    runs = [{"checked_at": t0 + dt.timedelta(hours=i), "status": s, "source_rows": 30, "target_rows": n, "lag": lag}
            for i, (s, n, lag) in enumerate([(OK, 30, 0), (IN_FLIGHT, 29, 4), (DRIFT, 28, 0)])]
    page = format_html([row], {"a.<b>": runs})
    assert page.startswith("<!DOCTYPE html>") and "a.&lt;b&gt;" in page and "a.<b>" not in page
    assert page.count("<polyline") == 3 and page.count("<circle") == 3 and "3 run(s)" in page
    assert "missing: id=28" in page and "0 of 1 table(s) OK" in page


def test_html_table_fits_a_narrow_page():
    from cdc.report.html import format_html

    row = {"table": "a.b", "status": OK, "source_rows": 3, "target_rows": 3, "difference": 0, "lag": 0,
           "dead_letters": 0, "source_position": "0/1A2B3C4D/1234", "target_position": "0/1A2B3C4D/1234",
           "source_commit_time": "2026-11-23T18:41:25.123000+01:00", "checked_at": "2026-11-23T17:41:25Z"}
    page = format_html([row], {})
    assert "<div class=wide><table>" in page  # scrolls by itself, never the page
    assert "2026-11-23 17:41:25Z" in page and ".123000" not in page  # to the second, in UTC


def test_html_report_says_why_a_table_was_not_compared(tmp_path):
    from cdc.config.loader import InvalidRegistration
    from cdc.errors import ConfigError
    from cdc.report.html import format_html
    from cdc.report.reconcile import INVALID, invalid_row

    bad = InvalidRegistration("shop.<bad>", tmp_path / "bad.yaml", ConfigError("key: <x> is no column"))
    row = {**invalid_row(bad), "checked_at": "2026-11-23T17:41:25Z"}
    page = format_html([row], {})
    assert row["status"] == INVALID and "its registration does not load: key: &lt;x&gt; is no column" in page
