"""Stopping on SIGTERM or SIGINT, sent to the process or to its whole process group (a
terminal's Ctrl-C, systemd's KillMode=control-group, Kubernetes).

The first signal asks the command to stop: within `graceful` (a continuous `cdc run`) the
block is told and stops by itself; anywhere else the main thread is interrupted
(`Interrupted`). A second signal while stopping ends the process at once. Spark's driver
JVM runs in a session of its own (sinks/session.py), so a signal to the group reaches only
this process, which then stops Spark in order (`session.stop_spark`)."""
from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

from cdc.errors import Interrupted

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received: list[int] = []  # the stop signals received, in order
_on_signal: list = []  # the innermost `graceful` block's callback


def received() -> str | None:
    """The name of the first stop signal this process received (None: none yet)."""
    return signal.Signals(_received[0]).name if _received else None


def _handle(signum, frame) -> None:
    _received.append(signum)
    if len(_received) > 1:
        print(f"cdc: {signal.Signals(signum).name} while stopping: exiting now", file=sys.stderr, flush=True)
        os._exit(128 + signum)
    if _on_signal:
        _on_signal[-1]()
        return
    _detach_main_connection()
    raise Interrupted(signum)


def _detach_main_connection() -> None:
    """The py4j call the interruption cuts short keeps its connection, an answer still to
    come on it: the main thread's next calls (stopping Spark) open a new one."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    local = getattr(gateway.__dict__.get("_gateway_client"), "thread_connection", None) if gateway else None
    if local is not None:  # py4j's ClientServer (PySpark's pinned threads): one connection per thread
        local.connection = None


@contextmanager
def handled():
    """SIGTERM and SIGINT handled as above for the block (the command line's whole run);
    in the main thread only, where Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {sig: signal.signal(sig, _handle) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def graceful(on_signal):
    """Within the block the first signal calls `on_signal` (the block then stops by itself)
    instead of interrupting the main thread."""
    with handled() if signal.getsignal(signal.SIGTERM) is not _handle else _nothing():
        _on_signal.append(on_signal)
        try:
            yield
        finally:
            _on_signal.pop()


@contextmanager
def _nothing():
    yield
