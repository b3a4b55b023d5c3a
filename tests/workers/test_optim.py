"""AdamW from the optim config and the warmup + constant/cosine learning-rate schedule."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from agentrl.workers.optim import build_lr_scheduler, build_optimizer, lr_multiplier, warmup_steps
from agentrl.workers.optim_settings import OptimSettings


def _optim(**overrides):
    base = {
        "lr": 1e-3,
        "betas": [0.9, 0.95],
        "weight_decay": 0.1,
        "lr_warmup_steps": -1,
        "lr_warmup_steps_ratio": 0.0,
        "warmup_style": "constant",
        "min_lr_ratio": 0.0,
        "num_cycles": 0.5,
        "total_training_steps": -1,
    }
    return OptimSettings.from_config(OmegaConf.create({**base, **overrides}), "critic.optim")


def test_adamw_takes_lr_betas_and_weight_decay():
    optimizer = build_optimizer(torch.nn.Linear(2, 2).parameters(), _optim())
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.AdamW)
    assert (group["lr"], group["betas"], group["weight_decay"]) == (1e-3, (0.9, 0.95), 0.1)
    with pytest.raises(ValueError, match=r"^critic\.optim\.betas must have two values"):
        build_optimizer(torch.nn.Linear(2, 2).parameters(), _optim(betas=[0.9]))


def test_warmup_from_steps_or_ratio():
    assert warmup_steps(_optim(lr_warmup_steps=5)) == 5
    assert warmup_steps(_optim()) == 0
    assert warmup_steps(_optim(lr_warmup_steps_ratio=0.1, total_training_steps=50)) == 5
    with pytest.raises(ValueError, match="total_training_steps is unknown"):
        warmup_steps(_optim(lr_warmup_steps_ratio=0.1))


def test_constant_schedule_with_warmup():
    f = lr_multiplier(_optim(lr_warmup_steps=4))
    assert [f(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]  # no step at lr 0


def test_cosine_schedule_decays_to_the_floor():
    f = lr_multiplier(
        _optim(lr_warmup_steps=2, warmup_style="cosine", total_training_steps=12, min_lr_ratio=0.1)
    )
    assert f(0) == 0.5 and f(1) == 1.0 and f(2) == 1.0
    assert f(7) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))  # halfway: 0.55
    assert f(12) == pytest.approx(0.1) and f(20) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="cosine needs optim.total_training_steps"):
        lr_multiplier(_optim(warmup_style="cosine"))
    with pytest.raises(ValueError, match="choose constant or cosine"):
        lr_multiplier(_optim(warmup_style="linear"))


def test_scheduler_steps_the_optimizer_lr():
    optimizer = build_optimizer(torch.nn.Linear(2, 2).parameters(), _optim(lr_warmup_steps=2))
    scheduler = build_lr_scheduler(optimizer, _optim(lr_warmup_steps=2))
    lrs = []
    for _ in range(3):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs == [5e-4, 1e-3, 1e-3]
