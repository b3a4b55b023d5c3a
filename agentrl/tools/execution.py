"""``execute_tool_call``: run one tool call so that nothing a tool does can break a rollout.

The rollout engine calls this for every tool call the model makes. It

1. validates the arguments against the tool's JSON schema (jsonschema, draft 2020-12);
2. runs ``tool.execute`` under a timeout (``agentrl.utils.aio.within``);
3. turns an exception, a timeout or a return value of the wrong shape into a short error
   text for the model plus ``metrics["tool_error"]`` naming the kind of failure
   (``invalid_arguments``, ``timeout``, ``exception``, ``bad_return``);
4. marks an infrastructure failure with ``metrics["infra_error"]`` (the reason): a timeout,
   an ``InfraError``, a connection error (``agentrl.utils.infra.is_infra_error``), or a tool
   that returned ``infra_error`` in its own metrics. Arguments failing the schema, other
   exceptions and bad return values are not: they are the model's or the tool's.

It never raises, except ``asyncio.CancelledError`` (the caller cancelled the rollout) and
``BaseException``s that are not errors (``KeyboardInterrupt``, ``SystemExit``).

For tools written against older verl, ``execute`` may return a plain string as the response;
it is wrapped in a ``ToolResponse``. An ``int`` reward is accepted as a float.
"""

from __future__ import annotations

import asyncio
import logging
import numbers
import time
import weakref
from collections.abc import Callable
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from agentrl.protocol import INFRA_ERROR_KEY
from agentrl.tools.base import BaseTool
from agentrl.tools.flat_schema import flat_check
from agentrl.tools.schemas import ToolResponse
from agentrl.utils.aio import within
from agentrl.utils.infra import is_infra_error

logger = logging.getLogger(__name__)

MAX_ERROR_CHARS = 500

FlatCheck = Callable[[dict], bool]
_validators: weakref.WeakKeyDictionary[
    BaseTool, tuple[int, jsonschema.Draft202012Validator, FlatCheck | None]
] = weakref.WeakKeyDictionary()


def parameters_json_schema(tool: BaseTool) -> dict[str, Any]:
    """The JSON schema of the tool's arguments, as shown to the model."""
    return tool.get_openai_tool_schema().function.parameters.model_dump(exclude_none=True)


def _validator(tool: BaseTool) -> tuple[jsonschema.Draft202012Validator, FlatCheck | None]:
    """The tool's schema validator and, for a flat object schema, its fast check."""
    schema_obj = tool.get_openai_tool_schema()
    try:
        cached = _validators.get(tool)
    except TypeError:  # a tool class that made itself unhashable: no caching
        return _build(parameters_json_schema(tool))
    if cached is not None and cached[0] == id(schema_obj):
        return cached[1], cached[2]
    validator, flat = _build(parameters_json_schema(tool))
    _validators[tool] = (id(schema_obj), validator, flat)
    return validator, flat


def _build(schema: dict[str, Any]) -> tuple[jsonschema.Draft202012Validator, FlatCheck | None]:
    return jsonschema.Draft202012Validator(schema), flat_check(schema)


def validate_arguments(tool: BaseTool, parameters: Any) -> str | None:
    """Check a call's arguments against the tool's schema; returns an error text or None."""
    if not isinstance(parameters, dict):
        return (
            f"Error: the arguments of tool '{tool.name}' must be a JSON object, "
            f"got {type(parameters).__name__}."
        )
    validator, flat = _validator(tool)
    if flat is not None and flat(parameters):
        return None  # valid: jsonschema would find no error (it words the errors)
    error = best_match(validator.iter_errors(parameters))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    location = f" at '{where}'" if where else ""
    return _clip(f"Error: invalid arguments for tool '{tool.name}'{location}: {error.message}")


def _clip(text: str) -> str:
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return text[: MAX_ERROR_CHARS - 3] + "..."


def _failure(text: str, kind: str, infra: bool = False) -> tuple[ToolResponse, float, dict]:
    metrics: dict[str, Any] = {"tool_error": kind}
    if infra:
        metrics[INFRA_ERROR_KEY] = _clip(text.removeprefix("Error: "))
    return ToolResponse(text=_clip(text)), 0.0, metrics


def conform_result(result: Any) -> tuple[ToolResponse, float, dict] | None:
    """The return value in canonical types, or None if it has the wrong shape."""
    if not isinstance(result, tuple) or len(result) != 3:
        return None
    response, reward, metrics = result
    if isinstance(response, str):
        response = ToolResponse(text=response)
    if not isinstance(response, ToolResponse):
        return None
    if isinstance(reward, bool) or not isinstance(reward, numbers.Real):
        return None
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, dict):
        return None
    return response, float(reward), metrics


async def execute_tool_call(
    tool: BaseTool,
    instance_id: str,
    parameters: Any,
    *,
    timeout: float | None,
    **execute_kwargs: Any,
) -> tuple[ToolResponse, float, dict]:
    """Validate and run one call; returns ``(response, step_reward, metrics)``, never raises.

    Args:
        tool: the tool the model called.
        instance_id: the trajectory's instance, from ``tool.create``.
        parameters: the decoded arguments of the call.
        timeout: seconds before the call is abandoned (None: no limit).
        execute_kwargs: the sample's ``tools_kwargs[name]["execute_kwargs"]``.
    """
    try:
        error = validate_arguments(tool, parameters)
    except Exception as err:  # e.g. a tool built by hand with a broken schema
        logger.warning("tool %r: cannot validate arguments: %s", tool.name, err)
        return _failure(f"Error: tool '{tool.name}' has an unusable schema: {err}", "exception")
    if error is not None:
        return _failure(error, "invalid_arguments")
    start = time.monotonic()
    try:
        result = await within(
            tool.execute(instance_id, parameters, **execute_kwargs), timeout
        )
    except (asyncio.TimeoutError, TimeoutError):  # distinct classes before Python 3.11
        elapsed = time.monotonic() - start
        logger.warning("tool %r timed out after %.3g s", tool.name, elapsed)
        limit = timeout if timeout is not None else elapsed
        return _failure(f"Error: tool '{tool.name}' timed out after {limit:.3g} s.", "timeout",
                        infra=True)
    except Exception as err:
        logger.warning("tool %r raised %s: %s", tool.name, type(err).__name__, err)
        return _failure(
            f"Error: tool '{tool.name}' failed: {type(err).__name__}: {err}", "exception",
            infra=is_infra_error(err),
        )
    conformed = conform_result(result)
    if conformed is None:
        logger.warning(
            "tool %r returned %r, expected (ToolResponse, float, dict)", tool.name, result
        )
        return _failure(
            f"Error: tool '{tool.name}' returned an invalid result "
            f"(a {type(result).__name__}, expected (ToolResponse, float, dict)).",
            "bad_return",
        )
    return conformed
