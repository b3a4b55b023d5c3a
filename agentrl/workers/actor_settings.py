"""ActorSettings: what a PPO actor reads of `actor_rollout_ref.actor`, typed, made once.

    settings = ActorSettings.from_config(cfg.actor_rollout_ref.actor)
    actor = PPOActor(model, optimizer, settings, mini_batch_size=64)     # ppo_actor.py

The update's keys (epochs, shuffling, micro-batching, clipping, loss aggregation), the
entropy and KL-loss terms, and the policy loss's `PolicyLossSettings`
(agentrl/algos/rollout_correction.py: clip ratios, loss mode, rollout correction; checked
there). As in `RolloutConfig`, no field has a default and a key the section lacks is a
`RolloutConfigError` naming it in full (`actor_rollout_ref.actor.grad_clip`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from agentrl.algos.rollout_correction import PolicyLossSettings, policy_loss_settings
from agentrl.rollout.engine_config import config_section, required

ACTOR_KEY = "actor_rollout_ref.actor"


@dataclass(frozen=True)
class ActorSettings:
    """`actor_rollout_ref.actor`'s keys a `PPOActor` reads (docs/config_reference.md)."""

    policy_loss: PolicyLossSettings  # clip_ratio*, policy_loss.* (the loss functions read it)
    shared_prefix: bool  # forward a shared prompt prefix once (workers/forward.py)
    ppo_epochs: int
    shuffle: bool
    use_dynamic_bsz: bool | None  # null: by token budget unless a micro-batch size is set
    ppo_max_token_len_per_gpu: int
    grad_clip: float
    loss_agg_mode: str
    entropy_coeff: float
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str

    @classmethod
    def from_config(cls, actor: DictConfig | Mapping[str, Any],
                    path: str = ACTOR_KEY) -> ActorSettings:  # fmt: skip
        """From the validated actor section at `path` (named in its errors)."""
        actor = config_section(actor, path)
        for key in ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c"):
            required(actor, key, path)  # PolicyLossSettings' keys, named when absent
        loss = required(actor, "policy_loss", path)
        for key in ("loss_mode", "rollout_is", "rollout_is_threshold", "rollout_rs",
                    "rollout_rs_threshold", "rollout_rs_threshold_lower"):
            required(loss, key, f"{path}.policy_loss")
        values = {f.name: required(actor, f.name, path)
                  for f in dataclasses.fields(cls) if f.name != "policy_loss"}  # fmt: skip
        return cls(
            policy_loss=policy_loss_settings(actor),
            shared_prefix=bool(values["shared_prefix"]), ppo_epochs=int(values["ppo_epochs"]),
            shuffle=bool(values["shuffle"]), use_dynamic_bsz=_bool_or_none(values["use_dynamic_bsz"]),
            ppo_max_token_len_per_gpu=int(values["ppo_max_token_len_per_gpu"]),
            grad_clip=float(values["grad_clip"]), loss_agg_mode=str(values["loss_agg_mode"]),
            entropy_coeff=float(values["entropy_coeff"]),
            use_kl_loss=bool(values["use_kl_loss"]), kl_loss_coef=float(values["kl_loss_coef"]),
            kl_loss_type=str(values["kl_loss_type"]),
        )  # fmt: skip


def _bool_or_none(value: Any) -> bool | None:
    """A boolean key whose null means something of its own (``use_dynamic_bsz``: the
    ppo_actor.micro_batching default), kept null rather than read as false."""
    return None if value is None else bool(value)


__all__ = ["ACTOR_KEY", "ActorSettings"]
