"""A verifiers environment's tools as BaseTools, and the one loader of verifiers environments.

Tool YAML (``multi_turn.tool_config_path``; ``agentrl env prepare verifiers:ENV`` writes one
entry per tool of a ``vf.ToolEnv``, the schema its own ``oai_tools`` entry)::

    tools:
      - class_name: agentrl.tools.verifiers.VerifiersTool
        config: {env: my-env}
        tool_schema: {type: function, function: {name: add, parameters: {...}}}

Each call runs the environment's own ``call_tool(name, arguments, id)``; what it returns
(its tool message's content) is the response, and an exception becomes the error text the
engine writes for every tool (``agentrl.tools.execution``). ``load_environment`` is shared by
the tools, the verifiers interaction and ``prepare``: each process loads an environment once
(``verifiers.load_environment``, the module ``ENV`` with ``-`` as ``_``) and keeps it. A
verifiers environment installs SIGINT and SIGTERM handlers that run its teardown and exit
when it is built; the process's own handlers are put back, so it loads only on the main
thread.
"""

from __future__ import annotations

import signal
import threading
from functools import cache
from typing import Any

from agentrl.tools.base import BaseTool
from agentrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from agentrl.utils.extras import missing_package

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def require_verifiers(what: str) -> Any:
    """The ``verifiers`` module (ImportError naming the extra when it is not installed)."""
    try:
        import verifiers
    except ImportError as err:
        raise missing_package("verifiers", "envs", what) from err
    return verifiers


@cache  # one environment per id and process: its dataset is built once
def load_environment(env_id: str) -> Any:
    """``verifiers.load_environment(env_id)`` (ValueError naming the env when it fails)."""
    vf = require_verifiers(f"verifiers:{env_id}")
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(f"verifiers:{env_id}: a verifiers environment installs signal "
                           "handlers, so it is loaded on the main thread only")
    handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    try:
        return vf.load_environment(env_id)
    except (ValueError, RuntimeError) as err:  # verifiers' own: not installed, or it raised
        raise ValueError(f"verifiers:{env_id}: {err}") from err
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def message_text(content: Any, what: str) -> str:
    """A message's content as text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):  # fmt: skip
        return "".join(p["text"] for p in content)
    raise ValueError(f"{what} is {type(content).__name__}, not text: {str(content)[:200]!r}")


class VerifiersTool(BaseTool):
    """Config: ``env`` (the verifiers environment's id, required); the tool is the
    environment's tool named by the schema."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)
        env_id = self.config.get("env")
        if not isinstance(env_id, str) or not env_id:
            raise ValueError(f"tool {self.name!r}: config.env must name the verifiers "
                             "environment")
        self.env = load_environment(env_id)
        if self.name not in (getattr(self.env, "tool_map", None) or {}):
            raise ValueError(f"verifiers:{env_id} has no tool {self.name!r} (its tools: "
                             f"{', '.join(getattr(self.env, 'tool_map', None) or {}) or 'none'})")

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        message = await self.env.call_tool(self.name, dict(parameters), instance_id)
        text = message_text(message.get("content"), f"tool {self.name!r}'s result")
        return ToolResponse(text=text), 0.0, {}


__all__ = ["VerifiersTool", "load_environment", "message_text", "require_verifiers"]
