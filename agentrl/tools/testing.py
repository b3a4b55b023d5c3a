"""A contract check any ``BaseTool`` subclass can run in its own tests.

    import asyncio
    from agentrl.tools.testing import check_tool_contract

    def test_my_tool():
        report = asyncio.run(check_tool_contract(MyTool(config, schema), {"x": 1}))
        assert report.response.text == "..."

It runs create -> execute -> calc_reward -> release the way the rollout engine does and
raises ``AssertionError`` naming the broken rule: wrong return types, arguments the tool's
own schema rejects, an instance that ``release`` does not free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema

from agentrl.tools.base import BaseTool
from agentrl.tools.execution import parameters_json_schema, validate_arguments
from agentrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from agentrl.utils.contract import require


@dataclass
class ContractReport:
    """What the tool returned during the check, for further assertions."""

    instance_id: str
    create_response: ToolResponse
    response: ToolResponse
    step_reward: float
    metrics: dict
    reward: float


def _check_schema(tool: BaseTool) -> None:
    schema = tool.get_openai_tool_schema()
    require(
        isinstance(schema, OpenAIFunctionToolSchema),
        f"get_openai_tool_schema() returned {type(schema).__name__}, "
        "expected OpenAIFunctionToolSchema",
    )
    require(
        tool.name == schema.function.name,
        f"tool.name {tool.name!r} differs from the schema's function name {schema.function.name!r}",
    )
    try:
        jsonschema.Draft202012Validator.check_schema(parameters_json_schema(tool))
    except jsonschema.SchemaError as err:
        raise AssertionError(
            f"tool {tool.name!r}: parameters are not a JSON schema: {err}"
        ) from err


async def _check_create(tool: BaseTool, create_kwargs: dict[str, Any]) -> tuple[str, ToolResponse]:
    result = await tool.create(**create_kwargs)
    require(
        isinstance(result, tuple) and len(result) == 2,
        f"create() must return (instance_id, ToolResponse), got {result!r}",
    )
    instance_id, response = result
    require(isinstance(instance_id, str) and instance_id != "", "create() gave no instance id")
    require(
        isinstance(response, ToolResponse),
        f"create() returned a {type(response).__name__}, expected ToolResponse",
    )
    return instance_id, response


async def _check_execute(
    tool: BaseTool, instance_id: str, parameters: dict[str, Any], execute_kwargs: dict[str, Any]
) -> tuple[ToolResponse, float, dict]:
    error = validate_arguments(tool, parameters)
    require(error is None, f"the test's parameters fail the tool's own schema: {error}")
    result = await tool.execute(instance_id, parameters, **execute_kwargs)
    require(
        isinstance(result, tuple) and len(result) == 3,
        f"execute() must return (ToolResponse, float, dict), got {result!r}",
    )
    response, step_reward, metrics = result
    require(
        isinstance(response, ToolResponse),
        f"execute() returned a {type(response).__name__} response, expected ToolResponse",
    )
    require(
        isinstance(step_reward, float),
        f"execute() step reward is a {type(step_reward).__name__}, expected float",
    )
    require(isinstance(metrics, dict), f"execute() metrics is a {type(metrics).__name__}")
    return response, step_reward, metrics


async def check_tool_contract(
    tool: BaseTool,
    parameters: dict[str, Any],
    create_kwargs: dict[str, Any] | None = None,
    *,
    execute_kwargs: dict[str, Any] | None = None,
    calc_reward_kwargs: dict[str, Any] | None = None,
) -> ContractReport:
    """Run one instance's whole lifecycle and check every rule of the ``BaseTool`` contract."""
    require(isinstance(tool, BaseTool), f"{type(tool).__name__} is not a BaseTool")
    _check_schema(tool)
    instance_id, create_response = await _check_create(tool, create_kwargs or {})
    instances = getattr(tool, "_instance_dict", None)
    require(
        isinstance(instances, dict) and instance_id in instances,
        f"create() did not record instance {instance_id!r} in tool._instance_dict",
    )
    response, step_reward, metrics = await _check_execute(
        tool, instance_id, parameters, execute_kwargs or {}
    )
    reward = await tool.calc_reward(instance_id, **(calc_reward_kwargs or {}))
    require(isinstance(reward, float), f"calc_reward() returned a {type(reward).__name__}")
    released = await tool.release(instance_id)
    require(released is None, f"release() returned {released!r}, expected None")
    require(
        instance_id not in tool._instance_dict,
        f"release() did not free instance {instance_id!r}",
    )
    explicit_id, _ = await tool.create("contract-explicit-id", **(create_kwargs or {}))
    require(
        explicit_id == "contract-explicit-id",
        f"create('contract-explicit-id') returned id {explicit_id!r}",
    )
    await tool.release(explicit_id)
    require(explicit_id not in tool._instance_dict, "release() did not free the explicit id")
    return ContractReport(instance_id, create_response, response, step_reward, metrics, reward)
