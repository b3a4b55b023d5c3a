"""Tests for agentrl/tools/testing.py: check_tool_contract catches each broken rule."""

import asyncio

import pytest

from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse
from agentrl.tools.testing import check_tool_contract

SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "t",
            "parameters": {
                "type": "object",
                "properties": {"x": {"type": "integer"}},
                "required": ["x"],
            },
        },
    }
)


class GoodTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text=str(parameters["x"] * 2)), 0.5, {"calls": 1}

    async def calc_reward(self, instance_id, **kwargs):
        return 1.0


class LeakyTool(GoodTool):
    async def release(self, instance_id, **kwargs):
        pass


class StringReturnTool(GoodTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return "4", 0.0, {}


class IntRewardTool(GoodTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text="4"), 1, {}


class IntCalcRewardTool(GoodTool):
    async def calc_reward(self, instance_id, **kwargs):
        return 1


class NoStateTool(GoodTool):
    async def create(self, instance_id=None, **kwargs):
        return instance_id or "fixed", ToolResponse()


def run(tool, parameters=None):
    return asyncio.run(check_tool_contract(tool, parameters or {"x": 2}))


def test_good_tool_passes_and_reports_values():
    report = run(GoodTool({}, SCHEMA))
    assert report.response.text == "4"
    assert (report.step_reward, report.metrics, report.reward) == (0.5, {"calls": 1}, 1.0)


@pytest.mark.parametrize(
    ("tool_cls", "message"),
    [
        (LeakyTool, "release\\(\\) did not free"),
        (StringReturnTool, "returned a str response"),
        (IntRewardTool, "step reward is a int"),
        (IntCalcRewardTool, "calc_reward\\(\\) returned a int"),
        (NoStateTool, "did not record instance"),
    ],
)
def test_broken_rules_are_named(tool_cls, message):
    with pytest.raises(AssertionError, match=message):
        run(tool_cls({}, SCHEMA))


def test_parameters_that_fail_the_schema_are_reported():
    with pytest.raises(AssertionError, match="fail the tool's own schema"):
        run(GoodTool({}, SCHEMA), {"x": "two"})
