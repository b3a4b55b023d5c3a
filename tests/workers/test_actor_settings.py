"""ActorSettings: what a PPO actor reads of actor_rollout_ref.actor, typed once; a missing
key named in full; PPOActor refusing a raw tree."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from agentrl.algos.rollout_correction import PolicyLossSettings
from agentrl.config import load_config
from agentrl.testing.workers import assert_missing_key_named
from agentrl.workers.actor_settings import ActorSettings
from agentrl.workers.ppo_actor import PPOActor


def _actor(*overrides: str) -> dict:
    cfg = load_config(overrides=[f"actor_rollout_ref.actor.{o}" for o in overrides])
    return OmegaConf.to_container(cfg.actor_rollout_ref.actor, resolve=True)


def test_the_actor_section_is_typed_once():
    section = _actor("clip_ratio=0.3", "clip_ratio_high=0.28", "ppo_epochs=2",
                     "entropy_coeff=0.01", "use_kl_loss=true", "kl_loss_coef=0.05",
                     "kl_loss_type=low_var_kl", "policy_loss.loss_mode=gspo", "grad_clip=0.5")
    settings = ActorSettings.from_config(OmegaConf.create(section))
    assert settings.policy_loss == PolicyLossSettings(
        clip_ratio=0.3, clip_ratio_low=0.3, clip_ratio_high=0.28, loss_mode="gspo",
        rollout_rs_threshold_lower=0.5)
    assert (settings.ppo_epochs, settings.entropy_coeff, settings.grad_clip) == (2, 0.01, 0.5)
    assert settings.use_kl_loss and (settings.kl_loss_coef, settings.kl_loss_type) == (
        0.05, "low_var_kl")
    assert ActorSettings.from_config(section) == settings


@pytest.mark.parametrize("key", ["grad_clip", "clip_ratio_c", "policy_loss.rollout_is",
                                 "shared_prefix"])
def test_a_missing_key_is_named_in_full(key):
    assert_missing_key_named(ActorSettings.from_config, _actor(), key, "actor_rollout_ref.actor")


def test_ppo_actor_takes_only_the_typed_settings():
    raw = load_config().actor_rollout_ref.actor
    with pytest.raises(TypeError, match=r"ActorSettings\.from_config"):
        PPOActor(torch.nn.Linear(2, 2), None, raw)


@pytest.mark.parametrize(("value", "dynamic"), [("null", True), ("true", True), ("false", False)])
def test_use_dynamic_bsz_null_keeps_its_own_meaning(value, dynamic):
    # null means "by token budget unless a micro-batch size is set" (the YAML's default), not
    # false: read as false it split the smoke run's micro-batches by count and moved its losses
    settings = ActorSettings.from_config(_actor(f"use_dynamic_bsz={value}"))
    assert settings.use_dynamic_bsz is {"null": None, "true": True, "false": False}[value]
    actor = PPOActor(torch.nn.Linear(2, 2), None, settings)
    assert actor.settings.batching.use_dynamic_bsz is dynamic
