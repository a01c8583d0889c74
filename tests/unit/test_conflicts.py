import pytest

from cdc.jobs.apply import run_with_conflict_retries


class Flaky:
    def __init__(self, failures):
        self.failures, self.calls = list(failures), 0

    def __call__(self):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "committed"


def test_validation_conflicts_rerun_the_statement():
    stmt = Flaky([RuntimeError("org.apache.iceberg.exceptions.ValidationException: Found conflicting files"),
                  RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: metadata changed")])
    assert run_with_conflict_retries(stmt, sleep=lambda s: None) == "committed" and stmt.calls == 3


def test_other_errors_and_exhausted_retries_raise():
    with pytest.raises(RuntimeError, match="boom"):
        run_with_conflict_retries(Flaky([RuntimeError("boom")]), sleep=lambda s: None)
    conflict = RuntimeError("org.apache.iceberg.exceptions.ValidationException: x")
    with pytest.raises(RuntimeError, match="ValidationException"):
        run_with_conflict_retries(Flaky([conflict] * 5), attempts=5, sleep=lambda s: None)
