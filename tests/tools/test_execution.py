"""Tests for agentrl/tools/execution.py: execute_tool_call never lets a tool break a rollout."""

import asyncio
import time

import pytest

from agentrl.tools import (
    BaseTool,
    InfraError,
    OpenAIFunctionToolSchema,
    ToolResponse,
    execute_tool_call,
)

SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "probe",
            "parameters": {
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["ok", "raise", "hang", "garbage", "str"]},
                    "n": {"type": "integer", "minimum": 0},
                },
                "required": ["mode"],
                "additionalProperties": False,
            },
        },
    }
)


class ProbeTool(BaseTool):
    """Behaves as the call's ``mode`` says."""

    async def execute(self, instance_id, parameters, **kwargs):
        mode = parameters["mode"]
        if mode == "raise":
            raise RuntimeError("boom")
        if mode == "hang":
            await asyncio.sleep(60)
        if mode == "garbage":
            return {"text": "not a tuple"}
        if mode == "str":
            return "plain text", 1, None
        return ToolResponse(text=f"ok {kwargs.get('suffix', '')}"), 0.25, {"n": parameters.get("n")}


def call(parameters, timeout=1.0, **kwargs):
    return asyncio.run(
        execute_tool_call(ProbeTool({}, SCHEMA), "i", parameters, timeout=timeout, **kwargs)
    )


def test_success_passes_response_reward_metrics_and_execute_kwargs():
    response, reward, metrics = call({"mode": "ok", "n": 3}, suffix="!")
    assert (response.text, reward, metrics) == ("ok !", 0.25, {"n": 3})


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({}, "Error: invalid arguments for tool 'probe': 'mode' is a required property"),
        (
            {"mode": "fly"},
            "Error: invalid arguments for tool 'probe' at 'mode': 'fly' is not one of "
            "['ok', 'raise', 'hang', 'garbage', 'str']",
        ),
        (
            {"mode": "ok", "n": -1},
            "Error: invalid arguments for tool 'probe' at 'n': -1 is less than the minimum of 0",
        ),
        (
            {"mode": "ok", "extra": 1},
            "Error: invalid arguments for tool 'probe': Additional properties are not allowed "
            "('extra' was unexpected)",
        ),
        (["ok"], "Error: the arguments of tool 'probe' must be a JSON object, got list."),
    ],  # the model's errors: never infrastructure failures (the metrics are tool_error only)
)
def test_invalid_arguments_become_error_text(parameters, expected):
    response, reward, metrics = call(parameters)
    assert (response.text, reward, metrics) == (expected, 0.0, {"tool_error": "invalid_arguments"})


def test_exception_becomes_error_text():
    response, reward, metrics = call({"mode": "raise"})
    assert response.text == "Error: tool 'probe' failed: RuntimeError: boom"
    assert (reward, metrics) == (0.0, {"tool_error": "exception"})


def test_hang_times_out_within_bound():
    start = time.monotonic()
    response, reward, metrics = call({"mode": "hang"}, timeout=0.2)
    assert time.monotonic() - start < 2.0
    assert response.text == "Error: tool 'probe' timed out after 0.2 s."
    # a timeout is an infrastructure failure by default (agentrl/utils/infra.py)
    assert (reward, metrics) == (
        0.0, {"tool_error": "timeout", "infra_error": "tool 'probe' timed out after 0.2 s."})


class ServiceTool(BaseTool):
    """Fails as its service would: down, crashed (InfraError), or rejecting the input."""

    async def execute(self, instance_id, parameters, **kwargs):
        mode = parameters["mode"]
        if mode == "raise":
            raise ConnectionRefusedError(111, "Connection refused")
        if mode == "hang":
            raise InfraError("the sandbox crashed")
        if mode == "garbage":  # an error the model caused: not an infrastructure failure
            raise ValueError("no such file")
        return ToolResponse(text="Error: down"), 0.0, {"infra_error": "the index is down"}


@pytest.mark.parametrize(("mode", "infra"), [
    ("raise", "tool 'probe' failed: ConnectionRefusedError: [Errno 111] Connection refused"),
    ("hang", "tool 'probe' failed: InfraError: the sandbox crashed"),
    ("garbage", None),
    ("ok", "the index is down"),  # the tool's own result field passes through
])  # fmt: skip
def test_infrastructure_failures_are_marked_and_the_model_s_errors_are_not(mode, infra):
    response, _, metrics = asyncio.run(
        execute_tool_call(ServiceTool({}, SCHEMA), "i", {"mode": mode}, timeout=1.0))
    assert metrics.get("infra_error") == infra
    assert response.text.startswith("Error:")


def test_wrong_return_shape_becomes_error_text():
    response, reward, metrics = call({"mode": "garbage"})
    assert response.text == (
        "Error: tool 'probe' returned an invalid result (a dict, expected (ToolResponse, float, dict))."
    )
    assert (reward, metrics) == (0.0, {"tool_error": "bad_return"})


def test_verl_style_string_response_and_int_reward_are_accepted():
    response, reward, metrics = call({"mode": "str"})
    assert (response, reward, metrics) == (ToolResponse(text="plain text"), 1.0, {})
    assert isinstance(reward, float)


def test_cancellation_propagates():
    async def go():
        task = asyncio.create_task(
            execute_tool_call(ProbeTool({}, SCHEMA), "i", {"mode": "hang"}, timeout=30)
        )
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())


def test_long_error_text_is_clipped():
    class Loud(ProbeTool):
        async def execute(self, instance_id, parameters, **kwargs):
            raise ValueError("x" * 5000)

    response, _, _ = asyncio.run(
        execute_tool_call(Loud({}, SCHEMA), "i", {"mode": "ok"}, timeout=1)
    )
    assert len(response.text) == 500
    assert response.text.endswith("...")


def test_broken_schema_of_a_hand_built_tool_is_an_error_text():
    broken = OpenAIFunctionToolSchema.model_validate(
        {
            "function": {
                "name": "b",
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"type": "integer", "minimum": "zero"}},
                },
            }
        }
    )
    response, _, metrics = asyncio.run(
        execute_tool_call(ProbeTool({}, broken), "i", {"x": 1}, timeout=1)
    )
    assert response.text.startswith("Error: tool 'b' has an unusable schema: ")
    assert metrics == {"tool_error": "exception"}
