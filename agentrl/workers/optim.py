"""AdamW and its learning-rate schedule: linear warmup, then constant or cosine decay.

Reads an ``optim`` section's typed ``OptimSettings`` (optim_settings.py; from
``actor_rollout_ref.actor.optim`` or ``critic.optim``):

- ``lr``, ``betas``, ``weight_decay``: AdamW (Loshchilov & Hutter 2019);
- ``lr_warmup_steps`` (>= 0), or when it is -1, ``lr_warmup_steps_ratio`` x
  ``total_training_steps``: over ``w`` warmup steps the multiplier is ``1/w, 2/w, ..., 1``
  (linear; the first step is not spent at lr 0, unlike verl's schedule);
- ``warmup_style``: ``constant`` keeps ``lr`` after warmup; ``cosine`` follows
  ``min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(2 pi num_cycles p)) / 2`` where ``p`` is
  the progress from the end of warmup to ``total_training_steps`` (``num_cycles`` 0.5 is
  one half-cosine down to ``min_lr_ratio * lr``), as in Loshchilov & Hutter 2017 (SGDR)
  without restarts.

The scheduler steps once per training step (one ``update_actor`` / ``update_critic``
call), so ``total_training_steps`` counts those.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from agentrl.config.validate import WARMUP_STYLES
from agentrl.workers.optim_settings import OptimSettings


def build_optimizer(params: Iterable[torch.nn.Parameter],
                    optim: OptimSettings) -> torch.optim.AdamW:  # fmt: skip
    """AdamW over ``params`` from ``optim.lr``, ``optim.betas``, ``optim.weight_decay``."""
    return torch.optim.AdamW(list(params), lr=optim.lr, betas=optim.betas,
                             weight_decay=optim.weight_decay)  # fmt: skip


def warmup_steps(optim: OptimSettings) -> int:
    """Warmup length: ``lr_warmup_steps`` if >= 0, else ratio x total steps."""
    if optim.lr_warmup_steps >= 0:
        return optim.lr_warmup_steps
    ratio = optim.lr_warmup_steps_ratio
    if ratio == 0.0:
        return 0
    total = optim.total_training_steps
    if total <= 0:
        raise ValueError(
            "optim.lr_warmup_steps_ratio is set but optim.total_training_steps is "
            "unknown (-1); set lr_warmup_steps or total_training_steps"
        )
    return int(ratio * total)


def lr_multiplier(optim: OptimSettings) -> Callable[[int], float]:
    """The function ``step -> lr / optim.lr`` of the configured schedule."""
    warmup = warmup_steps(optim)
    style = optim.warmup_style
    if style not in WARMUP_STYLES:
        raise ValueError(f"optim.warmup_style is {style!r}; choose {' or '.join(WARMUP_STYLES)}")
    total = optim.total_training_steps
    if style == "cosine" and total <= warmup:
        raise ValueError(
            f"optim.warmup_style cosine needs optim.total_training_steps ({total}) "
            f"larger than the warmup ({warmup} steps)"
        )
    min_ratio = optim.min_lr_ratio
    cycles = optim.num_cycles

    def multiplier(step: int) -> float:
        if step < warmup:  # the first step already learns: 1/w, 2/w, ..., 1
            return (step + 1) / warmup
        if style == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        cosine = 0.5 * (1.0 + math.cos(2.0 * math.pi * cycles * progress))
        return max(min_ratio, min_ratio + (1.0 - min_ratio) * cosine)

    return multiplier


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, optim: OptimSettings
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following ``lr_multiplier(optim)``."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(optim))
