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
from cdc.jobs.slots import BatchGate, BatchSlots
from cdc.sinks import session
from tests.unit.test_supervisor import Clock


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

    stopped = []
    monkeypatch.setattr(cli, "_doctor", doctor)
    # the Spark of this process (a test session's, when other tests made one) is the real job's to stop
    monkeypatch.setattr(session, "stop_spark", lambda: stopped.append(True))
    assert cli.main(["doctor"]) == 143
    assert stopped == [True]  # Spark is stopped before the process exits
    err = capsys.readouterr().err
    assert err.endswith(" WARNING cdc doctor: interrupted by SIGTERM; what it committed is kept (run it again to "
                        "finish)\n") and err.count("\n") == 1
    assert not issubclass(Interrupted, Exception)  # no retry loop's `except Exception` takes it


def test_a_closed_gate_waits_for_the_batch_under_way_and_refuses_the_next():
    started, release, applied = threading.Event(), threading.Event(), []

    def apply(df, batch_id, waited_s=0.0):
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


def test_gates_sharing_one_slot_apply_one_batch_at_a_time_and_a_closed_gate_refuses_a_waiting_batch():
    slots, started, release, applied = BatchSlots(1), threading.Event(), threading.Event(), []

    def apply(df, batch_id, waited_s=0.0):
        started.set()
        release.wait(10)
        applied.append(batch_id)

    first, second = BatchGate(apply, slots), BatchGate(apply, slots)
    holding = threading.Thread(target=first, args=(None, 1))
    holding.start()
    started.wait(10)
    refused = []

    def waiting():
        try:
            second(None, 2)
        except ApplyError as e:
            refused.append(e.message)

    waiter = threading.Thread(target=waiting)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and applied == []  # batch 2 waits for the slot batch 1 holds
    closing = threading.Thread(target=second.close)
    closing.start()
    while not second.closed:
        time.sleep(0.01)
    release.set()
    for thread in (holding, waiter, closing):
        thread.join(10)
    assert applied == [1] and refused == ["batch 2 not applied: the job is stopping"]
    first(None, 3)  # the slot is free again
    assert applied == [1, 3]


def test_a_freed_slot_goes_to_the_biggest_batch_and_a_small_one_that_waited_long_enough():
    clock = Clock()
    slots, order, waiting = BatchSlots(1, lambda: clock.now), [], []
    holder = slots.held(5)
    holder.__enter__()  # one batch holds the only slot

    def batch(name, records):
        with slots.held(records):
            order.append(name)

    def queue(name, records):
        thread = threading.Thread(target=batch, args=(name, records))
        thread.start()
        while len(slots.waiting) < len(waiting) + 1:
            time.sleep(0.01)
        waiting.append(thread)

    queue("quiet", 1)  # log2(2) = 1
    clock.now = 25.0  # the quiet batch's claim: 1 + 2.5
    queue("busy", 4095)  # log2(4096) = 12
    queue("unknown", None)  # counted as big: 20
    holder.__exit__(None, None, None)
    waiting[2].join(10)
    assert order[:1] == ["unknown"]
    for thread in waiting:
        thread.join(10)
    assert order == ["unknown", "busy", "quiet"]

    holder = slots.held(5)
    holder.__enter__()
    order.clear(), waiting.clear()
    queue("quiet", 1)
    clock.now += 120.0  # 1 + 12: a claim stronger than a new busy batch's
    queue("busy", 4095)
    holder.__exit__(None, None, None)
    for thread in waiting:
        thread.join(10)
    assert order == ["quiet", "busy"] and slots.free == 1 and not slots.waiting
