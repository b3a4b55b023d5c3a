"""tools/gsm8k.py: verl's GSM8K answer tool, the same rewards and texts."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.tools.loader import load_tools
from tools.gsm8k import Gsm8kTool


def _run(coro):
    return asyncio.run(coro)


def test_answers_are_scored_and_resubmitting_is_penalised():
    tool = Gsm8kTool({"type": "native"})
    assert tool.name == "calc_gsm8k_reward"

    async def episode():
        iid, _ = await tool.create("r1", ground_truth="72")
        wrong = await tool.execute(iid, {"answer": "70"})
        right = await tool.execute(iid, {"answer": "#### 72"})
        again = await tool.execute(iid, {"answer": 72})  # not a string: str()
        final = await tool.calc_reward(iid)
        await tool.release(iid)
        return wrong, right, again, final

    wrong, right, again, final = _run(episode())
    assert wrong[0].text == "Current parsed answer='70' reward=0.0" and wrong[1] == -0.05
    assert right[0].text == "Current parsed answer='#### 72' reward=1.0" and right[1] == 0.0
    assert again[1] == -0.05  # no improvement
    assert final == 1.0
    assert tool._instance_dict == {}


def test_ground_truth_from_create_kwargs_and_errors():
    tool = Gsm8kTool({})

    async def go():
        iid, _ = await tool.create(create_kwargs={"ground_truth": "5"})
        return await tool.execute(iid, {"answer": "5"})

    assert _run(go())[0].text.endswith("reward=1.0")
    with pytest.raises(ValueError, match="needs ground_truth"):
        _run(tool.create("x"))
    with pytest.raises(ValueError, match="unknown config keys"):
        Gsm8kTool({"rate": 1})


def test_verl_tool_yaml_loads_the_tool(tmp_path):
    config = tmp_path / "gsm8k_tool_config.yaml"
    config.write_text(
        "tools:\n"
        "  - class_name: \"verl.tools.gsm8k_tool.Gsm8kTool\"\n"
        "    config:\n      type: native\n"
        "    tool_schema:\n      type: function\n      function:\n"
        "        name: calc_gsm8k_reward\n        description: d\n"
        "        parameters:\n          type: object\n"
        "          properties:\n            answer: {type: string, description: a}\n"
        "          required: [answer]\n"
    )
    (tool,) = load_tools(config).values()
    assert isinstance(tool, Gsm8kTool)
