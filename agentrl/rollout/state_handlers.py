"""The rollout's state handlers: one coroutine per request state, each one transition
(docs/rollout.md, "The state machine"), and the end every request runs.

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
- `end`, always at the end: `calc_reward` then `release` for every tool instance, then
  `finalize_interaction`, also after errors and cancellation; then `finalize` (sanity
  check, truncation to the response budget), with the sanity check in the check's worker
  process when the batch checks off the loop (batch_context.py, check_offload.py).

The engine (engine.py) picks the handler of a request's state (`step`) and drives a request
through them (`run_request`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from agentrl.interactions.base import BaseInteraction
from agentrl.models.chat import ChatRenderer
from agentrl.rollout.batch_context import BatchContext
from agentrl.rollout.engine_config import RolloutConfig
from agentrl.rollout.generation import generate_with_retries
from agentrl.rollout.parsers import ParseResult, ToolCallParser
from agentrl.rollout.prompts import PromptReader
from agentrl.rollout.request import AsyncRolloutRequest, FinishReason, RequestState
from agentrl.rollout.tool_calls import end_plugins, run_tool_turn, start_plugins
from agentrl.tools import BaseTool
from agentrl.utils.aio import within
from agentrl.utils.infra import is_infra_error
from agentrl.utils.trace import span

# Response tokens a request may use and the name of the binding limit (the collector's).
ResponseBudget = Callable[[AsyncRolloutRequest], tuple[int, str]]


class StateHandlers:
    """The handlers of one engine's requests (see the module docstring)."""

    def __init__(
        self,
        settings: RolloutConfig,
        renderer: ChatRenderer,
        parser: ToolCallParser,
        prompts: PromptReader,
        response_budget: ResponseBudget,
        tools: Mapping[str, BaseTool],
        interactions: Mapping[str, BaseInteraction],
    ) -> None:
        self.settings = settings
        self.multi_turn = settings.multi_turn
        self.renderer = renderer
        self.parser = parser
        self.prompts = prompts
        self.response_budget = response_budget
        self.tools = tools
        self.interactions = interactions
        # rollout.on_infra_error: with mask or raise an infrastructure failure ends its request
        self.stop_on_infra_error = settings.on_infra_error != "zero"

    async def pending(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        if req.prompt_length > self.settings.prompt_length:
            req.fail(
                f"the prompt has {req.prompt_length} tokens, more than rollout.prompt_length="
                f"{self.settings.prompt_length}; a cut chat prompt cannot be continued (set "
                "data.filter_overlong_prompts=true or raise data.max_prompt_length)"
            )
            return
        if self.multi_turn.enable:
            name = self.prompts.interaction_name(req.batch_data_id, req.interaction_kwargs)
            if not await start_plugins(
                req, self.tools, self.interactions, name, self.multi_turn.tool_timeout
            ):
                return
        req.state = RequestState.RUNNING

    async def running(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
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
            ctx.backend,
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
        )  # fmt: skip
        max_assistant = self.multi_turn.max_assistant_turns
        max_user = self.multi_turn.max_user_turns
        if out.finish_reason == "abort":
            req.finish(FinishReason.ABORT)
        elif out.finish_reason == "length":
            req.finish(
                FinishReason.LENGTH,
                budget_name if max_new == remaining else "max_new_tokens_per_turn",
            )
        elif not (parsed.calls or req.interaction):
            req.finish(FinishReason.STOP)
        elif (max_assistant and req.metrics.assistant_turns >= max_assistant) or (
            max_user and req.metrics.user_turns >= max_user
        ):  # the turn limit
            req.finish(FinishReason.TOOL_CALL if parsed.calls else FinishReason.STOP)
        elif parsed.calls:
            req.pending_calls = parsed.calls
            req.state = RequestState.TOOL_CALLING
        else:
            req.state = RequestState.INTERACTING

    async def tool_calling(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
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

    async def interacting(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
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

    async def end(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        """The end of every request, finished, failed or cancelled: it leaves the waves and
        its plugins' end calls run (shielded: a second cancel leaves them running to the
        end)."""
        if ctx.waves is not None:
            ctx.waves.leave(req)
        cleanup = asyncio.ensure_future(
            end_plugins(req, self.tools, self.interactions, self.multi_turn.tool_timeout)
        )
        with span(ctx.request_track(req), "end_plugins"):
            await asyncio.shield(cleanup)

    async def finalize(self, req: AsyncRolloutRequest, ctx: BatchContext) -> None:
        """After the plugins' end calls: the tokenization check (in the check's process
        when the batch checks off the loop) and the truncation to the response budget; the
        request's row of the output and `on_request_done`."""
        if self.stop_on_infra_error:  # e.g. calc_reward's service failed in end_plugins
            req.fail_infra()
        budget, budget_name = self.response_budget(req)
        mode = self.multi_turn.tokenization_sanity_check_mode
        checked = await ctx.offloaded_check(req, self.renderer, mode)
        req.finalize(self.renderer, budget, budget_name, mode, checked)
        if ctx.rows is not None:
            ctx.rows.add(req)
        if ctx.on_request_done is not None:
            ctx.on_request_done(req)

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

    def _continue_with(self, req: AsyncRolloutRequest, messages: list[dict]) -> None:
        """Append a tool/user turn and the generation prompt; RUNNING unless over budget."""
        req.add_messages(self.renderer, messages)
        budget, budget_name = self.response_budget(req)
        if req.response_length >= budget:
            req.finish(FinishReason.LENGTH, budget_name)
        else:
            req.state = RequestState.RUNNING
