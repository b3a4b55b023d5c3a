"""Awaiting without a trip through the event loop's queue.

``asyncio.wait_for`` (before Python 3.12) and ``asyncio.gather`` wrap a coroutine in a new
task, which runs only after every callback already queued on the loop. With thousands of
requests in flight that queue is long: at 2,048 requests a generation's answer waited over
a second before its tool call even started, two such hops in a row (issue 18). ``within``
and ``gather_inline`` await in the caller's own task where they can.

``LoopThread``: an event loop in a daemon thread, for synchronous callers (the rollout
worker, the sharded engine's driver) that run coroutines on one loop; ``on_loop``: a method
of an object that holds one (``self.loop``) run there. ``run_sync``: one
coroutine to completion from synchronous code (a score function), also when the calling
thread already runs a loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``; in a thread of its own when this thread already runs an event
    loop (``agentrl generate`` and users' async code score from inside one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``asyncio.wait_for(awaitable, timeout)`` in the current task: TimeoutError when it
    takes longer (the awaitable is cancelled), no limit with None."""
    if timeout is None:
        return await awaitable
    if not hasattr(asyncio, "timeout"):  # Python 3.10
        return await asyncio.wait_for(awaitable, timeout)
    async with asyncio.timeout(timeout):
        return await awaitable


async def gather_inline(*coroutines: Coroutine[Any, Any, T],
                        return_exceptions: bool = False) -> list[T | BaseException]:
    """``asyncio.gather``, with a single coroutine awaited in place (no task)."""
    if len(coroutines) != 1:
        return list(await asyncio.gather(*coroutines, return_exceptions=return_exceptions))
    try:
        return [await coroutines[0]]
    except Exception as err:  # as gather: CancelledError and other BaseExceptions propagate
        if not return_exceptions:
            raise
        return [err]



class LoopThread:
    """An asyncio event loop running in a daemon thread; ``run`` blocks on a coroutine."""

    def __init__(self, name: str = "agentrl-rollout") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        """Cancel the tasks still pending (a backend's batching task), then stop the loop."""
        if self.loop.is_closed():
            return
        try:
            self.run(_cancel_pending(), timeout=10)
        except Exception as exc:  # noqa: BLE001 - shutting down regardless
            logger.warning("cancelling the rollout loop's tasks failed: %s", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():  # a loop still running cannot be closed
            self.loop.close()


def on_loop(function: Callable[..., Any]) -> Callable[..., Any]:
    """A method run on its object's loop thread (``self.loop``, a ``LoopThread``), the caller
    waiting for it: the state it reads and changes is the loop's (its tasks, its
    ``asyncio.Event``s; the off-policy producer's calls). A coroutine method is awaited
    there. The wrapper is a plain function, so a class of such methods has no coroutine
    member (a Ray actor of it stays a threaded one)."""
    is_coroutine = inspect.iscoroutinefunction(function)

    @functools.wraps(function)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if is_coroutine:
            return self.loop.run(function(self, *args, **kwargs))

        async def on_the_loop() -> Any:
            return function(self, *args, **kwargs)

        return self.loop.run(on_the_loop())

    return call


async def _cancel_pending() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["LoopThread", "gather_inline", "on_loop", "within"]
