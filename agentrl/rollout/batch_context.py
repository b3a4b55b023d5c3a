"""BatchContext: what the coroutines of one rollout batch share, and the batch's side of the
tokenization check in a worker process (check_offload.py).

The engine makes one per batch (`AsyncRolloutEngine.new_context`, inside the loop that runs
the batch: asyncio primitives belong to their loop); the off-policy producer makes one for
its open-ended stream of requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.models.chat import ChatRenderer
from agentrl.rollout.backends.base import GenerationBackend
from agentrl.rollout.check_offload import CheckOffload
from agentrl.rollout.output import PaddedRows
from agentrl.rollout.request import AsyncRolloutRequest
from agentrl.rollout.waves import GenerationWaves
from agentrl.utils.trace import TraceRecorder, Track


@dataclass
class BatchContext:
    """What one batch's coroutines share (created per call: asyncio primitives belong to
    the loop that runs them)."""

    n: int  # trajectories per prompt
    sampling_params: dict[str, Any]
    generation_slots: asyncio.Semaphore
    tool_slots: dict[str, asyncio.Semaphore]
    on_request_done: Callable[[AsyncRolloutRequest], None] | None = None
    waves: GenerationWaves | None = None  # rollout.deterministic: generate in waves
    aborting: bool = False  # set when over-sampling cancels the requests still running
    rows: PaddedRows | None = None  # the output's rows, written as requests finish
    trace: TraceRecorder | None = None  # trainer.trace: the timeline of the batch's requests
    # the tokenization check's process, when this batch checks off the loop (check_offload.py)
    check_offload: CheckOffload | None = None
    # requests of the batch not at their tokenization check yet (None: an open-ended stream
    # of requests, the async producer's): while some are, a finished request's check may
    # queue for the process; the last one to arrive has the loop take what still queues
    unchecked: int | None = None
    backend: GenerationBackend | None = None  # the engine's backend when the batch started

    def request_track(self, req: AsyncRolloutRequest) -> Track | None:
        """The request's row of the timeline (None when not tracing)."""
        return None if self.trace is None else self.trace.track(f"request {req.request_id}")

    async def offloaded_check(self, req: AsyncRolloutRequest, renderer: ChatRenderer,
                              mode: str) -> Any:  # fmt: skip
        """The request's tokenization check run in the check's process (None: `finalize`
        checks inline). The request has finished: over-sampling's cancel does not stop it."""
        if self.unchecked is not None:
            self.unchecked -= 1
        item = req.check_input(mode) if self.check_offload is not None else None
        if self.unchecked == 0 and self.check_offload is not None:  # nothing else runs now
            self.check_offload.start_stealing(renderer)
        if item is None:
            return None
        hold = self.unchecked is not None and self.unchecked > 0
        result = asyncio.ensure_future(self.check_offload.check(item, renderer, hold))
        while True:
            try:
                return await asyncio.shield(result)
            except asyncio.CancelledError:
                if not self.aborting:
                    raise
