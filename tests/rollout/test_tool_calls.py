"""Tool turns and plugin start/end: truncation, the per-turn call limit, errors counted."""

from __future__ import annotations

import asyncio
import types

import pytest

from agentrl.interactions import BaseInteraction
from agentrl.rollout.parsers import ParsedCall
from agentrl.rollout.request import AsyncRolloutRequest, RequestState
from agentrl.rollout.tool_calls import end_plugins, run_tool_turn, start_plugins, truncate_text
from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse


def schema(name):
    return OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {"name": name, "parameters": {"type": "object", "properties": {}}},
        }
    )


class Tool(BaseTool):
    def __init__(self, name, fail_on=()):
        super().__init__({}, schema(name))
        self.fail_on, self.log = set(fail_on), []

    async def create(self, instance_id=None, **kwargs):
        self.log.append(("create", kwargs))
        if "create" in self.fail_on:
            raise RuntimeError("cannot create")
        return await super().create(instance_id, **kwargs)

    async def execute(self, instance_id, parameters, **kwargs):
        self.log.append(("execute", kwargs))
        return ToolResponse(text=f"{self.name}!"), 0.25, {"calls": 1}

    async def calc_reward(self, instance_id, **kwargs):
        self.log.append(("calc_reward", kwargs))
        if "calc_reward" in self.fail_on:
            raise ValueError("no reward")
        return 2.0

    async def release(self, instance_id, **kwargs):
        self.log.append(("release", kwargs))
        if "release" in self.fail_on:
            raise ValueError("no release")
        await super().release(instance_id, **kwargs)


class Ask(BaseInteraction):
    async def generate_response(self, instance_id, messages, **kwargs):
        return True, "", 0.0, {}


MULTI_TURN = types.SimpleNamespace(
    max_parallel_calls=2,
    max_tool_response_length=4,
    tool_response_truncate_side="right",
    tool_timeout=5.0,
)


def new_request(names, tools_kwargs=None) -> AsyncRolloutRequest:
    req = AsyncRolloutRequest(
        batch_data_id=0,
        rollout_offset=0,
        request_id="r0",
        messages=[],
        tool_schemas=[{"function": {"name": n}} for n in names],
        tools_kwargs=tools_kwargs or {},
        interaction_kwargs={"k": 1},
    )
    req.append([1, 2, 3], 0)
    req.prompt_length = 1
    return req


@pytest.mark.parametrize(
    "side, expected",
    [
        ("left", "abc...(truncated)"),
        ("right", "...(truncated)hij"),
        ("middle", "a...(truncated)ij"),
    ],
)
def test_truncate_text(side, expected):
    assert truncate_text("abcdefghij", 3, side) == expected
    assert truncate_text("abc", 3, side) == "abc"


def test_run_tool_turn_limits_runnable_calls_and_records_rewards():
    tools = {"a": Tool("a"), "b": Tool("b")}
    req = new_request(["a", "b"], {"a": {"execute_kwargs": {"mode": "fast"}}})
    req.tool_instances = {"a": "r0", "b": "r0"}
    req.metrics.assistant_turns = 2
    calls = [
        ParsedCall(None, None, "<tool_call>x</tool_call>", "bad JSON"),
        ParsedCall("a", {}, "raw"),
        ParsedCall("b", {}, "raw"),
        ParsedCall("a", {}, "raw"),
    ]
    slots = {"a": asyncio.Semaphore(1), "b": asyncio.Semaphore(1)}
    messages = asyncio.run(run_tool_turn(req, calls, tools, slots, MULTI_TURN))
    # errors are tool messages too, cut like any response (max 4 characters, right side)
    assert [m["content"] for m in messages] == [
        "...(truncated)ll>.",
        "a!",
        "b!",
        "...(truncated)not.",
    ]
    assert [m.get("tool_call_id") for m in messages] == [None, "call_2_0", "call_2_1", "call_2_2"]
    assert req.step_rewards == [(1, 0.25), (1, 0.25)]  # at the last token before the turn
    assert req.metrics.tool_errors == {"too_many_calls": 1}
    assert (req.metrics.parse_errors, req.metrics.tool_responses_truncated) == (1, 2)
    assert tools["a"].log == [("execute", {"mode": "fast"})]


def test_start_and_end_plugins_always_release():
    tools = {
        "a": Tool("a", fail_on={"calc_reward"}),
        "b": Tool("b", fail_on={"create"}),
        "c": Tool("c", fail_on={"release"}),
    }
    req = new_request(
        ["a", "b", "c"], {"a": {"create_kwargs": {"seed": 1}, "release_kwargs": {"why": "done"}}}
    )
    interactions = {"ask": Ask({})}
    assert not asyncio.run(start_plugins(req, tools, interactions, "ask", 5.0))
    assert req.state == RequestState.FAILED and "tool 'b': create raised RuntimeError" in req.error
    assert req.tool_instances == {"a": "r0", "c": "r0"} and req.interaction is None
    asyncio.run(end_plugins(req, tools, interactions, 5.0))
    assert tools["a"].log == [
        ("create", {"seed": 1}),
        ("calc_reward", {}),
        ("release", {"why": "done"}),
    ]
    assert [e for e, _ in tools["c"].log] == ["create", "calc_reward", "release"]
    assert [e for e, _ in tools["b"].log] == ["create"]
    assert req.reward_scores == {"c": 2.0}
    assert req.metrics.tool_errors == {"create": 1, "calc_reward": 1, "release": 1}


def test_start_plugins_starts_the_interaction():
    req = new_request([])
    interaction = Ask({})
    assert asyncio.run(start_plugins(req, {}, {"ask": interaction}, "ask", 5.0))
    assert req.interaction == "ask" and interaction._instance_dict == {"r0": {"k": 1}}
    asyncio.run(end_plugins(req, {}, {"ask": interaction}, 5.0))
    assert interaction._instance_dict == {}
