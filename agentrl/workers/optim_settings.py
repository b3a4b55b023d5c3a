"""OptimSettings: an `optim` section (`actor_rollout_ref.actor.optim`, `critic.optim`),
typed, made once from the validated tree.

    settings = OptimSettings.from_config(cfg.actor_rollout_ref.actor.optim,
                                         "actor_rollout_ref.actor.optim")
    optimizer = build_optimizer(params, settings)                 # optim.py
    scheduler = build_lr_scheduler(optimizer, settings)

The keys are documented in optim.py and agentrl/config/ppo_trainer.yaml. As in
`RolloutConfig` (agentrl/rollout/engine_config.py), no field has a default and a key the
section lacks is a `RolloutConfigError` naming it in full (`critic.optim.lr`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from agentrl.rollout.engine_config import config_section, required


@dataclass(frozen=True)
class OptimSettings:
    """AdamW and its learning-rate schedule (optim.py)."""

    lr: float
    betas: tuple[float, float]
    weight_decay: float
    lr_warmup_steps: int  # -1: lr_warmup_steps_ratio x total_training_steps
    lr_warmup_steps_ratio: float
    warmup_style: str  # constant | cosine
    min_lr_ratio: float
    num_cycles: float
    total_training_steps: int  # set by the trainer from the data; -1 unknown

    @classmethod
    def from_config(cls, optim: DictConfig | Mapping[str, Any], path: str) -> OptimSettings:
        """From the validated `optim` section at `path` (named in its errors)."""
        optim = config_section(optim, path)
        values = {f.name: required(optim, f.name, path) for f in dataclasses.fields(cls)}
        betas = tuple(float(b) for b in values["betas"])
        if len(betas) != 2:
            raise ValueError(f"{path}.betas must have two values, got {list(values['betas'])}")
        return cls(
            lr=float(values["lr"]), betas=(betas[0], betas[1]),
            weight_decay=float(values["weight_decay"]),
            lr_warmup_steps=int(values["lr_warmup_steps"]),
            lr_warmup_steps_ratio=float(values["lr_warmup_steps_ratio"]),
            warmup_style=str(values["warmup_style"]), min_lr_ratio=float(values["min_lr_ratio"]),
            num_cycles=float(values["num_cycles"]),
            total_training_steps=int(values["total_training_steps"]),
        )  # fmt: skip


__all__ = ["OptimSettings"]
