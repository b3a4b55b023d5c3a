"""AgentSettings: agent mode's keys typed once from the validated rollout section; a missing
key named in full, a value outside its choices refused, AgentRollout refusing a raw tree."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agentrl.config import load_config
from agentrl.gateway.agent_rollout import AgentRollout
from agentrl.gateway.agent_settings import AgentSettings
from agentrl.rollout.engine_config import RolloutConfig, RolloutConfigError


def _section(*overrides: str) -> dict:
    cfg = load_config(overrides=[f"actor_rollout_ref.rollout.{o}" for o in overrides])
    return OmegaConf.to_container(cfg.actor_rollout_ref.rollout, resolve=True)


def test_settings_are_typed_from_the_section_once():
    section = _section("agent_function=my_agents.py:run", "agent_timeout=12",
                       "agent_client=anthropic", "agent_segments=last",
                       "agent_side_calls=train", "response_length=77")
    settings = AgentSettings.from_config(OmegaConf.create(section))
    assert settings.function == "my_agents.py:run"
    assert settings.timeout == 12.0 and isinstance(settings.timeout, float)
    assert (settings.client, settings.segments, settings.side_calls) == (
        "anthropic", "last", "train")
    assert isinstance(settings.rollout, RolloutConfig)
    assert settings.rollout.response_length == 77
    assert AgentSettings.from_config(section) == settings  # a plain mapping reads the same
    with pytest.raises(AttributeError):  # frozen
        settings.timeout = 1.0  # type: ignore[misc]


def test_defaults_are_the_yaml_s_and_no_function_is_none():
    settings = AgentSettings.from_config(_section())
    assert settings.function is None
    assert (settings.timeout, settings.client, settings.segments, settings.side_calls) == (
        300.0, "openai", "all", "record")


@pytest.mark.parametrize("key", ["agent_timeout", "agent_side_calls", "agent_function"])
def test_a_missing_key_is_named_in_full(key):
    section = _section()
    del section[key]
    with pytest.raises(RolloutConfigError) as err:
        AgentSettings.from_config(section)
    assert str(err.value).startswith(f"actor_rollout_ref.rollout.{key} is missing")


def test_a_missing_engine_key_is_named_in_full_too():
    section = _section()
    del section["multi_turn"]["format"]
    with pytest.raises(RolloutConfigError, match=r"^actor_rollout_ref\.rollout\.multi_turn"
                                                 r"\.format is missing"):
        AgentSettings.from_config(section)


@pytest.mark.parametrize(("key", "value"), [("agent_client", "gemini"),
                                            ("agent_segments", "first"),
                                            ("agent_side_calls", "drop")])
def test_a_value_outside_its_choices_is_refused_by_name(key, value):
    section = _section() | {key: value}
    with pytest.raises(ValueError, match=rf"actor_rollout_ref\.rollout\.{key} must be one of "
                                         rf".*got '{value}'"):
        AgentSettings.from_config(section)


def test_agent_rollout_takes_only_the_typed_settings(tiny_tokenizer):
    raw = load_config().actor_rollout_ref.rollout
    with pytest.raises(TypeError, match="AgentSettings.from_config"):
        AgentRollout(raw, tiny_tokenizer, None, None)
