"""The built expressions a job keeps (jobs/built.py): by what they were built for, the least
recently used dropped first, and safe for the threads of a shared query's workers."""
from __future__ import annotations

import threading

from cdc.jobs.built import Built


def test_a_value_is_built_once_and_the_least_recently_used_goes_first():
    built, calls = Built(keep=2), []

    def make(key):
        return lambda: calls.append(key) or f"built {key}"
    assert built.get("a", make("a")) == "built a"
    assert built.get("a", make("a")) == "built a"
    built.get("b", make("b"))
    built.get("a", make("a"))  # a used after b
    built.get("c", make("c"))  # b goes
    assert len(built) == 2
    built.get("a", make("a"))
    built.get("b", make("b"))
    assert calls == ["a", "b", "c", "b"]
    built.forget("a")
    built.get("a", make("a"))
    assert calls[-1] == "a"


def test_threads_asking_while_others_evict_always_get_their_value():
    built, errors = Built(keep=8), []

    def ask(worker: int) -> None:
        try:
            for i in range(2000):
                key = (worker, i % 20)
                assert built.get(key, lambda: key) == key
        except BaseException as e:  # noqa: BLE001 - the test reads it
            errors.append(e)
    threads = [threading.Thread(target=ask, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(built) <= 8
