from cdc.report.reconcile import DRIFT, IN_FLIGHT, OK, exit_code, format_text, verdict


def test_verdict_tells_drift_from_changes_in_transit():
    assert verdict(10, 10, caught_up=False, target_past_source=False) == OK
    assert verdict(10, 9, caught_up=True, target_past_source=False) == DRIFT
    assert verdict(10, 9, caught_up=False, target_past_source=False) == IN_FLIGHT  # not applied yet
    assert verdict(10, 11, caught_up=True, target_past_source=True) == IN_FLIGHT  # newer changes applied
    assert verdict(10, None, caught_up=False, target_past_source=False) == IN_FLIGHT


def test_exit_code_and_text_report():
    row = {"table": "a.b", "status": OK, "source_rows": 3, "target_rows": 3, "difference": 0, "lag": 0,
           "dead_letters": 0, "source_commit_time": None}
    assert exit_code([row]) == 0 and exit_code([row, {**row, "status": DRIFT}]) == 1
    text = format_text([row, {**row, "table": "a.c", "status": DRIFT, "target_rows": 2, "difference": -1}])
    assert "a.c" in text and "DRIFT" in text and text.endswith("1 of 2 table(s) OK")
