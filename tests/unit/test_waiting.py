"""The one polling loop (cdc/waiting.py), on a clock of its own."""
from __future__ import annotations

import pytest

from cdc.waiting import poll_until


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.now += seconds


def test_it_returns_the_first_true_value():
    clock, values = Clock(), iter([0, None, "found"])
    assert poll_until(lambda: next(values), 10, 0.5, clock=clock, sleep=clock.sleep) == "found"
    assert clock.slept == [0.5, 0.5]


def test_it_returns_the_last_value_when_the_time_runs_out_and_sleeps_no_further():
    clock = Clock()
    assert poll_until(lambda: False, 1.2, 0.5, clock=clock, sleep=clock.sleep) is False
    assert clock.slept == [0.5, 0.5, 0.2] and clock.now == pytest.approx(1.2)


def test_the_pause_grows_by_the_backoff_up_to_its_bound():
    clock = Clock()
    poll_until(lambda: False, 6, 0.2, backoff=2, max_interval_s=1.0, clock=clock, sleep=clock.sleep)
    assert clock.slept[:5] == [0.2, 0.4, 0.8, 1.0, 1.0]


def test_between_runs_after_each_false_value_and_may_end_the_wait():
    clock, calls = Clock(), []

    def between():
        calls.append(clock.now)
        if len(calls) == 2:
            raise RuntimeError("the process died")

    with pytest.raises(RuntimeError, match="died"):
        poll_until(lambda: False, 10, 1.0, between=between, clock=clock, sleep=clock.sleep)
    assert calls == [0.0, 1.0]
