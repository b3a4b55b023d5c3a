"""OptimSettings: an optim section typed once from the validated tree (the actor's and the
critic's); a missing key named in full."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agentrl.config import load_config
from agentrl.rollout.engine_config import RolloutConfigError
from agentrl.workers.optim_settings import OptimSettings


def test_the_actors_and_the_critics_sections_are_typed():
    cfg = load_config(overrides=["actor_rollout_ref.actor.optim.lr=3e-6",
                                 "actor_rollout_ref.actor.optim.betas=[0.8,0.9]",
                                 "actor_rollout_ref.actor.optim.lr_warmup_steps=7",
                                 "critic.optim.warmup_style=cosine"])
    actor = OptimSettings.from_config(cfg.actor_rollout_ref.actor.optim,
                                      "actor_rollout_ref.actor.optim")
    assert actor.lr == 3e-6 and actor.betas == (0.8, 0.9) and actor.lr_warmup_steps == 7
    assert (actor.warmup_style, actor.total_training_steps) == ("constant", -1)
    critic = OptimSettings.from_config(cfg.critic.optim, "critic.optim")
    assert critic.lr == 1e-5 and critic.warmup_style == "cosine"
    assert isinstance(critic.num_cycles, float) and isinstance(critic.lr_warmup_steps, int)
    with pytest.raises(AttributeError):  # frozen
        critic.lr = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("key", ["lr", "betas", "total_training_steps", "num_cycles"])
def test_a_missing_key_is_named_in_full(key):
    optim = OmegaConf.to_container(load_config().critic.optim, resolve=True)
    del optim[key]
    with pytest.raises(RolloutConfigError) as err:
        OptimSettings.from_config(optim, "critic.optim")
    assert str(err.value).startswith(f"critic.optim.{key} is missing")


def test_betas_must_be_two_values():
    optim = OmegaConf.to_container(load_config().critic.optim, resolve=True) | {"betas": [0.9]}
    with pytest.raises(ValueError, match=r"^critic\.optim\.betas must have two values, got \[0\.9\]"):
        OptimSettings.from_config(optim, "critic.optim")
