"""The TOOL_CALLING turn and the start and end of a trajectory's plugins (tools, interaction).

`run_tool_turn` answers every call of one model turn, concurrently, with one tool message
per call, in the order of the calls:

| the call                                   | the tool message              | counted as            |
| ------------------------------------------ | ----------------------------- | --------------------- |
| unreadable (bad JSON, no name)             | parse error and the format    | `parse_errors`        |
| beyond `max_parallel_calls` in the turn    | "not executed" error          | `too_many_calls`      |
| a tool the sample does not have            | unknown tool, lists its tools | `unknown_tool`        |
| arguments failing the schema, a raise, a   | `execute_tool_call`'s error   | its `tool_error` kind |
| timeout, a bad return value                | text                          |                       |
| fine                                       | the response text             | `tool_calls[name]`    |

Responses longer than `max_tool_response_length` characters are cut on the configured
side. `start_plugins` creates the tool instances and starts the interaction; `end_plugins` runs `calc_reward` then `release` for every tool instance and
`finalize_interaction`, each bounded by the tool timeout; their errors are logged and
counted, never raised. Traced (trainer.trace), every executed call is a `tool` span with the
tool, its latency and outcome; the calls of one turn run at once, so call k > 0 of a turn is
on a lane of its own beside the request's track.

An infrastructure failure (agentrl/utils/infra.py: a call whose metrics carry `infra_error`,
a `create`, `calc_reward`, interaction start or finalize that raised an `InfraError`, a
timeout or a connection error) is recorded on the request (`note_infra_error`, kind: the
tool's name or `interaction`); the engine decides what follows (`rollout.on_infra_error`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from agentrl.interactions.base import BaseInteraction
from agentrl.protocol import INFRA_ERROR_KEY, STEP_REWARDS_KEY
from agentrl.rollout.parsers import ParsedCall, call_id
from agentrl.rollout.request import AsyncRolloutRequest
from agentrl.tools import BaseTool, execute_tool_call
from agentrl.utils.aio import gather_inline, within
from agentrl.utils.infra import is_infra_error
from agentrl.utils.trace import Track

logger = logging.getLogger(__name__)

TRUNCATED = "...(truncated)"


def truncate_text(text: str, max_chars: int, side: str) -> str:
    """Keep `max_chars` characters of a tool response (verl's sides): `left` keeps the
    start, `right` the end, `middle` both ends; a marker shows where text was cut."""
    if len(text) <= max_chars:
        return text
    if side == "left":
        return text[:max_chars] + TRUNCATED
    if side == "right":
        return TRUNCATED + text[len(text) - max_chars :]
    half = max_chars // 2
    return text[:half] + TRUNCATED + text[len(text) - (max_chars - half) :]


async def run_tool_turn(
    req: AsyncRolloutRequest,
    calls: list[ParsedCall],
    tools: Mapping[str, BaseTool],
    tool_slots: Mapping[str, asyncio.Semaphore],
    multi_turn: Any,
    trace: Track | None = None,
) -> list[dict[str, Any]]:
    """Answer the turn's calls concurrently; returns the tool messages, in call order;
    `trace`: the request's track of the timeline.

    Step rewards are recorded at the response position of the turn's last model token, and
    per tool under `reward_scores["step_rewards"]`.
    """
    position = req.response_length - 1
    turn = req.metrics.assistant_turns
    runnable = [c.error is None and c.name in req.tool_instances for c in calls]
    # the first max_parallel_calls runnable calls run; later ones are answered with an error
    over_limit = [
        r and sum(runnable[: i + 1]) > multi_turn.max_parallel_calls for i, r in enumerate(runnable)
    ]
    started = time.perf_counter()
    answers = await gather_inline(
        *(
            answer_call(req, call, over, tools, tool_slots, multi_turn,
                        trace=None if trace is None else trace.lane(k))  # fmt: skip
            for k, (call, over) in enumerate(zip(calls, over_limit, strict=True))
        )
    )
    req.metrics.tool_s += time.perf_counter() - started
    messages = []
    ok = 0
    for call, (text, reward) in zip(calls, answers, strict=True):
        if reward:
            req.step_rewards.append((position, reward))
            per_tool = req.reward_scores.setdefault(STEP_REWARDS_KEY, {})
            per_tool.setdefault(call.name or "", []).append(float(reward))
        limited = truncate_text(
            text, multi_turn.max_tool_response_length, multi_turn.tool_response_truncate_side
        )
        req.metrics.tool_responses_truncated += limited != text
        message: dict[str, Any] = {"role": "tool", "name": call.name or "", "content": limited}
        if call.error is None:  # the call is in the assistant message's tool_calls
            message["tool_call_id"] = call_id(turn, ok)
            ok += 1
        messages.append(message)
    return messages


async def answer_call(
    req: AsyncRolloutRequest,
    call: ParsedCall,
    over_limit: bool,
    tools: Mapping[str, BaseTool],
    tool_slots: Mapping[str, asyncio.Semaphore],
    multi_turn: Any,
    trace: Track | None = None,
) -> tuple[str, float]:
    """`(response text, step reward)` of one call; never raises (except cancellation)."""
    if call.error is not None:
        req.metrics.parse_errors += 1
        return (
            f"Error: could not parse the tool call: {call.error}. Write each call as "
            '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>.'
        ), 0.0
    if call.name not in req.tool_instances:
        req.metrics.tool_errors["unknown_tool"] += 1
        available = ", ".join(req.tool_instances) or "none"
        return f"Error: unknown tool '{call.name}'. Available tools: {available}.", 0.0
    if over_limit:
        req.metrics.tool_errors["too_many_calls"] += 1
        return (
            f"Error: at most {multi_turn.max_parallel_calls} tool call(s) per turn are "
            f"executed; this call to '{call.name}' was not."
        ), 0.0
    tool = tools[call.name]
    execute_kwargs = req.tools_kwargs.get(call.name, {}).get("execute_kwargs", {})
    started = time.perf_counter()
    async with tool_slots[call.name]:
        response, reward, metrics = await execute_tool_call(
            tool,
            req.tool_instances[call.name],
            call.arguments,
            timeout=multi_turn.tool_timeout,
            **execute_kwargs,
        )
    req.metrics.tool_calls[call.name] += 1
    if "tool_error" in metrics:
        req.metrics.tool_errors[str(metrics["tool_error"])] += 1
    if metrics.get(INFRA_ERROR_KEY):
        req.note_infra_error(call.name, str(metrics[INFRA_ERROR_KEY]))
    req.metrics.tool_metrics.append(
        {"tool": call.name, "latency_s": time.perf_counter() - started, **metrics}
    )
    if trace is not None:  # the call's span, from the same start as its latency_s
        ended = time.perf_counter()
        trace.complete("tool", started, ended, {
            "tool": call.name, "latency_s": ended - started, "reward": reward,
            "outcome": str(metrics.get("tool_error", "ok"))})  # fmt: skip
    return response.text or "", reward


async def start_plugins(
    req: AsyncRolloutRequest,
    tools: Mapping[str, BaseTool],
    interactions: Mapping[str, BaseInteraction],
    interaction: str | None,
    timeout: float,
) -> bool:
    """Create an instance of every tool shown to the sample (concurrently) and start its
    interaction; False (and the request FAILED) when one of them raised."""

    async def create(name: str) -> None:
        kwargs = req.tools_kwargs.get(name, {}).get("create_kwargs", {})
        instance_id, _ = await within(tools[name].create(req.request_id, **kwargs), timeout)
        req.tool_instances[name] = instance_id

    names = req.callable_tools
    results = await gather_inline(*(create(n) for n in names), return_exceptions=True)
    for name, result in zip(names, results, strict=True):
        if isinstance(result, BaseException):
            req.metrics.tool_errors["create"] += 1
            error = f"tool {name!r}: create raised {type(result).__name__}: {result}"
            if is_infra_error(result):
                req.note_infra_error(name, error)
            req.fail(error)
    if req.error is not None or interaction is None:
        return req.error is None
    try:
        await within(
            interactions[interaction].start_interaction(req.request_id, **req.interaction_kwargs),
            timeout,
        )
    except Exception as err:
        req.metrics.interaction_errors += 1
        error = f"interaction {interaction!r}: start_interaction raised {type(err).__name__}: {err}"
        if is_infra_error(err):
            req.note_infra_error("interaction", error)
        req.fail(error)
        return False
    req.interaction = interaction
    return True


async def end_plugins(
    req: AsyncRolloutRequest,
    tools: Mapping[str, BaseTool],
    interactions: Mapping[str, BaseInteraction],
    timeout: float,
) -> None:
    """calc_reward then release for every tool instance, then finalize_interaction."""

    async def end_tool(name: str, instance_id: str) -> None:
        kwargs = req.tools_kwargs.get(name, {})
        try:
            reward = await within(
                tools[name].calc_reward(instance_id, **kwargs.get("calc_reward_kwargs", {})),
                timeout,
            )
            req.reward_scores[name] = float(reward)
        except Exception as err:
            req.metrics.tool_errors["calc_reward"] += 1
            logger.warning(
                "tool %r: calc_reward(%s) raised %s: %s", name, instance_id, type(err).__name__, err
            )
            if is_infra_error(err):  # the trajectory's reward is missing, not earned 0
                req.note_infra_error(name, f"calc_reward raised {type(err).__name__}: {err}")
        try:
            await within(
                tools[name].release(instance_id, **kwargs.get("release_kwargs", {})), timeout
            )
        except Exception as err:
            req.metrics.tool_errors["release"] += 1
            logger.warning(
                "tool %r: release(%s) raised %s: %s", name, instance_id, type(err).__name__, err
            )

    await gather_inline(*(end_tool(n, i) for n, i in req.tool_instances.items()))
    if req.interaction is not None:
        try:
            await within(
                interactions[req.interaction].finalize_interaction(req.request_id), timeout
            )
        except Exception as err:
            req.metrics.interaction_errors += 1
            logger.warning(
                "interaction %r: finalize_interaction(%s) raised %s: %s",
                req.interaction,
                req.request_id,
                type(err).__name__,
                err,
            )
            if is_infra_error(err):  # e.g. the environment's final reward was not had
                req.note_infra_error(
                    "interaction", f"finalize_interaction raised {type(err).__name__}: {err}")
