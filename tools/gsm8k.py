"""GSM8K answer tool: the model submits its answer and is told whether it is right.

The same behaviour as verl's ``verl.tools.gsm8k_tool.Gsm8kTool`` (its multi-turn GSM8K
example), so that example's tool YAML runs here and gives the same rewards:

- ``create(instance_id, ground_truth=...)`` (or ``create_kwargs={"ground_truth": ...}``)
  stores the ground truth;
- ``execute(instance_id, {"answer": "72"})`` stores ``"#### 72"`` as the response, scores
  it with the GSM8K scorer (flexible extraction: the last number), and answers
  ``Current parsed answer='72' reward=1.0``; its step reward is 0.0 when the score went up
  and -0.05 otherwise (a nudge against resubmitting);
- ``calc_reward`` is the score of the last submitted answer (1.0 right, 0.0 wrong).

The reward function still scores the final response; the tool's reward reaches the score
only through ``reward_model.tool_reward_weight`` or a ``compute_score`` that reads
``extra_info["rollout_reward_scores"]`` (docs/rewards.md).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from agentrl.reward.score import gsm8k
from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse

DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calc_gsm8k_reward",
        "description": "A tool for calculating the reward of gsm8k. (1.0 if parsed answer is "
                       "correct, 0.0 if parsed answer is incorrect or not correctly parsed)",
        "parameters": {
            "type": "object",
            "properties": {
                "answer": {"type": "string",
                           "description": "The model's answer to the GSM8K math problem, "
                                          "must be a digits"},
            },
            "required": ["answer"],
        },
    },
}
RESUBMIT_PENALTY = -0.05


class Gsm8kTool(BaseTool):
    """Scores a submitted GSM8K answer against the instance's ground truth."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)
        super().__init__(config, schema)
        unknown = set(self.config) - {"type"}
        if unknown:
            raise ValueError(f"gsm8k tool: unknown config keys {sorted(unknown)}")

    async def create(
        self, instance_id: str | None = None, ground_truth: Any = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        if ground_truth is None:
            raise ValueError(
                "gsm8k tool: create needs ground_truth (the row's "
                "extra_info.tools_kwargs.<tool>.create_kwargs.ground_truth)"
            )
        instance_id = instance_id or str(uuid4())
        if instance_id in self._instance_dict:
            raise ValueError(f"tool {self.name!r}: instance {instance_id!r} already exists")
        self._instance_dict[instance_id] = {
            "response": "", "ground_truth": str(ground_truth), "reward": 0.0,
        }
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        state = self._state(instance_id)
        answer = parameters.get("answer", "")
        if not isinstance(answer, str):
            answer = str(answer)
        state["response"] = answer if answer.startswith("#### ") else "#### " + answer
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else RESUBMIT_PENALTY
        state["reward"] = reward
        return ToolResponse(text=f"Current parsed {answer=} {reward=}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        state = self._state(instance_id)
        return gsm8k.compute_score(state["response"], state["ground_truth"], method="flexible",
                                   format_score=0.0, score=1.0)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instance_dict.pop(instance_id, None)

    def _state(self, instance_id: str) -> dict[str, Any]:
        if instance_id not in self._instance_dict:
            raise KeyError(f"tool {self.name!r}: no instance {instance_id!r} (create it first)")
        return self._instance_dict[instance_id]
