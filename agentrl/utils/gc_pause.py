"""Fewer garbage-collector passes while a rollout runs.

A rollout of thousands of multi-turn requests allocates container objects (token lists,
messages, coroutine frames) far faster than CPython's collector expects: at 2,048 requests
its passes took about 1 s of the event loop's CPU (measured: bench/rollout_async_vs_sync.py,
issue 18), most of it in full collections that walk every object the process holds (the
model, the tokenizer, the trainer's state) although none of them can be garbage from the
rollout. While ``rollout_gc()`` is active:

- the objects that existed before it are frozen (``gc.freeze``): full collections skip them;
- the youngest generation is collected every ``young_threshold`` allocations instead of 700.

Reference cycles made during the rollout are still collected; the settings and the frozen
objects are restored when the last nested or concurrent user leaves. The collector is one
per process, so this state is too: a lock and a count make nested and concurrent use safe.
A process that turned the collector off (``gc.disable()`` or a threshold of 0) is left as is.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

YOUNG_THRESHOLD = 50_000

_lock = threading.Lock()
_users = 0
_saved: tuple[int, ...] | None = None  # the thresholds to restore; None: left untouched


@contextlib.contextmanager
def rollout_gc(young_threshold: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Freeze what exists and collect the young generation less often, until exit."""
    global _users, _saved
    with _lock:
        if _users == 0:
            thresholds = gc.get_threshold()
            _saved = None
            if gc.isenabled() and thresholds[0] > 0:
                _saved = thresholds
                gc.freeze()
                gc.set_threshold(max(young_threshold, thresholds[0]), *thresholds[1:])
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                gc.unfreeze()
                _saved = None


__all__ = ["YOUNG_THRESHOLD", "rollout_gc"]
