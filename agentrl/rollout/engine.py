"""AsyncRolloutEngine: every sample is its own asyncio state machine against a backend.

    engine = AsyncRolloutEngine(cfg.actor_rollout_ref.rollout, tokenizer, backend,
                                tools=load_tools(path), interactions=load_interactions(path))
    out = engine.generate_sequences(batch)        # or: await engine.agenerate_sequences(batch)

The input batch is `collate_fn` output of RLHFDataset (non-tensor `raw_prompt`,
`tools_kwargs`, `interaction_kwargs`, `data_source`, ...); `meta_info["validate"]` selects
`rollout.val_kwargs` (n = 1, greedy by default). The engine builds n requests per prompt,
runs one coroutine per request with `asyncio.gather`, and returns the DataProto described
in agentrl/rollout/output.py, in `repeat(n, interleave=True)` order.

One handler per state (docs/rollout.md, "The state machine"):

- PENDING: create one tool instance per tool shown to the sample (create_kwargs from its
  `tools_kwargs`), start its interaction -> RUNNING.
- RUNNING: generate (bounded by `max_concurrent_requests`; retryable backend errors are
  retried with exponential backoff up to `max_retries`, then the request is FAILED), append
  the exact output ids, parse tool calls -> TOOL_CALLING, INTERACTING or COMPLETED.
- TOOL_CALLING: run the turn's calls concurrently through `execute_tool_call` (schema
  validation, per-call timeout, errors as text), at most `max_concurrent_tool_calls` per
  tool across the batch; append the responses as a template delta -> RUNNING.
- INTERACTING: ask the interaction for the user's reply -> RUNNING or COMPLETED. After a tool
  turn the interaction's stop rule is asked too (`after_tool_turn`) -> RUNNING or COMPLETED.
- always at the end: `calc_reward` then `release` for every tool instance, then
  `finalize_interaction`, also after errors and cancellation; then `finalize` (sanity
  check, truncation to the response budget). The sanity check runs in one worker process
  of the engine's (`multi_turn.tokenization_sanity_check_offload`; check_offload.py) for
  large batches, so the event loop does not spend a template render per request on it.

With `rollout.deterministic` (the default with the `hf` backend) requests generate in
waves (agentrl/rollout/waves.py): each generation call waits until every live request of the
batch is ready to generate, so batching does not depend on timing and a seeded run repeats.

With `rollout.over_sample_rate` r > 0 (training batches only; verl's key), once
ceil((1 - r) x N) of the N requests have finished the rest are cancelled: the long tail
does not hold the step. A cancelled request still runs its plugins' end calls, is FAILED
with `aborted` set (so it never trains and forms its own advantage group) and is counted in
`rollout/aborted`.

A fault ends only its request, never the batch: a FAILED request keeps its tokens with a
zero loss mask, and `meta_info["metrics"]` counts it. An infrastructure failure (a tool's
service down or timing out, an environment that crashed, the backend failing after its
retries: agentrl/utils/infra.py) is recorded on the request (`infra_error`, counted in
`rollout/infra_failed`); with `rollout.on_infra_error` `mask` or `raise` the request ends
FAILED at once (the trainer then keeps it out of training, or stops), with `zero` it goes
on as any other (a tool's error text reaches the model). Configuration errors (an unknown
tool or interaction named by a sample) raise before anything runs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.data.rows import select_tool_schemas
from agentrl.interactions.base import BaseInteraction
from agentrl.protocol import DataProto
from agentrl.rollout.check_offload import CheckOffload, should_offload
from agentrl.rollout.collector import TrajectoryCollector
from agentrl.rollout.engine_config import RolloutConfig
from agentrl.rollout.generation import generate_with_retries
from agentrl.rollout.output import PaddedRows
from agentrl.rollout.parsers import ParseResult, get_tool_parser
from agentrl.rollout.request import AsyncRolloutRequest, FinishReason, RequestState
from agentrl.rollout.tool_calls import end_plugins, run_tool_turn, start_plugins
from agentrl.rollout.waves import GenerationWaves
from agentrl.tools import BaseTool
from agentrl.utils.aio import LoopThread, within
from agentrl.utils.gc_pause import rollout_gc
from agentrl.utils.infra import is_infra_error
from agentrl.utils.plain_config import plain_config
from agentrl.utils.trace import TRACE_EVENTS, TraceRecorder, Track, span

logger = logging.getLogger(__name__)


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

    def request_track(self, req: AsyncRolloutRequest) -> Track | None:
        """The request's row of the timeline (None when not tracing)."""
        return None if self.trace is None else self.trace.track(f"request {req.request_id}")


