"""Config loading: defaults, recipe YAML, overrides, unknown keys, types, read-only result."""

from __future__ import annotations

import re

import pytest
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ReadonlyConfigError

from agentrl.config import DEFAULT_CONFIG_PATH, ConfigError, config_to_yaml, load_config

SMALL = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]


def test_defaults_load_and_resolve_interpolations():
    cfg = load_config()
    assert isinstance(cfg, DictConfig)
    assert cfg.actor_rollout_ref.rollout.prompt_length == cfg.data.max_prompt_length == 512
    assert cfg.critic.ppo_mini_batch_size == cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    assert cfg.trainer.default_local_dir == "checkpoints/agentrl/default"
    assert "${" not in config_to_yaml(cfg)


def test_overrides_win_over_yaml_and_interpolations_follow(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("data:\n  max_prompt_length: 128\n  train_batch_size: 16\n"
                      "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 8\n"
                      "  rollout:\n    n: 4\n")
    cfg = load_config(recipe, ["actor_rollout_ref.rollout.n=8", "+trainer.experiment_name=x",
                               "actor_rollout_ref.actor.optim.lr=1e-6", "trainer.logger=[console,file]"])
    assert cfg.data.max_prompt_length == 128
    assert cfg.actor_rollout_ref.rollout.prompt_length == 128  # interpolation sees the recipe
    assert cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.critic.rollout_n == 8
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-6)
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.trainer.default_local_dir == "checkpoints/agentrl/x"


def test_unknown_override_key_names_the_closest_key():
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["actor_rollout_ref.rollout.nn=8"])
    assert "unknown config key actor_rollout_ref.rollout.nn" in str(err.value)
    assert "did you mean actor_rollout_ref.rollout.n" in str(err.value)


def test_unknown_yaml_keys_are_all_reported(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data:\n  max_promt_length: 10\ntrainer:\n  totl_epochs: 3\nfoo: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(recipe)
    message = str(err.value)
    assert "data.max_promt_length" in message and "did you mean data.max_prompt_length" in message
    assert "trainer.totl_epochs" in message and "trainer.total_epochs" in message
    assert "unknown config key foo" in message and "valid keys under the top level" in message
    assert len(err.value.problems) == 3


def test_open_mappings_take_any_key():
    cfg = load_config(overrides=["actor_rollout_ref.model.override_config.attention_dropout=0.1",
                                 "custom_reward_function.reward_kwargs.bonus=2"])
    assert cfg.actor_rollout_ref.model.override_config.attention_dropout == 0.1
    assert cfg.custom_reward_function.reward_kwargs.bonus == 2


@pytest.mark.parametrize("override,fragment", [
    ("data.train_batch_size=abc", "data.train_batch_size must be int, got 'abc'"),
    ("actor_rollout_ref.rollout.do_sample=1", "do_sample must be bool"),
    ("actor_rollout_ref.actor.clip_ratio=high", "clip_ratio must be float or int"),
    ("trainer.logger=console", "trainer.logger must be list"),
    ("data.val_batch_size=half", "data.val_batch_size must be int"),
    ("data.max_prompt_length=null", "data.max_prompt_length must be int, got None"),
    ("actor_rollout_ref.actor.optim=3", "actor_rollout_ref.actor.optim (from override"),
])
def test_wrong_types_name_the_key(override, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(overrides=SMALL + [override])


def test_ints_stand_for_floats_and_nullable_keys_take_null_or_their_type():
    cfg = load_config(overrides=["actor_rollout_ref.actor.clip_ratio=1",
                                 "actor_rollout_ref.actor.clip_ratio_high=0.28",
                                 "data.val_batch_size=null"])
    assert cfg.actor_rollout_ref.actor.clip_ratio == 1
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.28
    assert cfg.data.val_batch_size is None


def test_result_is_read_only_and_strict():
    cfg = load_config()
    with pytest.raises(ReadonlyConfigError):
        cfg.actor_rollout_ref.rollout.n = 3
    with pytest.raises(ConfigAttributeError):  # struct mode: unknown attribute
        _ = cfg.actor_rollout_ref.rollout.nn


@pytest.mark.parametrize("bad", ["data.train_batch_size", "=3", "trainer.experiment_name=a,b",
                                 "~data.nope"])
def test_malformed_overrides(bad):
    with pytest.raises(ConfigError, match="override"):
        load_config(overrides=[bad])


def test_bad_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "missing_default.yaml").write_text("defaults:\n  - no_such_config\n")
    with pytest.raises(ConfigError, match="no_such_config"):
        load_config(tmp_path / "missing_default.yaml")
    (tmp_path / "broken.yaml").write_text("data: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config(tmp_path / "broken.yaml")


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_every_leaf_key_in_the_defaults_is_documented():
    undocumented = []
    for number, line in enumerate(DEFAULT_CONFIG_PATH.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, _, value = stripped.partition(":")
        is_section = value.strip() == ""
        if not is_section and "#" not in value:
            undocumented.append(f"line {number}: {key}")
    assert undocumented == []


def test_config_command_prints_resolved_yaml_or_the_problems(capsys):
    from agentrl.cli import main

    assert main(["config", "actor_rollout_ref.rollout.n=4"]) == 0
    out = capsys.readouterr().out
    assert "rollout_n: 4" in out and "${" not in out
    assert main(["config", "actor_rollout_ref.rollout.nn=4"]) == 2
    assert "did you mean actor_rollout_ref.rollout.n" in capsys.readouterr().err


def test_trainer_seed_is_the_default_of_the_data_order_seed():
    assert load_config().data.seed == load_config().trainer.seed == 42
    assert load_config(overrides=["trainer.seed=7"]).data.seed == 7
    assert load_config(overrides=["trainer.seed=7", "data.seed=1"]).data.seed == 1


def test_chat_template_kwargs_is_a_plain_resolved_dict():
    from agentrl.config import chat_template_kwargs

    cfg = load_config(overrides=["+data.apply_chat_template_kwargs.enable_thinking=false"])
    kwargs = chat_template_kwargs(cfg)
    assert kwargs == {"enable_thinking": False} and type(kwargs) is dict
    assert chat_template_kwargs(load_config()) == {}
