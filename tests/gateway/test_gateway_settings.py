"""GatewaySettings: `agentrl gateway`'s flags and config keys typed once; a missing key named
in full."""

from __future__ import annotations

import argparse

import pytest
from omegaconf import OmegaConf

from agentrl.config import load_config
from agentrl.gateway.gateway_settings import GatewaySettings
from agentrl.rollout.engine_config import MultiTurnConfig, RolloutConfigError


def _args(model: str = "/models/Qwen-tiny") -> argparse.Namespace:
    return argparse.Namespace(model=model, host="0.0.0.0", port=8311, max_body_bytes=4096,
                              body_timeout=7, overrides=[])


def test_settings_read_the_flags_and_the_keys_once():
    cfg = load_config(overrides=["data.max_response_length=33", "trainer.seed=5",
                                 "actor_rollout_ref.rollout.multi_turn.format=qwen3_coder",
                                 "data.apply_chat_template_kwargs={enable_thinking: false}"])
    settings = GatewaySettings.from_config(cfg, _args())
    assert (settings.model_path, settings.model_name) == ("/models/Qwen-tiny", "Qwen-tiny")
    assert (settings.host, settings.port, settings.max_body_bytes) == ("0.0.0.0", 8311, 4096)
    assert settings.body_timeout == 7.0 and isinstance(settings.body_timeout, float)
    assert (settings.default_max_tokens, settings.seed) == (33, 5)
    assert settings.chat_template_kwargs == {"enable_thinking": False}
    assert isinstance(settings.multi_turn, MultiTurnConfig)
    assert settings.multi_turn.format == "qwen3_coder"
    assert settings.backend["name"] == cfg.actor_rollout_ref.rollout.name
    assert isinstance(settings.backend, dict)  # resolved: no OmegaConf left


@pytest.mark.parametrize(("drop", "named"), [
    (("data", "max_response_length"), "data.max_response_length"),
    (("trainer", "seed"), "trainer.seed"),
    (("trainer",), "trainer"),
])
def test_a_missing_key_is_named_in_full(drop, named):
    tree = OmegaConf.to_container(load_config(), resolve=True)
    section = tree
    for key in drop[:-1]:
        section = section[key]
    del section[drop[-1]]
    with pytest.raises(RolloutConfigError) as err:
        GatewaySettings.from_config(OmegaConf.create(tree), _args())
    assert str(err.value).startswith(f"{named} is missing")