class AsyncRolloutEngine:
    """Multi-turn rollout over any `GenerationBackend` (see the module docstring).

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
        self.config = plain_config(config)  # the whole section, resolved (for subclasses)
        self.settings = RolloutConfig.from_config(config)  # what the engine reads, typed
        self.multi_turn = self.settings.multi_turn
        self.tokenizer = tokenizer
        self.backend = backend
        self.tools = dict(tools or {})
        self.interactions = dict(interactions or {})
        self.collector = TrajectoryCollector(self.settings, tokenizer, chat_template_kwargs)
        self.renderer = self.collector.renderer
        self.tool_schemas = [
            t.get_openai_tool_schema().model_dump(exclude_none=True) for t in self.tools.values()
        ]
        self.parser = get_tool_parser(self.multi_turn.format, self.tool_schemas)
        self.pad_token_id = self.collector.pad_token_id
        self._loop_thread: LoopThread | None = None  # generate_sequences' loop, made once
        self._loop_lock = threading.Lock()
        self._warned_prompt_mismatch = False
        # rollout.deterministic (waves.py); null -> what the backend asks for (hf: on)
        deterministic = self.settings.deterministic
        if deterministic is None:
            deterministic = getattr(backend, "deterministic_by_default", False)
        self.deterministic = bool(deterministic)
        # rollout.on_infra_error: with mask or raise an infrastructure failure ends its request
        self.on_infra_error = self.settings.on_infra_error  # checked by from_config
        self.stop_on_infra_error = self.on_infra_error != "zero"
        # multi_turn.tokenization_sanity_check_offload: the check in a worker process
        self.check_offload_setting = self.multi_turn.tokenization_sanity_check_offload
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
        if not should_offload(self.check_offload_setting, requests, self.check_offload.running):
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
        self,
        batch: DataProto,
        *,
        on_request_done: Callable[[AsyncRolloutRequest], None] | None = None,
    ) -> DataProto:
        """Roll out every prompt of `batch` n times; see the module docstring.

        `on_request_done(request)` is called as each request finishes (progress bars).
        With `meta_info["trace"]` (trainer.trace) the requests' timeline is returned in
        `meta_info["trace_events"]` (agentrl/utils/trace.py).
        """
        started = time.perf_counter()
        trace = TraceRecorder.for_call(batch.meta_info, "rollout")
        with rollout_gc():
            requests, rows = await self._rollout(batch, on_request_done, pad=True, trace=trace)
            out = self.collect(requests, batch, time.perf_counter() - started, rows)
        if trace is not None:
            out.meta_info[TRACE_EVENTS] = trace.drain()
        return out

    async def arollout(
        self,
        batch: DataProto,
        on_request_done: Callable[[AsyncRolloutRequest], None] | None = None,
    ) -> list[AsyncRolloutRequest]:
        """The finished requests of `batch` (n per row), before they are padded into a
        DataProto (`collect`): agent workers send these, far smaller than the padded
        tensors, and the driver collects them."""
        requests, _ = await self._rollout(batch, on_request_done, pad=False)
        return requests

    async def _rollout(
        self,
        batch: DataProto,
        on_request_done: Callable[[AsyncRolloutRequest], None] | None,
        pad: bool,
        trace: TraceRecorder | None = None,
    ) -> tuple[list[AsyncRolloutRequest], PaddedRows | None]:
        """The finished requests and, with ``pad``, their padded rows, each written as its
        request finished (so padding a large batch does not follow its last request)."""
        ctx = self.new_context(bool(batch.meta_info.get("validate", False)), on_request_done,
                               trace)  # fmt: skip
        requests = self.build_requests(batch, ctx.n)
        if pad:
            ctx.rows = self.padded_rows([(r.batch_data_id, r.rollout_offset) for r in requests])
        if self.deterministic:
            ctx.waves = GenerationWaves(len(requests))
        ctx.check_offload = self._started_offload(len(requests))
        if ctx.check_offload is not None:
            ctx.unchecked = len(requests)
        rate = 0.0 if batch.meta_info.get("validate", False) else self.settings.over_sample_rate
        # every request starts at once: building them in chunks that start as they are built
        # helped the first chunks and delayed the last (measured slower at 2,048)
        with rollout_gc():  # agentrl/utils/gc_pause.py: ~1 s of 9 at 2,048 requests
            tasks = [asyncio.ensure_future(self.run_request(r, ctx)) for r in requests]
            if rate > 0:
                await self._abort_stragglers(tasks, ctx, keep=math.ceil((1 - rate) * len(tasks)))
            await asyncio.gather(*tasks)
        return requests, ctx.rows

    @staticmethod
    async def _abort_stragglers(tasks: list[asyncio.Future], ctx: BatchContext, keep: int) -> None:
        """Wait until `keep` requests have finished, then cancel the others."""
        pending = set(tasks)
        while pending and len(tasks) - len(pending) < keep:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if pending:
            ctx.aborting = True
            for task in pending:
                task.cancel()

    def new_context(
        self,
        validate: bool = False,
        on_request_done: Callable[[AsyncRolloutRequest], None] | None = None,
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
        )

    # finishing trajectories: the collector's (collector.py), here for the engine's callers
    def padded_rows(self, keys: list[tuple[int, int]]) -> PaddedRows:
        return self.collector.padded_rows(keys)

    def collect(self, requests: list[AsyncRolloutRequest], batch: DataProto, wall_s: float,
                rows: PaddedRows | None = None) -> DataProto:  # fmt: skip
        return self.collector.collect(requests, batch, wall_s, rows)

    def sampling_params(self, validate: bool) -> tuple[int, dict[str, Any]]:
        return self.collector.sampling_params(validate)

    def response_budget(self, req: AsyncRolloutRequest) -> tuple[int, str]:
        return self.collector.response_budget(req)

    def build_requests(self, batch: DataProto, n: int) -> list[AsyncRolloutRequest]:
        """n PENDING requests per row; raises on rows naming unknown tools/interactions."""
        columns = batch.non_tensor_batch
        if "raw_prompt" not in columns:
            raise KeyError(
                "the rollout needs non_tensor_batch['raw_prompt'] (the chat "
                "messages; set data.return_raw_chat=true)"
            )
        rows = []
        for i in range(len(batch)):
            tools_kwargs = (
                dict(columns["tools_kwargs"][i] or {}) if "tools_kwargs" in columns else {}
            )
            interaction_kwargs = (
                dict(columns["interaction_kwargs"][i] or {})
                if "interaction_kwargs" in columns
                else {}
            )
            self._check_row(i, tools_kwargs, interaction_kwargs)
            mode = self.multi_turn.tool_schemas_in_prompt
            schemas = select_tool_schemas(self.tool_schemas, tools_kwargs, mode)
            # the sample may call what the prompt shows; with none shown, its own tools
            callable_schemas = (
                select_tool_schemas(self.tool_schemas, tools_kwargs, "own")
                if mode == "none"
                else schemas
            )
            messages = [dict(m) for m in columns["raw_prompt"][i]]
            rows.append((tools_kwargs, interaction_kwargs, schemas, callable_schemas, messages))
        # every prompt once for its n samples; their shared pieces encoded once
        texts = [self.renderer.render_prompt(row[4], True, row[2]) for row in rows]
        batch_id = uuid.uuid4().hex[:8]
        requests = []
        checking = self.multi_turn.tokenization_sanity_check_mode != "disable"
        for i, (prompt_ids, pieces) in enumerate(self.renderer.encode_prompts(texts)):
            tools_kwargs, interaction_kwargs, schemas, callable_schemas, messages = rows[i]
            if "raw_prompt_ids" in columns:
                self._compare_with_dataset(i, prompt_ids, columns["raw_prompt_ids"][i])
            # the prompt's pieces for the sanity check, shared by the n
            known: dict[str, tuple[int, ...]] = pieces if checking else {}
            for offset in range(n):
                requests.append(
                    AsyncRolloutRequest.from_prompt(
                        self.renderer,
                        messages,
                        schemas,
                        batch_data_id=i,
                        rollout_offset=offset,
                        request_id=f"{batch_id}-{i}-{offset}",
                        tools_kwargs=tools_kwargs,
                        interaction_kwargs=interaction_kwargs,
                        prompt_ids=prompt_ids,
                        tool_names=[s["function"]["name"] for s in callable_schemas],
                        known_pieces=known,
                    )
                )
        return requests

    def _compare_with_dataset(self, i: int, prompt_ids: list[int], dataset_ids: Any) -> None:
        """Warn (once) when the dataset rendered the prompt differently: the trainer then
        sees other prompt tokens than the dataset's (chat_template_kwargs not passed?)."""
        if self._warned_prompt_mismatch or list(dataset_ids) == prompt_ids:
            return
        self._warned_prompt_mismatch = True
        logger.warning(
            "row %d: the rollout renders the prompt as %d tokens, the dataset's raw_prompt_ids "
            "have %d (different); pass data.apply_chat_template_kwargs to the engine as "
            "chat_template_kwargs, and keep prompts within data.max_prompt_length",
            i,
            len(prompt_ids),
            len(dataset_ids),
        )

    def _check_row(self, i: int, tools_kwargs: dict, interaction_kwargs: dict) -> None:
        if not self.multi_turn.enable:
            return
        unknown = sorted(set(tools_kwargs) - set(self.tools))
        if unknown:
            raise ValueError(
                f"row {i}: tools_kwargs names tools {unknown} that are not loaded "
                f"(loaded: {', '.join(self.tools) or 'none'}; see "
                "multi_turn.tool_config_path)"
            )
        if interaction_kwargs and self.interactions:
            self._interaction_name(i, interaction_kwargs)

    def _interaction_name(self, i: int, interaction_kwargs: dict) -> str | None:
        if not (interaction_kwargs and self.interactions and self.multi_turn.enable):
            return None
        name = interaction_kwargs.get("name")
        if name is None and len(self.interactions) == 1:
            return next(iter(self.interactions))
        if name not in self.interactions:
            raise ValueError(
                f"row {i}: interaction_kwargs.name is {name!r}; loaded "
                f"interactions: {', '.join(self.interactions)} (see "
                "multi_turn.interaction_config_path)"
            )
        return name

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
            if ctx.waves is not None:
                ctx.waves.leave(req)
            cleanup = asyncio.ensure_future(
                end_plugins(req, self.tools, self.interactions, self.multi_turn.tool_timeout)
            )
            with span(track, "end_plugins"):
                await asyncio.shield(cleanup)  # a second cancel leaves it running to the end
        if self.stop_on_infra_error:  # e.g. calc_reward's service failed in end_plugins
            req.fail_infra()
        budget, budget_name = self.response_budget(req)
        mode = self.multi_turn.tokenization_sanity_check_mode
        checked = await self._offloaded_check(req, ctx, mode)
        req.finalize(self.renderer, budget, budget_name, mode, checked)
        if ctx.rows is not None:
            ctx.rows.add(req)
        if ctx.on_request_done is not None:
            ctx.on_request_done(req)
        if track is not None:
            track.complete("request", started, time.perf_counter(), {
                "state": req.state.name, "finish_reason": getattr(req.finish_reason, "value", None),
                "turns": req.num_turns(), "response_tokens": req.response_length,
                "error": req.error})  # fmt: skip

    async def _offloaded_check(self, req: AsyncRolloutRequest, ctx: BatchContext,
                               mode: str) -> Any:  # fmt: skip
        """The request's tokenization check run in the check's process (None: `finalize`
        checks inline). The request has finished: over-sampling's cancel does not stop it."""
        if ctx.unchecked is not None:
            ctx.unchecked -= 1
        item = req.check_input(mode) if ctx.check_offload is not None else None
        if ctx.unchecked == 0 and ctx.check_offload is not None:  # nothing else runs now
            ctx.check_offload.start_stealing(self.renderer)
        if item is None:
            return None
        hold = ctx.unchecked is not None and ctx.unchecked > 0
        result = asyncio.ensure_future(ctx.check_offload.check(item, self.renderer, hold))
        while True:
            try:
                return await asyncio.shield(result)
            except asyncio.CancelledError:
                if not ctx.aborting:
                    raise

    async def step(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        """Run the handler of the request's current state (one transition)."""
        handler = {
            RequestState.PENDING: self._handle_pending,
            RequestState.RUNNING: self._handle_running,
            RequestState.TOOL_CALLING: self._handle_tool_calling,
            RequestState.INTERACTING: self._handle_interacting,
        }[req.state]
        await handler(req, ctx)

    async def _handle_pending(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        if req.prompt_length > self.settings.prompt_length:
            req.fail(
                f"the prompt has {req.prompt_length} tokens, more than rollout.prompt_length="
                f"{self.settings.prompt_length}; a cut chat prompt cannot be continued (set "
                "data.filter_overlong_prompts=true or raise data.max_prompt_length)"
            )
            return
        if self.multi_turn.enable:
            name = self._interaction_name(req.batch_data_id, req.interaction_kwargs)
            if not await start_plugins(
                req, self.tools, self.interactions, name, self.multi_turn.tool_timeout
            ):
                return
        req.state = RequestState.RUNNING

    async def _handle_running(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        budget, budget_name = self.response_budget(req)
        remaining = budget - req.response_length
        if remaining <= 0:
            req.finish(FinishReason.LENGTH, budget_name)
            return
        per_turn = self.multi_turn.max_new_tokens_per_turn
        max_new = min(remaining, per_turn) if per_turn else remaining
        if ctx.waves is not None:
            await ctx.waves.turn(req)
        out = await generate_with_retries(
            self.backend,
            req,
            {**ctx.sampling_params, "max_new_tokens": max_new},
            ctx.generation_slots,
            timeout=self.settings.request_timeout,
            max_retries=self.settings.max_retries,
            backoff=self.multi_turn.retry_backoff,
            trace=ctx.request_track(req),
        )
        if out is None:
            return
        req.metrics.assistant_turns += 1
        content = req.add_model_output(
            self.renderer, out.output_ids, out.output_log_probs, out.token_weight_versions
        )
        parsed = (
            self.parser.parse(content)
            if self.multi_turn.enable and req.tool_instances
            else ParseResult(content, [])
        )
        req.add_assistant_message(
            self.renderer, content, parsed.normal_text,
            parsed.message_tool_calls(req.metrics.assistant_turns),
        )
        if out.finish_reason == "abort":
            req.finish(FinishReason.ABORT)
        elif out.finish_reason == "length":
            req.finish(
                FinishReason.LENGTH,
                budget_name if max_new == remaining else "max_new_tokens_per_turn",
            )
        elif not (parsed.calls or req.interaction):
            req.finish(FinishReason.STOP)
        elif self._turn_limit_reached(req):
            req.finish(FinishReason.TOOL_CALL if parsed.calls else FinishReason.STOP)
        elif parsed.calls:
            req.pending_calls = parsed.calls
            req.state = RequestState.TOOL_CALLING
        else:
            req.state = RequestState.INTERACTING

    def _turn_limit_reached(self, req: AsyncRolloutRequest) -> bool:
        max_assistant = self.multi_turn.max_assistant_turns
        max_user = self.multi_turn.max_user_turns
        return bool(
            (max_assistant and req.metrics.assistant_turns >= max_assistant)
            or (max_user and req.metrics.user_turns >= max_user)
        )

    async def _handle_tool_calling(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        messages = await run_tool_turn(
            req, req.pending_calls, self.tools, ctx.tool_slots, self.multi_turn,
            trace=ctx.request_track(req),
        )  # fmt: skip
        req.pending_calls = []
        req.metrics.user_turns += 1
        if self.stop_on_infra_error and req.infra_error is not None:
            req.fail_infra()  # the trajectory will not train: generating on is wasted
            return
        self._continue_with(req, messages)
        if req.state is RequestState.RUNNING and req.interaction:
            # the environment's stop rule after tool turns too (e.g. its max_turns)
            outcome = await self._ask_interaction(req, "after_tool_turn")
            if outcome is not None and outcome[0]:
                req.reward_scores.setdefault("user_turn_rewards", []).append(float(outcome[1]))
                req.finish(FinishReason.STOP)

    async def _ask_interaction(self, req: AsyncRolloutRequest, method: str) -> tuple | None:
        """The request's interaction's ``method`` on the conversation so far, within the tool
        timeout; None (the request failed with the reason) when it raised or hung."""
        interaction = self.interactions[req.interaction]
        started = time.perf_counter()
        try:
            return await within(
                getattr(interaction, method)(
                    req.request_id, [dict(m) for m in req.messages], **req.interaction_kwargs
                ),
                self.multi_turn.tool_timeout,
            )
        except Exception as err:
            req.metrics.interaction_errors += 1
            error = (f"interaction {req.interaction!r}: {method} raised "
                     f"{type(err).__name__}: {err}")
            if is_infra_error(err):
                req.note_infra_error("interaction", error)
            req.fail(error)
            return None
        finally:
            req.metrics.interaction_s += time.perf_counter() - started

    async def _handle_interacting(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        outcome = await self._ask_interaction(req, "generate_response")
        if outcome is None:
            return
        terminate, text, score, _ = outcome
        req.reward_scores.setdefault("user_turn_rewards", []).append(float(score))
        if terminate:
            req.finish(FinishReason.STOP)
            return
        req.metrics.user_turns += 1
        self._continue_with(req, [{"role": "user", "content": str(text)}])

    def _continue_with(self, req: AsyncRolloutRequest, messages: list[dict]) -> None:
        """Append a tool/user turn and the generation prompt; RUNNING unless over budget."""
        req.add_messages(self.renderer, messages)
        budget, budget_name = self.response_budget(req)
        if req.response_length >= budget:
            req.finish(FinishReason.LENGTH, budget_name)
        else:
            req.state = RequestState.RUNNING

    # ------------------------------------------------------------------ blocking calls

    def close(self) -> None:
        """Stop the event-loop thread of `generate_sequences` (if it was started) and the
        tokenization check's process."""
        self.check_offload.close()
        with self._loop_lock:
            loop_thread, self._loop_thread = self._loop_thread, None
        if loop_thread is not None:
            loop_thread.close()
