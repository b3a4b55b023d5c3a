"""One generation call of a request, with a timeout and bounded retries (the RUNNING state).

`generate_with_retries` sends the request's whole token list to the backend, holding one
of the batch's generation slots (`rollout.max_concurrent_requests`). A `BackendError`
with `retryable=True` (connection errors, 429, 5xx) or no answer within
`rollout.request_timeout` is retried after `retry_backoff * 2**k` seconds, at most
`rollout.max_retries` times; any other error fails at once. A request FAILED after its
retries of a retryable error also records it as an infrastructure failure of kind
`generation` (agentrl/utils/infra.py). A call that times out or is
cancelled is aborted on the backend (best effort). Each call has its own id,
`{request_id}-t{turn}-a{attempt}`, so an abort never hits a later call. Traced
(trainer.trace), each attempt is a `generate` span on the request's track, from the slot
taken to the answer, with the server, the tokens in and out and the policy version.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

from agentrl.rollout.backends.base import BackendError, GenerationOutput
from agentrl.rollout.request import AsyncRolloutRequest
from agentrl.utils.aio import within
from agentrl.utils.trace import Track, span

logger = logging.getLogger(__name__)


async def generate_with_retries(
    backend: Any,
    req: AsyncRolloutRequest,
    params: dict[str, Any],
    slots: asyncio.Semaphore,
    *,
    timeout: float,
    max_retries: int,
    backoff: float,
    trace: Track | None = None,
) -> GenerationOutput | None:
    """The backend's output, or None with the request FAILED (and counted); `trace`: the
    request's track of the timeline."""
    for attempt in itertools.count():
        call_id = f"{req.request_id}-t{req.metrics.assistant_turns}-a{attempt}"
        started = time.perf_counter()
        try:
            async with slots:
                with span(trace, "generate", call_id=call_id,
                          prompt_tokens=len(req.input_ids)) as args:  # fmt: skip
                    out = await within(backend.generate(list(req.input_ids), params, call_id),
                                       timeout)
                    if args is not None:
                        args.update(server=out.meta_info.get("server_url", type(backend).__name__),
                                    output_tokens=len(out.output_ids),
                                    finish_reason=out.finish_reason,
                                    policy_version=out.weight_version)  # fmt: skip
                    return out
        except asyncio.CancelledError:
            await abort(backend, call_id)
            raise
        except (asyncio.TimeoutError, TimeoutError):
            await abort(backend, call_id)
            error = BackendError(
                f"no answer within rollout.request_timeout={timeout} s", retryable=True
            )
        except BackendError as err:
            error = err
        except Exception as err:  # a user backend breaking the protocol: not retried
            error = BackendError(f"{type(err).__name__}: {err}", retryable=False)
        finally:
            req.metrics.generation_s += time.perf_counter() - started
        if not error.retryable or attempt >= max_retries:
            req.metrics.backend_errors += 1
            message = f"backend error after {attempt + 1} attempt(s): {error}"
            if error.retryable:  # the engine is down or overloaded, not the model's doing
                req.note_infra_error("generation", message)
            req.fail(message)
            return None
        req.metrics.backend_retries += 1
        logger.info("request %s: retrying after backend error: %s", req.request_id, error)
        await asyncio.sleep(backoff * 2**attempt)
    raise AssertionError("unreachable")


async def abort(backend: Any, call_id: str) -> None:
    """Ask the backend to stop a call; never raises (the call is failing or cancelled)."""
    method = getattr(backend, "abort", None)
    if method is None:
        return
    try:
        await asyncio.wait_for(method(call_id), 5.0)
    except Exception as err:
        logger.debug("abort of %s failed: %s", call_id, err)
