"""Generation in waves: what makes a rollout repeat exactly (`rollout.deterministic`).

An engine with dynamic batching (the `hf` backend) forms each micro-batch from the requests
waiting at that moment. In a multi-turn rollout, when a request comes back from its tool
call depends on timing, so two runs with the same seed batch requests differently: the
sampler draws its random numbers in another order, and a row's logits can differ in the
last bits with the other rows of its batch (padding, kernel choice). The run diverges.

`GenerationWaves` removes the timing: a request that wants to generate waits until every
live request of the batch (not finished) wants to generate too, then all of them are let
through together, in the order of `(batch_data_id, rollout_offset)`. The backend is idle at
that moment and the event loop hands it the requests in that order, so every micro-batch,
its row order and the sampler's draws are the same in every run. Tool calls of one wave
still run concurrently; what is lost is the overlap of one request's tool call with another
request's generation, which costs little with fast tools and an engine that batches (the
wave is one large batch instead of several small ones).
"""

from __future__ import annotations

import asyncio

from agentrl.rollout.request import AsyncRolloutRequest


class GenerationWaves:
    """The gate of one batch of `live` requests (create it inside the loop that runs them).

        waves = GenerationWaves(len(requests))
        await waves.turn(req)    # before each generation call
        waves.leave(req)         # once, when the request is done (finished or failed)
    """

    def __init__(self, live: int) -> None:
        self.live = live
        self.waves = 0  # waves released so far (tests and metrics)
        self._waiting: dict[tuple[int, int], asyncio.Future] = {}
        self._release_scheduled = False

    async def turn(self, req: AsyncRolloutRequest) -> None:
        """Wait until every live request waits, then go, in request order."""
        key = (req.batch_data_id, req.rollout_offset)
        if key in self._waiting:
            raise RuntimeError(f"request {key} is already waiting for its turn")
        future = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        self._release_if_complete()
        try:
            await future
        finally:
            self._waiting.pop(key, None)  # released, or cancelled while waiting

    def leave(self, req: AsyncRolloutRequest) -> None:
        """The request will not generate again: the others no longer wait for it."""
        self._waiting.pop((req.batch_data_id, req.rollout_offset), None)
        self.live -= 1
        self._release_if_complete()

    def _release_if_complete(self) -> None:
        if self._release_scheduled or not self._waiting or len(self._waiting) < self.live:
            return
        # Released from a callback, not from here: the request whose arrival completes the
        # wave must not run ahead of the others (an awaited future that is already done does
        # not yield), so every request resumes in key order.
        self._release_scheduled = True
        asyncio.get_running_loop().call_soon(self._release)

    def _release(self) -> None:
        self._release_scheduled = False
        if not self._waiting:
            return
        self.waves += 1
        for key in sorted(self._waiting):
            future = self._waiting.pop(key)
            if not future.done():
                future.set_result(None)
