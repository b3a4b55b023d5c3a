"""The rollout's tools for agents behind the gateway: list them, call them per session.

    GET  /sessions/{id}/v1/tools           {"object": "list", "data": [OpenAI tool schemas]}
    POST /sessions/{id}/v1/tools/{name}    {"arguments": {...} | "<JSON>"}
         -> {"content": "...", "reward": R, "error": null | "timeout" | "exception" | ...}

The tools are those of ``multi_turn.tool_config_path`` (``type: mcp`` entries included, so an
MCP server's tools reach any agent), run under the rollout engine's policy: one instance
per tool and session, created at the session's first call with the row's ``create_kwargs``
(agent mode), each call through ``execute_tool_call`` (schema check, ``tool_timeout``, a
raise or a timeout answered as an error text the agent can show its model), responses cut
to ``max_tool_response_length``, at most ``max_concurrent_tool_calls`` calls of a tool at
once, and ``calc_reward`` then ``release`` when the session closes. The engine's own
functions do each step (agentrl/rollout/tool_calls.py); this module only keeps the per
session state.

From an agent, with the OpenAI client it was given (its base URL names the session)::

    tools = await client.get("/tools", cast_to=object)
    answer = await client.post("/tools/calculator", body={"arguments": {"expression": "2+2"}},
                               cast_to=object)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from agentrl.rollout.engine_config import MultiTurnConfig
from agentrl.rollout.parsers import ParsedCall
from agentrl.rollout.request import AsyncRolloutRequest
from agentrl.rollout.tool_calls import answer_call, end_plugins, start_plugins, truncate_text
from agentrl.tools import BaseTool


class UnknownTool(KeyError):
    """A call names a tool the gateway does not serve."""


class SessionTools:
    """Per-session instances of the configured tools (see the module docstring)."""

    def __init__(self, tools: Mapping[str, BaseTool], multi_turn: MultiTurnConfig) -> None:
        self.tools = dict(tools)
        self.multi_turn = multi_turn
        self.slots = {name: asyncio.Semaphore(multi_turn.max_concurrent_tool_calls)
                      for name in self.tools}
        self._kwargs: dict[str, dict] = {}
        self._started: dict[str, asyncio.Task] = {}
        self._states: dict[str, AsyncRolloutRequest] = {}

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.get_openai_tool_schema().model_dump(exclude_none=True)
                for tool in self.tools.values()]

    def register(self, session_id: str, tools_kwargs: Mapping[str, Any] | None) -> None:
        """The row's ``tools_kwargs`` for the session's instances (before its first call)."""
        self._kwargs[session_id] = dict(tools_kwargs or {})

    async def call(self, session_id: str, name: str, arguments: Any) -> dict[str, Any]:
        """Run one call in the session; errors are answers, as for the model in the engine."""
        if name not in self.tools:
            raise UnknownTool(name)
        state = await self._state(session_id)
        if state.error is not None:  # a create raised: every call says so
            return {"content": f"Error: {state.error}", "reward": 0.0, "error": "create"}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as err:
                state.metrics.tool_errors["invalid_arguments"] += 1
                return {"content": f"Error: arguments are not JSON: {err}", "reward": 0.0,
                        "error": "invalid_arguments"}
        text, reward = await answer_call(state, ParsedCall(name, arguments, ""), False,
                                         self.tools, self.slots, self.multi_turn)
        error = state.metrics.tool_metrics[-1].get("tool_error")  # this call's, it ran
        text = truncate_text(text, self.multi_turn.max_tool_response_length,
                             self.multi_turn.tool_response_truncate_side)
        return {"content": text, "reward": float(reward), "error": error}

    async def close(self, session_id: str) -> AsyncRolloutRequest | None:
        """``calc_reward`` then ``release`` for the session's instances; the state (its tool
        metrics and ``reward_scores``), or None when the session called no tool."""
        self._kwargs.pop(session_id, None)
        task = self._started.pop(session_id, None)
        if task is None:
            return None
        await asyncio.shield(task)
        state = self._states.pop(session_id)
        await end_plugins(state, self.tools, {}, self.multi_turn.tool_timeout)
        return state

    async def _state(self, session_id: str) -> AsyncRolloutRequest:
        if session_id not in self._started:  # one create per session, however many callers
            self._started[session_id] = asyncio.ensure_future(self._start(session_id))
        await asyncio.shield(self._started[session_id])
        return self._states[session_id]

    async def _start(self, session_id: str) -> None:
        state = AsyncRolloutRequest(
            batch_data_id=0, rollout_offset=0, request_id=session_id, messages=[],
            tool_schemas=self.schemas(), tools_kwargs=self._kwargs.get(session_id, {}),
            interaction_kwargs={},
        )  # fmt: skip
        self._states[session_id] = state
        await start_plugins(state, self.tools, {}, None, self.multi_turn.tool_timeout)


__all__ = ["SessionTools", "UnknownTool"]
