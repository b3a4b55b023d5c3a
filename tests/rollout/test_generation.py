"""generate_with_retries: bounded retries with backoff, distinct call ids, aborts."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.rollout.backends import BackendError, GenerationOutput
from agentrl.rollout.generation import generate_with_retries
from agentrl.rollout.request import AsyncRolloutRequest, RequestState


class Flaky:
    """Fails the first `failures` calls with `error`, then answers."""

    def __init__(self, failures: int, error: Exception | None = None, hang: bool = False):
        self.failures, self.error, self.hang = failures, error, hang
        self.call_ids: list[str] = []
        self.aborted: list[str] = []

    async def generate(self, input_ids, sampling_params, request_id):
        self.call_ids.append(request_id)
        if len(self.call_ids) <= self.failures:
            if self.hang:
                await asyncio.sleep(60)
            raise self.error
        return GenerationOutput([7, 8], "ab", "stop", [-1.0, -2.0])

    async def abort(self, request_id):
        self.aborted.append(request_id)


def new_request() -> AsyncRolloutRequest:
    req = AsyncRolloutRequest(
        batch_data_id=0,
        rollout_offset=0,
        request_id="r",
        messages=[],
        tool_schemas=[],
        tools_kwargs={},
        interaction_kwargs={},
    )
    req.append([1, 2], 0)
    return req


def call(backend, req, **kwargs):
    options = {"timeout": 5.0, "max_retries": 2, "backoff": 0.001, **kwargs}
    return asyncio.run(
        generate_with_retries(backend, req, {"max_new_tokens": 4}, asyncio.Semaphore(1), **options)
    )


def test_retryable_errors_are_retried_then_succeed():
    backend, req = Flaky(2, BackendError("503", retryable=True)), new_request()
    out = call(backend, req)
    assert out.output_ids == [7, 8]
    assert backend.call_ids == ["r-t0-a0", "r-t0-a1", "r-t0-a2"]
    assert (req.metrics.backend_retries, req.metrics.backend_errors) == (2, 0)
    assert req.state == RequestState.PENDING


def test_retries_are_bounded():
    backend, req = Flaky(10, BackendError("503", retryable=True)), new_request()
    assert call(backend, req) is None
    assert len(backend.call_ids) == 3
    assert (req.metrics.backend_retries, req.metrics.backend_errors) == (2, 1)
    assert req.state == RequestState.FAILED
    assert req.error == "backend error after 3 attempt(s): 503"


@pytest.mark.parametrize("error", [BackendError("400 bad", retryable=False), KeyError("x")])
def test_other_errors_fail_at_once(error):
    backend, req = Flaky(1, error), new_request()
    assert call(backend, req) is None
    assert len(backend.call_ids) == 1 and req.metrics.backend_retries == 0


def test_timeouts_abort_and_retry():
    backend, req = Flaky(1, hang=True), new_request()
    out = call(backend, req, timeout=0.05)
    assert out.output_ids == [7, 8]
    assert backend.aborted == ["r-t0-a0"]
    assert req.metrics.backend_retries == 1


def test_cancellation_aborts_the_call():
    backend, req = Flaky(1, hang=True), new_request()

    async def cancel():
        task = asyncio.ensure_future(
            generate_with_retries(
                backend, req, {}, asyncio.Semaphore(1), timeout=60, max_retries=0, backoff=0
            )
        )
        while not backend.call_ids:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel())
    assert backend.aborted == ["r-t0-a0"]
