"""Test-only crash points, so fault tests kill the driver at exact places instead of
sleeping. Set CDC_CRASH_POINT=<point>:<n> to SIGKILL this process the n-th time (1-based)
execution reaches <point>; <point>:<n>:<SIGNAL> (e.g. before-merge:2:SIGTERM) sends that
signal to this process's group instead, as a supervisor stopping it would, and goes on.
Points: before-merge, after-commit, bootstrap-chunk. Unset in production."""
from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "CDC_CRASH_POINT"
_reached: Counter = Counter()


def crash_point(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    point, _, rest = spec.partition(":")
    nth, _, sig = rest.partition(":")
    if point != name:
        return
    _reached[name] += 1
    if _reached[name] != int(nth or 1):
        return
    if sig:
        os.killpg(os.getpgrp(), signal.Signals[sig])
    else:
        os.kill(os.getpid(), signal.SIGKILL)
