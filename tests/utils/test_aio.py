"""within / gather_inline: wait_for and gather semantics without a task per call."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.utils.aio import LoopThread, gather_inline, on_loop, within


def test_within_returns_times_out_and_runs_in_the_callers_task():
    async def value():
        return asyncio.current_task()

    async def slow():
        await asyncio.sleep(10)

    async def go():
        me = asyncio.current_task()
        assert await within(value(), 1.0) is me  # no task of its own
        assert await within(value(), None) is me
        with pytest.raises(TimeoutError):
            await within(slow(), 0.01)

    asyncio.run(go())


def test_gather_inline_matches_gather():
    async def ok(x):
        return x

    async def bad():
        raise ValueError("no")

    async def go():
        assert await gather_inline(ok(1)) == [1]
        assert await gather_inline(ok(1), ok(2)) == [1, 2]
        assert await gather_inline() == []
        (err,) = await gather_inline(bad(), return_exceptions=True)
        assert isinstance(err, ValueError)
        with pytest.raises(ValueError):
            await gather_inline(bad())

    asyncio.run(go())


def test_on_loop_runs_plain_and_coroutine_methods_on_the_objects_loop_thread():
    import inspect
    import threading

    class Holder:
        def __init__(self):
            self.loop = LoopThread("test-on-loop")

        @on_loop
        def where(self, offset: int = 0) -> tuple:
            asyncio.get_running_loop()  # raises off a loop
            return threading.current_thread().name, offset

        @on_loop
        async def later(self, value: int) -> int:
            await asyncio.sleep(0)
            return value + 1

    holder = Holder()
    try:
        assert holder.where(offset=2) == ("test-on-loop", 2)
        assert holder.where()[0] != threading.current_thread().name
        assert holder.later(41) == 42
        assert not inspect.iscoroutinefunction(Holder.later)  # a plain member: Ray threads
        assert Holder.later.__name__ == "later" and Holder.where.__doc__ is None
    finally:
        holder.loop.close()
