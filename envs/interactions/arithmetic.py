"""A user who checks the model's answer and asks it to try again: arithmetic and GSM8K data.

After each model turn that calls no tool, the answer is scored with the built-in scorer of
the sample's data source (``agentrl/arithmetic``: the last ``<answer>``; ``openai/gsm8k``:
``#### answer``). A correct answer ends the trajectory with score 1.0; a wrong one gets
"incorrect, try again" as the next user message with score 0.0, until ``max_attempts``
wrong answers (then the trajectory ends).

Interaction YAML (``multi_turn.interaction_config_path``)::

    interaction:
      - name: arithmetic
        class_name: envs.interactions.arithmetic.ArithmeticInteraction
        config: {max_attempts: 3}

Dataset row: ``extra_info.interaction_kwargs = {"name": "arithmetic", "ground_truth": "42",
"data_source": "agentrl/arithmetic"}`` (``data_source`` defaults to ``config.data_source``,
itself ``agentrl/arithmetic``).
"""

from __future__ import annotations

from typing import Any

from agentrl.interactions import BaseInteraction
from agentrl.reward.score import default_compute_score

CORRECT = "Your answer is correct."
INCORRECT = "Your answer is incorrect. Check your work and try again."


class ArithmeticInteraction(BaseInteraction):
    """Config: ``max_attempts`` (null: no limit), ``data_source``, ``correct_text``,
    ``incorrect_text``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        attempts = self.config.get("max_attempts")
        self.max_attempts = None if attempts is None else int(attempts)
        self.data_source = str(self.config.get("data_source", "agentrl/arithmetic"))
        self.correct_text = str(self.config.get("correct_text", CORRECT))
        self.incorrect_text = str(self.config.get("incorrect_text", INCORRECT))

    async def start_interaction(
        self,
        instance_id: str | None = None,
        *,
        ground_truth: Any = None,
        data_source: str | None = None,
        **kwargs: Any,
    ) -> str:
        if ground_truth is None:
            raise ValueError(f"interaction {self.name!r}: interaction_kwargs need a 'ground_truth'")
        instance_id = await super().start_interaction(instance_id)
        self._instance_dict[instance_id] = {
            "ground_truth": ground_truth,
            "data_source": data_source or self.data_source,
            "attempts": 0,
            "score": 0.0,
        }
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        state = self._instance_dict[instance_id]
        answer = next(
            (m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), ""
        )
        state["attempts"] += 1
        result = default_compute_score(state["data_source"], answer, state["ground_truth"])
        score = float(result["score"] if isinstance(result, dict) else result)
        state["score"] = score
        metrics = {"attempts": state["attempts"]}
        if score >= 1.0:
            return True, self.correct_text, score, metrics
        out_of_attempts = self.max_attempts is not None and state["attempts"] >= self.max_attempts
        return out_of_attempts, self.incorrect_text, score, metrics

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        """The score of the latest answer."""
        return float(self._instance_dict[instance_id]["score"])
