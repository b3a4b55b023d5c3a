"""A user's own tool: "guess the number", a game with per-trajectory state that the tool scores.

Each trajectory gets its own secret number (``create_kwargs`` from the dataset row). The
model calls ``guess_number`` with ``{"guess": int}`` and hears "higher", "lower" or
"correct"; ``calc_reward`` pays 1.0 for finding the number, 0.1 less for each extra guess
(never below 0.1), and 0.0 if it was not found. The tool YAML is guess_number.yaml;
make_data.py writes a dataset whose rows carry the secret in ``tools_kwargs``.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse


class GuessNumberTool(BaseTool):
    """Config: ``max_guesses`` (default 10), guesses allowed per trajectory."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)
        self.max_guesses = int(self.config.get("max_guesses", 10))

    async def create(
        self,
        instance_id: str | None = None,
        *,
        secret: int,
        low: int = 1,
        high: int = 100,
    ) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        if not low <= secret <= high:
            raise ValueError(f"secret {secret} is outside [{low}, {high}]")
        self._instance_dict[instance_id] = {"secret": int(secret), "guesses": 0, "solved": False}
        return instance_id, ToolResponse(text=f"I picked a whole number from {low} to {high}.")

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        state = self._instance_dict[instance_id]
        if state["solved"]:
            return ToolResponse(text="You already found it."), 0.0, {"guesses": state["guesses"]}
        if state["guesses"] >= self.max_guesses:
            return ToolResponse(text="No guesses left."), 0.0, {"guesses": state["guesses"]}
        state["guesses"] += 1
        guess = parameters["guess"]
        if guess < state["secret"]:
            text = "higher"
        elif guess > state["secret"]:
            text = "lower"
        else:
            state["solved"] = True
            text = "correct"
        return ToolResponse(text=text), 0.0, {"guesses": state["guesses"]}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        state = self._instance_dict[instance_id]
        if not state["solved"]:
            return 0.0
        return max(0.1, 1.0 - 0.1 * (state["guesses"] - 1))

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instance_dict.pop(instance_id, None)
