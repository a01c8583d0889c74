"""Stop signals without a JVM: the first asks to stop, a second exits at once, a batch under
way finishes before its query stops (tests/integration/test_shutdown.py: the real job)."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cdc.cli import main as cli
from cdc.errors import ApplyError, Interrupted
from cdc.jobs import shutdown
from cdc.jobs.runner import BatchGate


def test_first_signal_asks_the_graceful_block_to_stop_and_a_second_exits_at_once(monkeypatch):
    asked = []
    monkeypatch.setattr(shutdown.os, "_exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    with shutdown.handled(), shutdown.graceful(lambda: asked.append(True)):
        os.kill(os.getpid(), signal.SIGTERM)
        assert asked == [True] and shutdown.received() == "SIGTERM"
        with pytest.raises(SystemExit) as exited:
            os.kill(os.getpid(), signal.SIGINT)
    assert exited.value.code == 130
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back as it was


def test_a_signal_outside_a_graceful_block_interrupts_the_command(monkeypatch, capsys):
    def doctor(args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("not interrupted")

    monkeypatch.setattr(cli, "_doctor", doctor)
    assert cli.main(["doctor"]) == 143
    err = capsys.readouterr().err
    assert err.endswith(" WARNING cdc doctor: interrupted by SIGTERM; what it committed is kept (run it again to "
                        "finish)\n") and err.count("\n") == 1
    assert not issubclass(Interrupted, Exception)  # no retry loop's `except Exception` takes it


def test_a_closed_gate_waits_for_the_batch_under_way_and_refuses_the_next():
    started, release, applied = threading.Event(), threading.Event(), []

    def apply(df, batch_id):
        started.set()
        release.wait(10)
        applied.append(batch_id)

    gate = BatchGate(apply)
    batch = threading.Thread(target=gate, args=(None, 7))
    batch.start()
    started.wait(10)
    closing = threading.Thread(target=gate.close)
    closing.start()
    closing.join(0.3)
    assert closing.is_alive()  # close waits while batch 7 is applied
    release.set()
    closing.join(10)
    batch.join(10)
    assert applied == [7] and not closing.is_alive()
    with pytest.raises(ApplyError, match="batch 8 not applied: the job is stopping"):
        gate(None, 8)
    assert applied == [7]
