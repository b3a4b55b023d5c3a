"""Tests for agentrl/tools/record_replay.py: record a run's tool answers, replay them offline."""

import asyncio
import json

import numpy as np
import pytest

from agentrl.tools import (
    BaseTool,
    OpenAIFunctionToolSchema,
    RecordReplayTool,
    ToolResponse,
    execute_tool_call,
    wrap_tools,
)
from agentrl.tools.testing import check_tool_contract

SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string"}},
                "required": ["key"],
            },
        },
    }
)


class LookupTool(BaseTool):
    """A stand-in for a remote service: answers from create kwargs, counts its calls."""

    def __init__(self, config, tool_schema, online=True):
        super().__init__(config, tool_schema)
        self.online = online
        self.calls = 0

    async def create(self, instance_id=None, **kwargs):
        instance_id, _ = await super().create(instance_id, **kwargs)
        return instance_id, ToolResponse(text=f"table of {len(kwargs['table'])}")

    async def execute(self, instance_id, parameters, **kwargs):
        if not self.online:
            raise ConnectionError("service down")
        self.calls += 1
        table = self._instance_dict[instance_id]["table"]
        value = table.get(parameters["key"], "missing")
        return ToolResponse(text=str(value)), 0.5, {"hit": value != "missing"}

    async def calc_reward(self, instance_id, **kwargs):
        return float(kwargs.get("scale", 1)) * self.calls


async def trajectory(tool, keys, table):
    instance_id, created = await tool.create(table=table)
    outs = [await execute_tool_call(tool, instance_id, {"key": k}, timeout=5) for k in keys]
    reward = await tool.calc_reward(instance_id, scale=2)
    await tool.release(instance_id)
    return created.text, [(r.text, s, m) for r, s, m in outs], reward


def test_record_then_replay_without_the_service(tmp_path):
    path = tmp_path / "rec" / "tools.jsonl"
    table = {"a": 1, "b": 2}
    live = LookupTool({}, SCHEMA)
    recorded = asyncio.run(
        trajectory(wrap_tools({"lookup": live}, "record", path)["lookup"], ["a", "b"], table)
    )
    assert recorded == ("table of 2", [("1", 0.5, {"hit": True}), ("2", 0.5, {"hit": True})], 4.0)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["create", "execute", "execute", "calc_reward"]
    assert lines[1] == {
        "kind": "execute",
        "tool": "lookup",
        "create_kwargs": {"table": table},
        "arguments": {"key": "a"},
        "response": "1",
        "reward": 0.5,
        "metrics": {"hit": True},
    }

    offline = LookupTool({}, SCHEMA, online=False)
    replay_tool = wrap_tools({"lookup": offline}, "replay", path)["lookup"]
    assert isinstance(replay_tool, RecordReplayTool)
    assert asyncio.run(trajectory(replay_tool, ["a", "b"], table)) == recorded
    assert offline.calls == 0
    assert replay_tool._instance_dict == {}


def test_replay_miss_names_tool_and_arguments(tmp_path):
    path = tmp_path / "tools.jsonl"
    asyncio.run(
        trajectory(
            wrap_tools({"lookup": LookupTool({}, SCHEMA)}, "record", path)["lookup"],
            ["a"],
            {"a": 1},
        )
    )
    tool = wrap_tools({"lookup": LookupTool({}, SCHEMA)}, "replay", path)["lookup"]
    created, outs, reward = asyncio.run(trajectory(tool, ["zzz"], {"a": 1}))
    assert created == "table of 1"
    assert outs == [
        (
            'Error: no recorded response of tool \'lookup\' for arguments {"key":"zzz"}',
            0.0,
            {"tool_error": "replay_miss"},
        )
    ]
    assert reward == 0.0  # no recorded calc_reward for this call sequence
    # other create kwargs are another key: a miss too
    _, outs, _ = asyncio.run(trajectory(tool, ["a"], {"a": 2}))
    assert outs[0][2] == {"tool_error": "replay_miss"}


def test_numpy_create_kwargs_match_their_plain_recording(tmp_path):
    path = tmp_path / "tools.jsonl"
    record = wrap_tools({"lookup": LookupTool({}, SCHEMA)}, "record", path)["lookup"]
    table = {"a": np.int64(3), "ids": np.array([1, 2])}
    recorded = asyncio.run(trajectory(record, ["a"], table))
    replay = wrap_tools({"lookup": LookupTool({}, SCHEMA)}, "replay", path)["lookup"]
    assert asyncio.run(trajectory(replay, ["a"], {"a": 3, "ids": [1, 2]})) == recorded


def test_failed_calls_are_not_recorded(tmp_path):
    path = tmp_path / "tools.jsonl"
    tool = wrap_tools({"lookup": LookupTool({}, SCHEMA, online=False)}, "record", path)["lookup"]
    _, outs, _ = asyncio.run(trajectory(tool, ["a"], {"a": 1}))
    assert outs[0][0] == "Error: tool 'lookup' failed: ConnectionError: service down"
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert kinds == ["create", "calc_reward"]


def test_wrap_tools_modes_and_errors(tmp_path):
    tools = {"lookup": LookupTool({}, SCHEMA)}
    assert wrap_tools(tools, None, None) is tools
    with pytest.raises(ValueError, match="tool_record_mode must be one of"):
        wrap_tools(tools, "replya", tmp_path / "x")
    with pytest.raises(ValueError, match="needs tool_record_path"):
        wrap_tools(tools, "record", None)
    with pytest.raises(FileNotFoundError, match="tool replay file not found"):
        wrap_tools(tools, "replay", tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"kind": "create", "tool": "x", "create_kwargs": {}, "response": null}\n{oops\n'
    )
    with pytest.raises(ValueError, match="bad.jsonl:2: not a tool recording line"):
        wrap_tools(tools, "replay", bad)


def test_wrapper_keeps_the_contract_in_both_modes(tmp_path):
    path = tmp_path / "tools.jsonl"
    for mode in ("record", "replay"):
        tool = wrap_tools({"lookup": LookupTool({}, SCHEMA)}, mode, path)["lookup"]
        report = asyncio.run(check_tool_contract(tool, {"key": "a"}, {"table": {"a": 9}}))
        assert (report.create_response.text, report.response.text) == ("table of 1", "9")
