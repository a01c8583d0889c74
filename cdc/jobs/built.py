"""The Spark expressions a job built for its tables' batches, kept by what they were built for."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

KEEP_BUILT = 512  # the most kept: the least recently used goes first


class Built:
    """Built expressions (a decoding, a dedupe, the stats' columns: each costs calls into the
    JVM) by what they were built for, kept while the job that owns it runs: a table started
    again in it builds none anew. Its tables' threads (a shared query's workers) share it; a
    value asked for is never dropped under the thread that asked."""

    def __init__(self, keep: int = KEEP_BUILT):
        self.keep = keep
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, object] = OrderedDict()

    def get(self, key: Hashable, build: Callable[[], object]) -> object:
        """The value kept for `key`, else `build()`'s, kept (built outside the lock: a build
        takes up to a second, and other tables' batches need not wait for it)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = build()
        with self._lock:
            value = self._items.setdefault(key, value)
            while len(self._items) > self.keep:
                self._items.popitem(last=False)
        return value

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)


def of_context(spark) -> Built:
    """The Built of `spark`'s SparkContext, made once: the expressions are objects of its JVM,
    good for as long as it runs, whichever job (a table restarted, `cdc run` called again in
    the same process) asks."""
    return spark.sparkContext.__dict__.setdefault("_cdc_built", Built())
