"""abort_stragglers: ceil((1 - rate) x N) requests finish, the rest are cancelled as aborted."""

from __future__ import annotations

import asyncio

from agentrl.rollout.batch_context import BatchContext
from agentrl.rollout.over_sampling import abort_stragglers


def _ctx() -> BatchContext:
    return BatchContext(n=1, sampling_params={}, generation_slots=asyncio.Semaphore(1),
                        tool_slots={})  # fmt: skip


def test_the_long_tail_is_cancelled_once_enough_finished():
    async def finish_in_order(tasks):
        for task in tasks:  # one finish per loop iteration, never two at once (sleeps of 1 ms
            task.set_result(None)  # apart finished together on a loaded machine: flaky)
            for _ in range(3):
                await asyncio.sleep(0)

    async def main():
        ctx = _ctx()
        # 11 requests: 10 finish one after another, the last one would hang
        loop = asyncio.get_running_loop()
        tasks = [loop.create_future() for _ in range(11)]
        finishing = asyncio.ensure_future(finish_in_order(tasks[:10]))
        await abort_stragglers(tasks, ctx, rate=0.25)  # keep ceil(0.75 x 11) = 9
        finishing.cancel()
        await asyncio.gather(finishing, *tasks, return_exceptions=True)
        return ctx, [t.cancelled() for t in tasks]

    ctx, cancelled = asyncio.run(main())
    assert ctx.aborting
    assert sum(cancelled) == 2 and cancelled[-1]  # the hanging one among the 2 cut


def test_nothing_is_cancelled_when_all_finish_in_time():
    async def main():
        ctx = _ctx()
        tasks = [asyncio.ensure_future(asyncio.sleep(0)) for _ in range(4)]
        await abort_stragglers(tasks, ctx, rate=0.0)  # keep all 4
        return ctx, [t.cancelled() for t in tasks]

    ctx, cancelled = asyncio.run(main())
    assert not ctx.aborting and not any(cancelled)


class CountingFuture(asyncio.Future):
    """A request's task stand-in that counts the done callbacks put on it."""

    added = 0

    def add_done_callback(self, fn, *, context=None):
        CountingFuture.added += 1
        super().add_done_callback(fn, context=context)


def _callbacks_per_finished_request(requests: int) -> float:
    """Done callbacks `abort_stragglers` put on the tasks, per request that finished, with
    the requests finishing one per loop iteration (as a rollout's do, spread in time)."""

    async def finish_one_at_a_time(tasks):
        for task in tasks:
            task.set_result(None)
            for _ in range(3):  # the waiting coroutine runs between two finishes
                await asyncio.sleep(0)

    async def main():
        tasks = [CountingFuture() for _ in range(requests)]
        CountingFuture.added = 0
        finishing = asyncio.ensure_future(finish_one_at_a_time(tasks[: requests // 2]))
        await abort_stragglers(tasks, _ctx(), rate=0.5)  # keep ceil(0.5 x N)
        await finishing
        return sum(t.done() and not t.cancelled() for t in tasks)

    finished = asyncio.run(main())
    assert finished == requests // 2
    return CountingFuture.added / finished


def test_the_wait_costs_the_same_per_finished_request_at_256_and_2048_requests():
    # an asyncio.wait over the pending tasks after each finish put a callback on every
    # pending task: ~N/2 per finished request, 8x more at 2,048 than at 256
    small, large = (_callbacks_per_finished_request(n) for n in (256, 2048))
    assert small <= 2.0 and large <= 2.0, (small, large)
