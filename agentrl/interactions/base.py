"""``BaseInteraction``: a simulated user that answers the model between turns (verl's shape).

When a model turn calls no tool and the sample has an interaction, the rollout engine
asks the interaction for the user's next message:

    instance_id = await interaction.start_interaction(request_id, **interaction_kwargs)
    should_terminate, text, score, metrics = await interaction.generate_response(
        instance_id, messages, **interaction_kwargs)     # after each plain model turn
    ...                                                  # "wrong, try again" -> next turn
    await interaction.finalize_interaction(instance_id)  # always, also after errors

``text`` becomes a user message (token delta, loss mask 0) unless ``should_terminate``;
each ``score`` is appended to the sample's ``reward_scores["user_turn_rewards"]``.
``interaction_kwargs`` come from the dataset row's ``extra_info.interaction_kwargs``; its
``name`` picks the interaction of the interaction config (see ``load_interactions``).
One object serves every trajectory, so per-trajectory state lives in
``self._instance_dict`` keyed by instance id, like a tool's.

An exception from any method ends the trajectory FAILED. Raise ``InfraError`` (from
``agentrl.interactions``) when the environment, not the model, failed (its server is down,
it crashed); timeouts and connection errors count as such by themselves
(agentrl/utils/infra.py). Those never train as the model's (``rollout.on_infra_error``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any
from uuid import uuid4


class BaseInteraction(ABC):
    """A simulated user. Subclasses implement ``generate_response``.

    Args:
        config: the entry's ``config`` mapping from the interaction YAML, plus ``name``.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = dict(config or {})
        self.name: str = self.config.get("name", "interaction_agent")
        self._instance_dict: dict[str, Any] = {}

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Start a trajectory's instance; the default stores ``kwargs`` as its state."""
        if instance_id is None:
            instance_id = str(uuid4())
        self._instance_dict[instance_id] = dict(kwargs)
        return instance_id

    @abstractmethod
    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """The user's reply to the conversation so far.

        Returns ``(should_terminate, response text, turn score, metrics)``.
        """

    async def after_tool_turn(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, float, dict[str, Any]]:
        """The environment's stop rule after a turn that called tools (the engine ran them;
        ``messages`` end with their results): ``(terminate, score, metrics)``. An environment
        whose episode can end there (a turn limit) says so, with its final score; the default
        goes on (``generate_response`` is asked only after turns without tool calls)."""
        return False, 0.0, {}

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        """A score of the trajectory so far (a helper for ``generate_response``; 0.0)."""
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        """Free the instance's state. Finalizing an unknown id is a no-op."""
        self._instance_dict.pop(instance_id, None)
