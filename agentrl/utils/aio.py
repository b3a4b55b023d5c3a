"""Awaiting without a trip through the event loop's queue.

``asyncio.wait_for`` (before Python 3.12) and ``asyncio.gather`` wrap a coroutine in a new
task, which runs only after every callback already queued on the loop. With thousands of
requests in flight that queue is long: at 2,048 requests a generation's answer waited over
a second before its tool call even started, two such hops in a row (issue 18). ``within``
and ``gather_inline`` await in the caller's own task where they can.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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


__all__ = ["gather_inline", "within"]
