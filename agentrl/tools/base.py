"""``BaseTool``: the plugin interface every tool implements (verl-compatible).

Lifecycle of one trajectory (one rollout sample), all methods async:

    instance_id, first_response = await tool.create(instance_id, **create_kwargs)
    response, step_reward, metrics = await tool.execute(instance_id, parameters, **execute_kwargs)
    ...                                   # as many calls as the model makes
    reward = await tool.calc_reward(instance_id, **calc_reward_kwargs)
    await tool.release(instance_id, **release_kwargs)      # always, also after errors

One tool object serves every trajectory of a process concurrently, so per-trajectory state
lives in ``self._instance_dict`` keyed by instance id (verl's attribute name) and is freed by
``release``. The ``*_kwargs`` come from the dataset row's ``extra_info.tools_kwargs[name]``.

When the service behind the tool failed, not the model (a retriever that is down, a sandbox
that crashed), raise ``InfraError`` (``from agentrl.tools import InfraError``) or return
``metrics["infra_error"] = "<reason>"`` with the error text; timeouts and connection errors
count as such by themselves, arguments the tool rejects do not (agentrl/utils/infra.py).
Such a trajectory does not train as the model's failure (``rollout.on_infra_error``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any
from uuid import uuid4

from agentrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse


class BaseTool(ABC):
    """A tool the model can call. Subclasses implement ``execute``; the rest has defaults.

    Args:
        config: the tool's ``config`` mapping from the tool YAML.
        tool_schema: the OpenAI function schema shown to the model; ``name`` is its
            function name.
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema) -> None:
        self.config = dict(config or {})
        self.tool_schema = tool_schema
        if self.tool_schema is None:
            raise ValueError(f"{type(self).__name__}: tool_schema is required")
        self.name = self.tool_schema.function.name
        self._instance_dict: dict[str, Any] = {}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """The schema rendered into the prompt and used to validate call arguments."""
        return self.tool_schema

    async def create(
        self, instance_id: str | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        """Start a trajectory's instance; returns its id (a new uuid4 if none is given).

        The default stores the create kwargs as the instance's state and returns an
        empty response. Creating an id that is still live is an error.
        """
        if instance_id is None:
            instance_id = str(uuid4())
        if instance_id in self._instance_dict:
            raise ValueError(f"tool {self.name!r}: instance {instance_id!r} already exists")
        self._instance_dict[instance_id] = dict(kwargs)
        return instance_id, ToolResponse()

    @abstractmethod
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Run one call with the model's (schema-validated) arguments.

        Returns ``(response for the model, step reward, metrics)``.
        """

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The tool's reward for the whole trajectory (default 0.0)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Free the instance's state. Releasing an unknown id is a no-op."""
        self._instance_dict.pop(instance_id, None)
