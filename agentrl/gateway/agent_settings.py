"""AgentSettings: what agent mode reads of `actor_rollout_ref.rollout`, typed, made once.

    settings = AgentSettings.from_config(cfg.actor_rollout_ref.rollout)
    settings.timeout, settings.client, settings.rollout.multi_turn.format

`AgentRollout` (agent_rollout.py) receives this one frozen object: the `agent_*` keys,
their choices checked here, and the engine's `RolloutConfig` its collector and gateway
read. As in `RolloutConfig`, no field has a default (the YAML's are the defaults) and a key
the section lacks is a `RolloutConfigError` naming it
(`actor_rollout_ref.rollout.agent_timeout`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from agentrl.config.validate import AGENT_CLIENTS, AGENT_SEGMENTS, AGENT_SIDE_CALLS
from agentrl.rollout.engine_config import ROLLOUT_KEY, RolloutConfig, config_section, required


@dataclass(frozen=True)
class AgentSettings:
    """`rollout.agent_*` (docs/gateway.md) and the engine settings agent mode reuses."""

    rollout: RolloutConfig  # sampling n, lengths, multi_turn (the gateway's tools and parser)
    function: str | None  # agent_function: file.py:run or pkg.module.run (None: not agent mode)
    timeout: float  # agent_timeout: seconds one sample's episode may take
    client: str  # agent_client: openai | anthropic
    segments: str  # agent_segments: all | last
    side_calls: str  # agent_side_calls: record | train

    @classmethod
    def from_config(cls, rollout: DictConfig | Mapping[str, Any]) -> AgentSettings:
        """From the validated `actor_rollout_ref.rollout` section; a missing key raises
        `RolloutConfigError` naming it, a value outside its choices a ValueError."""
        rollout = config_section(rollout, ROLLOUT_KEY)
        function = required(rollout, "agent_function", ROLLOUT_KEY)
        settings = cls(
            rollout=RolloutConfig.from_config(rollout),
            function=str(function) if function else None,
            timeout=float(required(rollout, "agent_timeout", ROLLOUT_KEY)),
            client=str(required(rollout, "agent_client", ROLLOUT_KEY)),
            segments=str(required(rollout, "agent_segments", ROLLOUT_KEY)),
            side_calls=str(required(rollout, "agent_side_calls", ROLLOUT_KEY)),
        )  # fmt: skip
        for key, value, choices in (("agent_client", settings.client, AGENT_CLIENTS),
                                    ("agent_segments", settings.segments, AGENT_SEGMENTS),
                                    ("agent_side_calls", settings.side_calls, AGENT_SIDE_CALLS)):
            if value not in choices:
                raise ValueError(f"{ROLLOUT_KEY}.{key} must be one of {choices}, got {value!r}")
        return settings


__all__ = ["AgentSettings"]
