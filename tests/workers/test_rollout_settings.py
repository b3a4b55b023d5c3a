"""RolloutSettings: what a rollout's assembly reads of actor_rollout_ref, typed once from the
validated tree; a missing key named in full."""

from __future__ import annotations

import pickle

import pytest
from omegaconf import OmegaConf

from agentrl.config import load_config
from agentrl.rollout.engine_config import RolloutConfig
from agentrl.testing.workers import assert_missing_key_named
from agentrl.workers.canary import CanarySettings
from agentrl.workers.rollout_settings import ModelSource, RolloutSettings


def _tree(*overrides: str) -> dict:
    cfg = load_config(overrides=list(overrides))
    return OmegaConf.to_container(cfg.actor_rollout_ref, resolve=True)


def test_the_settings_are_typed_from_the_tree_once():
    cfg = load_config(overrides=[
        "actor_rollout_ref.model.path=/m/tiny", "actor_rollout_ref.rollout.engine_workers=3",
        "actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.weights_dir=/w",
        "actor_rollout_ref.rollout.verify_weights=off",
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes=64",
        "actor_rollout_ref.rollout.canary_prompts=[[5,17],[3]]",
        "actor_rollout_ref.rollout.canary_length=6", "actor_rollout_ref.rollout.n=4",
    ])  # fmt: skip
    settings = RolloutSettings.from_config(cfg.actor_rollout_ref)
    assert settings.kind == "sharded" and settings.engine_workers == 3
    assert isinstance(settings.engine, RolloutConfig) and settings.engine.sampling.n == 4
    assert settings.model == ModelSource("/m/tiny", False, None)
    assert (settings.weights_dir, settings.verify_weights) == ("/w", "off")
    assert settings.update_weights_bucket_megabytes == 64
    assert settings.canary == CanarySettings(prompts=([5, 17], [3]), length=6)
    assert type(settings.section) is dict and settings.section["name"] == "sglang"
    assert pickle.loads(pickle.dumps(settings)) == settings  # to engine-worker processes
    plain = OmegaConf.to_container(cfg.actor_rollout_ref, resolve=True)
    assert RolloutSettings.from_config(plain) == settings  # a mapping reads the same


@pytest.mark.parametrize("path", [
    "rollout.weights_dir", "rollout.canary_top_k", "rollout.engine_workers",
    "rollout.multi_turn.format", "model.trust_remote_code", "model.path",
])  # fmt: skip
def test_a_missing_key_is_named_in_full(path):
    assert_missing_key_named(RolloutSettings.from_config, _tree(), path, "actor_rollout_ref")


def test_a_tree_that_is_no_section_is_refused():
    with pytest.raises(TypeError, match="actor_rollout_ref must be a config section"):
        RolloutSettings.from_config("actor_rollout_ref")  # type: ignore[arg-type]
