"""A contract check any ``BaseInteraction`` subclass can run in its own tests.

    import asyncio
    from agentrl.interactions.testing import check_interaction_contract

    def test_my_interaction():
        messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}]
        report = asyncio.run(check_interaction_contract(MyInteraction({}), messages,
                                                        {"ground_truth": "4"}))
        assert report.should_terminate is False

It runs start -> generate_response -> finalize the way the rollout engine does and raises
``AssertionError`` naming the broken rule (wrong return types, an instance id that is not
a string, state that ``finalize_interaction`` does not free).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrl.interactions.base import BaseInteraction
from agentrl.utils.contract import require


@dataclass
class InteractionReport:
    """What the interaction returned during the check."""

    instance_id: str
    should_terminate: bool
    response: str
    score: float
    metrics: dict


async def check_interaction_contract(
    interaction: BaseInteraction,
    messages: list[dict],
    interaction_kwargs: dict[str, Any] | None = None,
    instance_id: str = "contract-check",
) -> InteractionReport:
    """Run one start/respond/finalize cycle and check every return value."""
    kwargs = dict(interaction_kwargs or {})
    require(
        isinstance(interaction, BaseInteraction),
        f"{type(interaction).__name__} is not a BaseInteraction subclass",
    )
    got_id = await interaction.start_interaction(instance_id, **kwargs)
    require(
        got_id == instance_id,
        f"start_interaction returned {got_id!r}, expected the given instance id {instance_id!r}",
    )
    result = await interaction.generate_response(instance_id, [dict(m) for m in messages], **kwargs)
    require(
        isinstance(result, tuple) and len(result) == 4,
        f"generate_response returned {result!r}; expected (should_terminate, text, score, metrics)",
    )
    terminate, text, score, metrics = result
    require(
        isinstance(terminate, bool),
        f"should_terminate is {type(terminate).__name__}, expected bool",
    )
    require(isinstance(text, str), f"the response is {type(text).__name__}, expected str")
    require(
        isinstance(score, int | float) and not isinstance(score, bool),
        f"the score is {type(score).__name__}, expected float",
    )
    require(isinstance(metrics, dict), f"metrics is {type(metrics).__name__}, expected dict")
    await interaction.finalize_interaction(instance_id)
    require(
        instance_id not in interaction._instance_dict,
        f"finalize_interaction did not free instance {instance_id!r}",
    )
    return InteractionReport(instance_id, terminate, text, float(score), metrics)
