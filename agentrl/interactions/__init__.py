"""Interactions: simulated users that answer the model between turns (verl's API).

    from agentrl.interactions import BaseInteraction, load_interactions

See agentrl/interactions/base.py for the lifecycle and docs/rollout.md for how the
rollout engine drives it (`actor_rollout_ref.rollout.multi_turn.interaction_config_path`).
"""

from agentrl.interactions.base import BaseInteraction
from agentrl.interactions.loader import InteractionConfigError, load_interactions
from agentrl.utils.infra import InfraError

__all__ = ["BaseInteraction", "InfraError", "InteractionConfigError", "load_interactions"]
