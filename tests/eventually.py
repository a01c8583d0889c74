"""The tests' one wait: a condition polled until it holds (cdc.waiting.poll_until), the
test failed with what it waited for when the time runs out or a watched process ends."""
from __future__ import annotations

from collections.abc import Callable

from cdc.waiting import poll_until


def eventually(check: Callable, what: str, timeout_s: float = 60, interval_s: float = 0.5,
               alive: Callable[[], bool] | None = None, detail: Callable[[], str] = lambda: ""):
    """`check`'s first true value; the test fails naming `what` (and `detail()`, e.g. a log's
    tail) after `timeout_s`, or at once when `alive()` says the process it waits on ended."""
    def watching() -> None:
        assert alive is None or alive(), f"ended before {what}:\n{detail()}"

    value = poll_until(check, timeout_s, interval_s, between=watching)
    assert value, f"no {what} after {timeout_s:.0f}s:\n{detail()}"
    return value
