"""Trace files written on a thread of their own, off the training loop's path.

    writer = TraceWriter()
    writer.submit(path, events, step=3)     # returns at once: a thread writes the file
    writer.flush()                          # every file submitted so far is on disk
    writer.close()                          # flush, then stop the thread

Building a step's Chrome trace and its JSON (`write_chrome_trace`) takes time in proportion
to the step's events (a few per rollout request); done by the loop, the next step would wait
for it. Here the loop hands the events over (`submit`: the list becomes the writer's) and
goes on; one daemon thread, started by the first `submit`, writes the files in the order
they came. At most ``max_pending`` files wait: beyond that `submit` waits for the thread
(a run never piles up events faster than it writes them).

A file that fails to write is raised by the next `submit` or `flush` (as `TraceWriteError`
naming the file, the cause chained), so a run stops as it would had it written the file
itself, a step later; the files queued behind a failed one are skipped. `close` logs a
failure instead of raising: it is the cleanup of a run that may be failing already.
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Any

from agentrl.utils.trace import Event, write_chrome_trace

logger = logging.getLogger(__name__)

_File = tuple[Path, list[Event], dict[str, Any]]  # a file to write: path, events, otherData


class TraceWriteError(RuntimeError):
    """A trace file could not be written (the cause is chained)."""


class TraceWriter:
    """Writes `write_chrome_trace` files on one background thread (module docstring)."""

    def __init__(self, max_pending: int = 2) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self._queue: queue.Queue[_File | None] = queue.Queue(max_pending)  # None: stop
        self._thread: threading.Thread | None = None
        self._failed: TraceWriteError | None = None  # set by the thread, raised by the caller
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, path: Path, events: list[Event], **other: Any) -> None:
        """Write ``write_chrome_trace(path, events, **other)`` on the writer's thread;
        ``events`` is the writer's from now on. Raises an earlier file's failure."""
        if self._closed:
            raise RuntimeError("TraceWriter.submit after close")
        self._raise_failed()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="agentrl-trace-writer",
                                            daemon=True)  # fmt: skip
            self._thread.start()
        self._queue.put((path, events, other))

    def flush(self) -> None:
        """Wait until every file submitted so far is written; raise a failure."""
        if self._thread is not None:
            self._queue.join()
        self._raise_failed()

    def close(self) -> None:
        """Write what is pending, stop the thread; a failure not yet raised is logged.
        Closing twice is fine."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        with self._lock:
            failed, self._failed = self._failed, None
        if failed is not None:
            logger.error("%s", failed, exc_info=failed.__cause__)

    def _raise_failed(self) -> None:
        with self._lock:
            failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                path, events, other = item
                with self._lock:
                    skip = self._failed is not None
                if not skip:
                    self._write(path, events, other)
            finally:
                self._queue.task_done()

    def _write(self, path: Path, events: list[Event], other: dict[str, Any]) -> None:
        try:
            write_chrome_trace(path, events, **other)
        except Exception as err:  # raised in the caller's thread at its next call
            failed = TraceWriteError(f"trace file {path} could not be written: {err}")
            failed.__cause__ = err
            with self._lock:
                self._failed = failed
        else:
            logger.debug("trace written to %s", path)


__all__ = ["TraceWriteError", "TraceWriter"]
