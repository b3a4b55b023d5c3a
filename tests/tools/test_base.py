"""Tests for agentrl/tools/base.py: the BaseTool defaults and its contract."""

import asyncio
import uuid

import pytest

from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse
from agentrl.tools.testing import check_tool_contract

SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo the text.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    }
)


class EchoTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        prefix = self._instance_dict[instance_id].get("prefix", "")
        return ToolResponse(text=prefix + parameters["text"]), 0.0, {}


def test_base_tool_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        BaseTool({}, SCHEMA)


def test_name_schema_and_config():
    tool = EchoTool({"a": 1}, SCHEMA)
    assert tool.name == "echo"
    assert tool.get_openai_tool_schema() is SCHEMA
    assert tool.config == {"a": 1}


def test_missing_schema_is_an_error():
    with pytest.raises(ValueError, match="tool_schema is required"):
        EchoTool({}, None)


def test_default_create_makes_uuid4_and_stores_kwargs():
    async def go():
        tool = EchoTool({}, SCHEMA)
        instance_id, response = await tool.create(prefix="> ")
        assert uuid.UUID(instance_id).version == 4
        assert response == ToolResponse()
        assert tool._instance_dict[instance_id] == {"prefix": "> "}
        out = await tool.execute(instance_id, {"text": "hi"})
        assert out == (ToolResponse(text="> hi"), 0.0, {})
        assert await tool.calc_reward(instance_id) == 0.0
        await tool.release(instance_id)
        assert tool._instance_dict == {}
        await tool.release(instance_id)  # releasing twice is a no-op

    asyncio.run(go())


def test_create_with_given_id_and_duplicate_is_error():
    async def go():
        tool = EchoTool({}, SCHEMA)
        assert (await tool.create("abc"))[0] == "abc"
        with pytest.raises(ValueError, match="already exists"):
            await tool.create("abc")

    asyncio.run(go())


def test_contract_holds_for_a_minimal_subclass():
    report = asyncio.run(check_tool_contract(EchoTool({}, SCHEMA), {"text": "x"}, {"prefix": "1"}))
    assert report.response.text == "1x"
    assert (report.step_reward, report.metrics, report.reward) == (0.0, {}, 0.0)
