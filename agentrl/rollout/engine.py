"""AsyncRolloutEngine: every sample is its own asyncio state machine against a backend.

    engine = AsyncRolloutEngine(cfg.actor_rollout_ref.rollout, tokenizer, backend,
                                tools=load_tools(path), interactions=load_interactions(path))
    out = engine.generate_sequences(batch)        # or: await engine.agenerate_sequences(batch)

The input batch is `collate_fn` output of RLHFDataset (non-tensor `raw_prompt`,
`tools_kwargs`, `interaction_kwargs`, `data_source`, ...); `meta_info["validate"]` selects
`rollout.val_kwargs` (n = 1, greedy by default). The engine builds n requests per prompt,
runs one coroutine per request with `asyncio.gather`, and returns the DataProto described
in agentrl/rollout/output.py, in `repeat(n, interleave=True)` order.

This module is the batch driver; its parts, each a module named for its job:

- prompts.py: a batch's rows read, checked and rendered, once per prompt (`build_requests`
  makes the n requests of each);
- batch_context.py: what a batch's coroutines share (`new_context`);
- state_handlers.py: one handler per request state and the end every request runs
  (`step` picks the handler, `run_request` drives a request through them);
- over_sampling.py: `rollout.over_sample_rate`'s cancel of the long tail;
- collector.py: the padded output with its metrics (the engine is a `TrajectoryCollector`).

With `rollout.deterministic` (the default with the `hf` backend) requests generate in
waves (waves.py), so batching does not depend on timing and a seeded run repeats. Large
batches run the tokenization check in a worker process (check_offload.py).

A fault ends only its request, never the batch: a FAILED request keeps its tokens with a
zero loss mask and `meta_info["metrics"]` counts it. An infrastructure failure
(agentrl/utils/infra.py) is recorded on the request (`rollout/infra_failed`); with
`rollout.on_infra_error` `mask` or `raise` it ends the request at once. A sample naming an
unknown tool or interaction raises before anything runs (docs/rollout.md, "Faults never end a batch").
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from agentrl.interactions.base import BaseInteraction
from agentrl.protocol import DataProto
from agentrl.rollout.batch_context import BatchContext
from agentrl.rollout.check_offload import CheckOffload, should_offload
from agentrl.rollout.collector import TrajectoryCollector
from agentrl.rollout.engine_config import RolloutConfig
from agentrl.rollout.output import PaddedRows
from agentrl.rollout.over_sampling import abort_stragglers
from agentrl.rollout.parsers import get_tool_parser
from agentrl.rollout.prompts import PromptReader
from agentrl.rollout.request import AsyncRolloutRequest, RequestState
from agentrl.rollout.state_handlers import StateHandlers
from agentrl.rollout.waves import GenerationWaves
from agentrl.tools import BaseTool
from agentrl.utils.aio import LoopThread
from agentrl.utils.gc_pause import rollout_gc, young_threshold_for
from agentrl.utils.plain_config import plain_config
from agentrl.utils.trace import TRACE_EVENTS, TraceRecorder, span

__all__ = ["AsyncRolloutEngine", "BatchContext"]
logger = logging.getLogger(__name__)

OnRequestDone = Callable[[AsyncRolloutRequest], None]


class AsyncRolloutEngine(TrajectoryCollector):
    """Multi-turn rollout over any `GenerationBackend` (see the module docstring).

    A `TrajectoryCollector` (collector.py): `collect`, `padded_rows`, `sampling_params` and
    `response_budget` are the collector's, called on the engine by its callers (the
    off-policy producer, the benches) as by the engine itself.

    Args:
        config: the validated `actor_rollout_ref.rollout` sub-config; the engine reads its
            typed `settings` (`RolloutConfig.from_config`, engine_config.py), made once here.
        tokenizer: the policy's tokenizer (with its chat template).
        backend: an object with the `GenerationBackend` coroutines.
        tools: `{name: BaseTool}` from `load_tools` (possibly wrapped by `wrap_tools`).
        interactions: `{name: BaseInteraction}` from `load_interactions`.
        chat_template_kwargs: `data.apply_chat_template_kwargs`, so prompts render as the
            dataset renders them.
    """

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        backend: Any,
        tools: Mapping[str, BaseTool] | None = None,
        interactions: Mapping[str, BaseInteraction] | None = None,
        *,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ):
        if not callable(getattr(backend, "generate", None)):
            raise TypeError(
                f"backend {type(backend).__name__} has no generate() coroutine; "
                "see agentrl.rollout.backends.GenerationBackend"
            )
        super().__init__(RolloutConfig.from_config(config), tokenizer, chat_template_kwargs)
        self.config = plain_config(config)  # the whole section, resolved (for subclasses)
        self.multi_turn = self.settings.multi_turn
        self.backend = backend
        self.tools = dict(tools or {})
        self.interactions = dict(interactions or {})
        self.prompts = PromptReader(self.multi_turn, self.renderer, self.tools,
                                    self.interactions)  # fmt: skip
        self.tool_schemas = self.prompts.tool_schemas
        self.parser = get_tool_parser(self.multi_turn.format, self.tool_schemas)
        self.handlers = StateHandlers(self.settings, self.renderer, self.parser,
                                      self.prompts, self.response_budget, self.tools,
                                      self.interactions)  # fmt: skip
        self._loop_thread: LoopThread | None = None  # generate_sequences' loop, made once
        self._loop_lock = threading.Lock()
        # rollout.deterministic (waves.py); null -> what the backend asks for (hf: on)
        deterministic = self.settings.deterministic
        if deterministic is None:
            deterministic = getattr(backend, "deterministic_by_default", False)
        self.deterministic = bool(deterministic)
        # multi_turn.tokenization_sanity_check_offload: the check in a worker process
        self.check_offload = CheckOffload(tokenizer, chat_template_kwargs)

    # ------------------------------------------------------------------ the batch

    def prepare(self, requests: int, timeout: float = 60.0) -> bool:
        """Start, before a batch of `requests` requests, what that batch would start: the
        tokenization check's process when the batch would check off the loop
        (`multi_turn.tokenization_sanity_check_offload`), and wait until it is ready (at
        most `timeout` s). Optional: without it the first such batch starts the process and
        checks on the loop until it is ready. Whether the process is ready."""
        offload = self._started_offload(requests)
        return offload is not None and offload.wait_ready(timeout)

    def _started_offload(self, requests: int) -> CheckOffload | None:
        """The tokenization check's process, started, when a batch of `requests` requests
        checks off the loop; None when it checks on the loop (the setting, the batch's size)
        or the process cannot start."""
        setting = self.multi_turn.tokenization_sanity_check_offload
        if not should_offload(setting, requests, self.check_offload.running):
            return None
        return self.check_offload if self.check_offload.start() else None

    def generate_sequences(self, batch: DataProto) -> DataProto:
        """Blocking `agenerate_sequences`, run on the engine's own event loop thread (one
        loop for the engine's lifetime, so loop-bound backend clients keep working)."""
        with self._loop_lock:
            if self._loop_thread is None:
                self._loop_thread = LoopThread("agentrl-rollout")
            loop_thread = self._loop_thread
        return loop_thread.run(self.agenerate_sequences(batch))

    async def agenerate_sequences(
        self, batch: DataProto, *, on_request_done: OnRequestDone | None = None
    ) -> DataProto:
        """Roll out every prompt of `batch` n times; see the module docstring.

        `on_request_done(request)` is called as each request finishes (progress bars).
        With `meta_info["trace"]` (trainer.trace) the requests' timeline is returned in
        `meta_info["trace_events"]` (agentrl/utils/trace.py).
        """
        started = time.perf_counter()
        trace = TraceRecorder.for_call(batch.meta_info, "rollout")
        n, _ = self.sampling_params(bool(batch.meta_info.get("validate", False)))
        with rollout_gc(young_threshold_for(len(batch) * n)):
            requests, rows = await self._rollout(batch, on_request_done, pad=True, trace=trace)
            out = self.collect(requests, batch, time.perf_counter() - started, rows)
        if trace is not None:
            out.meta_info[TRACE_EVENTS] = trace.drain()
        return out

    async def arollout(
        self, batch: DataProto, on_request_done: OnRequestDone | None = None
    ) -> list[AsyncRolloutRequest]:
        """The finished requests of `batch` (n per row), before they are padded into a
        DataProto (`collect`): agent workers send these, far smaller than the padded
        tensors, and the driver collects them."""
        requests, _ = await self._rollout(batch, on_request_done, pad=False)
        return requests

    async def _rollout(
        self,
        batch: DataProto,
        on_request_done: OnRequestDone | None,
        pad: bool,
        trace: TraceRecorder | None = None,
    ) -> tuple[list[AsyncRolloutRequest], PaddedRows | None]:
        """The finished requests and, with ``pad``, their padded rows, each written as its
        request finished (so padding a large batch does not follow its last request)."""
        validate = bool(batch.meta_info.get("validate", False))
        ctx = self.new_context(validate, on_request_done, trace)
        requests = self.build_requests(batch, ctx.n)
        if pad:
            ctx.rows = self.padded_rows([(r.batch_data_id, r.rollout_offset) for r in requests])
        if self.deterministic:
            ctx.waves = GenerationWaves(len(requests))
        ctx.check_offload = self._started_offload(len(requests))
        if ctx.check_offload is not None:
            ctx.unchecked = len(requests)
        rate = 0.0 if validate else self.settings.over_sample_rate
        # every request starts at once: building them in chunks that start as they are built
        # helped the first chunks and delayed the last (measured slower at 2,048)
        with rollout_gc(young_threshold_for(len(requests))):  # utils/gc_pause.py
            tasks = [asyncio.ensure_future(self.run_request(r, ctx)) for r in requests]
            if rate > 0:
                await abort_stragglers(tasks, ctx, rate)
            await asyncio.gather(*tasks)
        return requests, ctx.rows

    def new_context(
        self,
        validate: bool = False,
        on_request_done: OnRequestDone | None = None,
        trace: TraceRecorder | None = None,
    ) -> BatchContext:
        """The shared state of one batch's coroutines (call inside the loop that runs them);
        `trace` records their timeline."""
        n, params = self.sampling_params(validate)
        return BatchContext(
            n=n,
            sampling_params=params,
            generation_slots=asyncio.Semaphore(self.settings.max_concurrent_requests),
            tool_slots={
                name: asyncio.Semaphore(self.multi_turn.max_concurrent_tool_calls)
                for name in self.tools
            },
            on_request_done=on_request_done,
            trace=trace,
            backend=self.backend,
        )

    def build_requests(self, batch: DataProto, n: int) -> list[AsyncRolloutRequest]:
        """n PENDING requests per row, from its prompt rendered once (prompts.py); raises
        on rows naming unknown tools/interactions."""
        batch_id = uuid.uuid4().hex[:8]
        return [
            AsyncRolloutRequest.from_prompt(
                self.renderer,
                prompt.messages,
                prompt.schemas,
                batch_data_id=prompt.row,
                rollout_offset=offset,
                request_id=f"{batch_id}-{prompt.row}-{offset}",
                tools_kwargs=prompt.tools_kwargs,
                interaction_kwargs=prompt.interaction_kwargs,
                prompt_ids=prompt.prompt_ids,
                tool_names=prompt.tool_names,
                known_pieces=prompt.known_pieces,
            )
            for prompt in self.prompts.read(batch)
            for offset in range(n)
        ]

    # ------------------------------------------------------------------ one request

    async def run_request(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        """Drive one request to COMPLETED or FAILED; never raises except on cancellation.
        Traced: a `request` span on the request's track holding one span per state."""
        track, started = ctx.request_track(req), time.perf_counter()
        try:
            while req.state not in (RequestState.COMPLETED, RequestState.FAILED):
                with span(track, req.state.name):
                    await self.step(req, ctx)
        except asyncio.CancelledError:
            if not ctx.aborting:
                req.fail("cancelled")
                raise
            req.abort("cancelled: enough requests finished (rollout.over_sample_rate)")
        except Exception as err:  # a bug or a plugin breaking its contract: this request only
            logger.exception("request %s: unexpected error", req.request_id)
            req.fail(f"unexpected {type(err).__name__}: {err}")
        finally:
            await self.handlers.end(req, ctx)  # the plugins' end calls, also when cancelled
        await self.handlers.finalize(req, ctx)
        if track is not None:
            track.complete("request", started, time.perf_counter(), {
                "state": req.state.name, "finish_reason": getattr(req.finish_reason, "value", None),
                "turns": req.num_turns(), "response_tokens": req.response_length,
                "error": req.error})  # fmt: skip

    async def step(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        """Run the handler of the request's current state (one transition)."""
        handlers = self.handlers
        handler = {
            RequestState.PENDING: handlers.pending,
            RequestState.RUNNING: handlers.running,
            RequestState.TOOL_CALLING: handlers.tool_calling,
            RequestState.INTERACTING: handlers.interacting,
        }[req.state]
        await handler(req, ctx)

    def close(self) -> None:
        """Stop the event-loop thread of `generate_sequences` (if it was started) and the
        tokenization check's process."""
        self.check_offload.close()
        with self._loop_lock:
            loop_thread, self._loop_thread = self._loop_thread, None
        if loop_thread is not None:
            loop_thread.close()
