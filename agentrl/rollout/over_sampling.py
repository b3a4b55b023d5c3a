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
    others (marking the batch `aborting`, so they end as aborted, not as failed)."""
    keep = math.ceil((1 - rate) * len(tasks))
    pending = set(tasks)
    while pending and len(tasks) - len(pending) < keep:
        _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    if pending:
        ctx.aborting = True
        for task in pending:
            task.cancel()
