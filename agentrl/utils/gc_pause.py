"""Fewer garbage-collector passes while a rollout runs.

A rollout of thousands of multi-turn requests allocates container objects (token lists,
messages, coroutine frames) far faster than CPython's collector expects: at 2,048 requests
its passes took about 1 s of the event loop's CPU (measured: bench/rollout_async_vs_sync.py,
issue 18), most of it in full collections that walk every object the process holds (the
model, the tokenizer, the trainer's state) although none of them can be garbage from the
rollout. While ``rollout_gc()`` is active:

- the objects that existed before it are frozen (``gc.freeze``): full collections skip them;
- the youngest generation is collected every ``young_threshold`` allocations instead of 700;
  the engine passes ``young_threshold_for(requests)``, which grows with the requests in flight.

Why it grows: many young objects of a rollout are reference cycles (a task's frame, its
futures and their callbacks) that live as long as one call (a generation, a tool call),
while the allocations that trigger a pass come ~4x faster with 4x the requests in flight.
With a fixed threshold a pass then comes after a shorter stretch of the rollout, more of its
young objects are still alive, and they are traversed again by the middle generation's
passes: at 8,192 requests the collector took 0.69-0.72 s of the event loop (4 middle-
generation passes, 0.30-0.34 s of it) and 0.45-0.52 s with the threshold in proportion
(bench/rollout_event_counts.py, seed 2, two interleaved runs each, a loaded machine). A
threshold in proportion to the requests keeps the stretch between passes, so the share that
survives per event is the same (tests/utils/test_gc_pause.py counts it); up to ~2,048
requests it is the 50,000 measured before (issue 18).

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
# young-generation allocations per request in flight (2,048 x 24 ~ YOUNG_THRESHOLD)
YOUNG_PER_REQUEST = 24

_lock = threading.Lock()
_users = 0
_saved: tuple[int, ...] | None = None  # the thresholds to restore; None: left untouched


def young_threshold_for(requests: int) -> int:
    """The young generation's threshold for a rollout of `requests` requests in flight."""
    return max(YOUNG_THRESHOLD, YOUNG_PER_REQUEST * requests)


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


__all__ = ["YOUNG_PER_REQUEST", "YOUNG_THRESHOLD", "rollout_gc", "young_threshold_for"]
