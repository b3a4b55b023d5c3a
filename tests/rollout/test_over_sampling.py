"""abort_stragglers: ceil((1 - rate) x N) requests finish, the rest are cancelled as aborted."""

from __future__ import annotations

import asyncio

from agentrl.rollout.batch_context import BatchContext
from agentrl.rollout.over_sampling import abort_stragglers


def _ctx() -> BatchContext:
    return BatchContext(n=1, sampling_params={}, generation_slots=asyncio.Semaphore(1),
                        tool_slots={})  # fmt: skip


def test_the_long_tail_is_cancelled_once_enough_finished():
    async def main():
        ctx = _ctx()
        # 10 requests finishing at 1..10 ms, then one that would hang
        tasks = [asyncio.ensure_future(asyncio.sleep(k / 1000)) for k in range(1, 11)]
        tasks.append(asyncio.ensure_future(asyncio.sleep(60)))
        await abort_stragglers(tasks, ctx, rate=0.25)  # keep ceil(0.75 x 11) = 9
        await asyncio.gather(*tasks, return_exceptions=True)
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
