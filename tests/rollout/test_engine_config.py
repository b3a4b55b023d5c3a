"""RolloutConfig: made from the validated rollout section, every value from the tree (the
YAML's defaults), a missing key named in full, frozen."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from agentrl.config import load_config
from agentrl.rollout.engine_config import (
    MultiTurnConfig,
    RolloutConfig,
    RolloutConfigError,
    SamplingConfig,
)


def _rollout(*overrides: str):
    return load_config(overrides=[f"actor_rollout_ref.rollout.{o}" for o in overrides]
                       ).actor_rollout_ref.rollout  # fmt: skip


def _without(section, dotted: str):
    tree = OmegaConf.to_container(section, resolve=True)
    *parents, last = dotted.split(".")
    node = tree
    for key in parents:
        node = node[key]
    del node[last]
    return tree


def test_the_values_are_the_trees():
    cfg = RolloutConfig.from_config(_rollout(
        "temperature=0.7", "n=4", "multi_turn.format=qwen25", "multi_turn.max_parallel_calls=3",
        "on_infra_error=zero", "val_kwargs.n=2", "deterministic=true", "max_retries=5",
    ))  # fmt: skip
    assert cfg.sampling == SamplingConfig(temperature=0.7, top_k=-1, top_p=1.0, do_sample=True,
                                          n=4)  # fmt: skip
    assert cfg.val_kwargs.n == 2 and cfg.val_kwargs.do_sample is False
    assert cfg.multi_turn.format == "qwen25" and cfg.multi_turn.max_parallel_calls == 3
    assert cfg.on_infra_error == "zero" and cfg.deterministic is True and cfg.max_retries == 5


def test_the_defaults_are_the_yamls():
    """No field has a default of its own: each default is read from the loaded tree."""
    section = _rollout()
    cfg = RolloutConfig.from_config(section)
    for cls in (RolloutConfig, SamplingConfig, MultiTurnConfig):
        for field in dataclasses.fields(cls):
            assert field.default is dataclasses.MISSING, f"{cls.__name__}.{field.name}"
            assert field.default_factory is dataclasses.MISSING, f"{cls.__name__}.{field.name}"
    assert cfg.on_infra_error == section.on_infra_error
    assert cfg.max_concurrent_requests == section.max_concurrent_requests
    assert cfg.prompt_length == section.prompt_length  # interpolations resolved
    assert cfg.multi_turn.tool_timeout == section.multi_turn.tool_timeout
    assert cfg.deterministic is None  # null: the backend decides (the engine)


@pytest.mark.parametrize("key", ["on_infra_error", "temperature", "multi_turn.format",
                                 "val_kwargs.n", "multi_turn", "over_sample_rate"])
def test_a_missing_key_is_named_in_full(key):
    with pytest.raises(RolloutConfigError) as err:
        RolloutConfig.from_config(_without(_rollout(), key))
    assert f"actor_rollout_ref.rollout.{key} is missing" in str(err.value)


def test_a_mapping_works_like_the_dictconfig():
    section = _rollout("n=3")
    assert RolloutConfig.from_config(OmegaConf.to_container(section, resolve=True)) == \
        RolloutConfig.from_config(section)


def test_a_bad_on_infra_error_and_a_non_section_are_refused():
    tree = OmegaConf.to_container(_rollout(), resolve=True) | {"on_infra_error": "skip"}
    with pytest.raises(ValueError, match="on_infra_error is 'skip'"):
        RolloutConfig.from_config(tree)
    with pytest.raises(TypeError, match="actor_rollout_ref.rollout must be a config section"):
        RolloutConfig.from_config(None)


def test_the_offload_setting_is_read_once_as_auto_or_a_bool():
    for value, read in (("auto", "auto"), ("true", True), ("False", False), (True, True)):
        tree = OmegaConf.to_container(_rollout(), resolve=True)
        tree["multi_turn"]["tokenization_sanity_check_offload"] = value
        assert RolloutConfig.from_config(tree).multi_turn.tokenization_sanity_check_offload == read
    tree["multi_turn"]["tokenization_sanity_check_offload"] = "sometimes"
    with pytest.raises(ValueError, match="tokenization_sanity_check_offload is 'sometimes'"):
        RolloutConfig.from_config(tree)


def test_it_is_frozen():
    cfg = RolloutConfig.from_config(_rollout())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.multi_turn.enable = True
