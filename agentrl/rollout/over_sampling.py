"""Over-sampling (`rollout.over_sample_rate`, verl's key): once ceil((1 - r) x N) of a
training batch's N requests have finished the rest are cancelled, so the long tail does not
hold the step. A cancelled request still runs its plugins' end calls, is FAILED with
`aborted` set (so it never trains and forms its own advantage group) and is counted in
`rollout/aborted` (engine.py's `run_request`). Validation batches are never cut.
"""

from __future__ import annotations

import asyncio
import math

from agentrl.rollout.batch_context import BatchContext


async def abort_stragglers(tasks: list[asyncio.Future], ctx: BatchContext, rate: float) -> None:
    """Wait until ceil((1 - rate) x N) of the N `tasks` have finished, then cancel the
    others (marking the batch `aborting`, so they end as aborted, not as failed).

    One done callback per task counts the finished ones: O(1) per finished request (an
    `asyncio.wait` over the pending tasks after each finish registered and removed a
    callback on every one of them, O(N) per finish)."""
    keep = math.ceil((1 - rate) * len(tasks))
    enough = asyncio.get_running_loop().create_future()
    finished = 0

    def count(_: asyncio.Future) -> None:
        nonlocal finished
        finished += 1
        if finished >= keep and not enough.done():
            enough.set_result(None)

    if sum(task.done() for task in tasks) < keep:
        for task in tasks:
            task.add_done_callback(count)
        try:
            await enough
        finally:
            for task in tasks:
                task.remove_done_callback(count)
    pending = [task for task in tasks if not task.done()]
    if pending:
        ctx.aborting = True
        for task in pending:
            task.cancel()
