"""Waiting for a condition: the one polling loop of cdc's waits."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(check: Callable[[], T], timeout_s: float, interval_s: float = 0.5, *,
               between: Callable[[], None] | None = None, backoff: float = 1.0, max_interval_s: float = 2.0,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> T:
    """Call `check` until it returns a true value, or until `timeout_s` has passed; return
    its last value (false: the time ran out). `between` runs after each false value, the
    last one too (it may raise to end the wait); the pause between calls starts at `interval_s` and grows by
    `backoff` up to `max_interval_s`."""
    deadline, delay = clock() + timeout_s, interval_s
    while True:
        value = check()
        if value:
            return value
        if between is not None:
            between()
        if clock() >= deadline:
            return value
        sleep(max(0.0, min(delay, deadline - clock())))
        delay = max(interval_s, min(delay * backoff, max_interval_s))
