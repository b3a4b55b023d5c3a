"""Interactions: simulated users that answer the model between turns (verl's API).

    from agentrl.interactions import BaseInteraction, load_interactions

See agentrl/interactions/base.py for the lifecycle and docs/rollout.md for how the
rollout engine drives it (`actor_rollout_ref.rollout.multi_turn.interaction_config_path`).
"""

from agentrl.interactions.base import BaseInteraction
from agentrl.interactions.loader import InteractionConfigError, load_interactions

__all__ = ["BaseInteraction", "InteractionConfigError", "load_interactions"]
