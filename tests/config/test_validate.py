"""Cross-key validation: batch arithmetic, choices and bounds, each naming its keys."""

from __future__ import annotations

import re

import pytest

from agentrl.config import ConfigError, load_config

A = "actor_rollout_ref.actor."


def _problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_config(overrides=list(overrides))
    return err.value.problems


def test_consistent_sizes_pass():
    cfg = load_config(overrides=["data.train_batch_size=16", f"{A}ppo_mini_batch_size=8",
                                 "actor_rollout_ref.rollout.n=4", "trainer.n_gpus_per_node=2",
                                 f"{A}ppo_micro_batch_size_per_gpu=4"])
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4


def test_mini_batch_must_divide_train_batch():
    problems = _problems("data.train_batch_size=10", f"{A}ppo_mini_batch_size=4",
                         "algorithm.adv_estimator=grpo")
    assert problems == [f"{A}ppo_mini_batch_size (4) must divide data.train_batch_size (10)"]


def test_mini_batch_larger_than_train_batch():
    problems = _problems("data.train_batch_size=4", f"{A}ppo_mini_batch_size=8",
                         "algorithm.adv_estimator=grpo")
    assert problems == [f"{A}ppo_mini_batch_size (8) is larger than data.train_batch_size (4)"]


def test_micro_batch_larger_than_mini_batch_names_both():
    (problem,) = _problems("data.train_batch_size=8", f"{A}ppo_mini_batch_size=2",
                           "actor_rollout_ref.rollout.n=2", f"{A}ppo_micro_batch_size_per_gpu=8",
                           "algorithm.adv_estimator=grpo")
    assert f"{A}ppo_micro_batch_size_per_gpu (8 per worker) is larger" in problem
    assert f"{A}ppo_mini_batch_size x rollout.n / workers = 2 x 2 / 1 = 4" in problem


def test_micro_batch_must_divide_per_worker_mini_batch():
    (problem,) = _problems("data.train_batch_size=8", f"{A}ppo_mini_batch_size=4",
                           f"{A}ppo_micro_batch_size_per_gpu=3", "algorithm.adv_estimator=grpo")
    assert "must divide the mini-batch per worker" in problem


def test_workers_must_split_the_mini_batch():
    problems = _problems("data.train_batch_size=6", f"{A}ppo_mini_batch_size=3",
                         "trainer.n_gpus_per_node=2", "algorithm.adv_estimator=grpo")
    assert any("3 x 1 trajectories cannot be split evenly" in p for p in problems)


def test_critic_checked_only_with_gae():
    overrides = ["data.train_batch_size=8", f"{A}ppo_mini_batch_size=4",
                 "critic.ppo_mini_batch_size=3"]
    assert any(p.startswith("critic.ppo_mini_batch_size (3)") for p in _problems(*overrides))
    load_config(overrides=overrides + ["algorithm.adv_estimator=grpo"])


def test_deprecated_and_new_micro_batch_keys_conflict():
    (problem,) = _problems("data.train_batch_size=8", f"{A}ppo_mini_batch_size=4",
                           f"{A}ppo_micro_batch_size=2", f"{A}ppo_micro_batch_size_per_gpu=2",
                           "algorithm.adv_estimator=grpo")
    assert "set only one of" in problem and "ppo_micro_batch_size_per_gpu" in problem


@pytest.mark.parametrize("override,fragment", [
    ("algorithm.adv_estimator=ppo", "algorithm.adv_estimator is 'ppo'; choose one of gae, gpg, grpo"),
    ("data.truncation=top", "data.truncation is 'top'; choose one of error, left, right, middle"),
    ("actor_rollout_ref.rollout.name=vlm", "rollout.name is 'vlm'; choose one of hf, scripted, sglang, vllm"),
    ("trainer.logger=[console,neptune]", "trainer.logger has neptune"),
    ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n must be >= 1, got 0"),
    ("actor_rollout_ref.rollout.on_infra_error=drop",
     "actor_rollout_ref.rollout.on_infra_error is 'drop'; choose one of mask, zero, raise"),
    ("actor_rollout_ref.rollout.max_model_len=100", "max_model_len (100) leaves no room"),
    ("trainer.resume_mode=resume_path", "trainer.resume_from_path is null"),
    ("actor_rollout_ref.rollout.multi_turn.tool_record_mode=replay", "tool_record_path is null"),
    (("actor_rollout_ref.rollout.agent_function=a.py:run",
      "actor_rollout_ref.rollout.deterministic=true"), "deterministic cannot hold in agent mode"),
    ("+actor_rollout_ref.rollout.engine_kwargs.batch_wait=1",
     "engine_kwargs has batch_wait: not keys of the hf engine (those are batch_wait_s, seed, "
     "device, kv_cache)"),
    ("+actor_rollout_ref.rollout.engine_kwargs.kv_cache=static",
     "engine_kwargs.kv_cache is 'static'; choose one of chunked, dynamic"),
    ("actor_rollout_ref.actor.policy_loss.rollout_is=tokens",
     "rollout_is is 'tokens'; choose one of null, token, sequence, geometric"),
    (("actor_rollout_ref.rollout.agent_function=a.py:run",
      "actor_rollout_ref.rollout.multi_turn.interaction_config_path=i.yaml"),
     "interaction_config_path is not used in agent mode"),
])
def test_choices_bounds_and_dependencies(override, fragment):
    problems = _problems(*(override if isinstance(override, tuple) else (override,)))
    assert any(fragment in p for p in problems), problems


def test_token_budget_must_fit_one_sequence():
    problems = _problems(f"{A}use_dynamic_bsz=true", f"{A}ppo_max_token_len_per_gpu=100")
    assert any(re.search(r"ppo_max_token_len_per_gpu \(100\) is smaller than one sequence", p)
               for p in problems)


def test_registry_backed_choices_follow_the_registries():
    from agentrl.algos import ADV_ESTIMATORS, register_adv_est

    assert "grpo" in ADV_ESTIMATORS.names()
    with pytest.raises(ConfigError, match="choose one of .*gae.*grpo"):
        load_config(overrides=["algorithm.adv_estimator=my_estimator_for_config_test"])

    @register_adv_est("my_estimator_for_config_test")
    def _mine(token_level_rewards, response_mask, index, **kwargs):
        return token_level_rewards, token_level_rewards

    try:
        cfg = load_config(overrides=["algorithm.adv_estimator=my_estimator_for_config_test",
                                     "actor_rollout_ref.actor.policy_loss.loss_mode=gpg",
                                     "algorithm.kl_penalty=k3+"])
        assert cfg.algorithm.adv_estimator == "my_estimator_for_config_test"
    finally:
        ADV_ESTIMATORS.unregister("my_estimator_for_config_test")
    assert "my_estimator_for_config_test" not in ADV_ESTIMATORS


ROLLOUT = "actor_rollout_ref.rollout."


def test_the_estimators_declared_needs_are_checked():
    """The critic, the greedy baseline and the teacher follow what the estimator declared."""
    (problem,) = _problems("algorithm.adv_estimator=remax", f"{ROLLOUT}val_kwargs.do_sample=true",
                           f"{ROLLOUT}val_kwargs.temperature=1.0")
    assert problem == ("algorithm.adv_estimator=remax takes its greedy baseline with "
                       "actor_rollout_ref.rollout.val_kwargs: set val_kwargs.n=1 and "
                       "do_sample=false")
    assert ("algorithm.adv_estimator=remax needs a greedy rollout of each training batch under "
            "the current weights; use trainer.mode=sync") in _problems(
        "algorithm.adv_estimator=remax", "trainer.mode=async")
    assert _problems("algorithm.adv_estimator=on_policy_distill")[0].startswith(
        "algorithm.adv_estimator=on_policy_distill needs actor_rollout_ref.teacher.model.path")
    assert _problems("algorithm.adv_estimator=grpo",
                     "actor_rollout_ref.teacher.model.path=/models/t") == [
        "actor_rollout_ref.teacher is read only by algorithm.adv_estimator=on_policy_distill "
        "(it is 'grpo'): set one, or unset the teacher"]
    load_config(overrides=["algorithm.adv_estimator=grpo", f"{ROLLOUT}val_kwargs.do_sample=true",
                           f"{ROLLOUT}val_kwargs.temperature=1.0"])


def test_a_users_estimator_is_checked_by_what_it_declares():
    from agentrl.algos import ADV_ESTIMATORS, EstimatorNeeds, register_adv_est

    name = "my_teacher_and_critic_estimator"

    @register_adv_est(name, EstimatorNeeds(critic=True, teacher=True, greedy_baseline=True))
    def _mine(token_level_rewards, response_mask, index, **kwargs):
        return token_level_rewards, token_level_rewards

    try:
        problems = _problems(f"algorithm.adv_estimator={name}", "data.train_batch_size=8",
                             f"{A}ppo_mini_batch_size=4", "critic.ppo_mini_batch_size=3",
                             f"{ROLLOUT}val_kwargs.n=2", "trainer.mode=async")
        assert problems[0].startswith("critic.ppo_mini_batch_size (3)")
        assert f"algorithm.adv_estimator={name} takes its greedy baseline" in "".join(problems)
        assert f"algorithm.adv_estimator={name} needs a greedy rollout" in "".join(problems)
        assert problems[-1].startswith(
            f"algorithm.adv_estimator={name} needs actor_rollout_ref.teacher.model.path")
        assert _problems("algorithm.adv_estimator=grpo",
                         "actor_rollout_ref.teacher.model.path=/models/t")[0].startswith(
            "actor_rollout_ref.teacher is read only by algorithm.adv_estimator="
            f"{name} or on_policy_distill (it is 'grpo')")
    finally:
        ADV_ESTIMATORS.unregister(name)


@pytest.mark.parametrize("override, fragment", [
    ("actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=true",
     "training chat template"),
    ("actor_rollout_ref.hybrid_engine=false", "always share processes"),
    ("actor_rollout_ref.model.enable_activation_offload=true", "activation offload"),
    ("actor_rollout_ref.actor.use_torch_compile=true", "actor.use_torch_compile is True"),
    ("actor_rollout_ref.ref.use_torch_compile=true", "ref.use_torch_compile is True"),
    ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
     "sequence parallelism is not supported yet"),
    ("critic.ulysses_sequence_parallel_size=2", "critic.ulysses_sequence_parallel_size is 2"),
])
def test_verl_features_not_here_yet_are_refused_not_ignored(override, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(overrides=[override])
    load_config(overrides=[override.split("=")[0] + "=" + {
        "hybrid_engine": "true", "ulysses_sequence_parallel_size": "1"}.get(
        override.split("=")[0].rsplit(".", 1)[1], "false")])  # the default passes


# ---------------------------------------------------------------------- trainer.mode


def test_off_policy_modes_turn_the_rollout_correction_on_unless_told(caplog):
    assert load_config().actor_rollout_ref.actor.policy_loss.rollout_is is None  # sync
    assert "rollout_is set to 'token'" not in caplog.text
    for mode in ("one_step_off", "async"):
        with caplog.at_level("INFO", logger="agentrl.config.loader"):
            cfg = load_config(overrides=[f"trainer.mode={mode}"])
        assert cfg.actor_rollout_ref.actor.policy_loss.rollout_is == "token"
        assert f"trainer.mode={mode} with off_policy.rollout_correction" in caplog.text  # logged
    cfg = load_config(overrides=["trainer.mode=async", "off_policy.rollout_correction=false"])
    assert cfg.actor_rollout_ref.actor.policy_loss.rollout_is is None
    cfg = load_config(overrides=["trainer.mode=async", f"{A}policy_loss.rollout_is=geometric"])
    assert cfg.actor_rollout_ref.actor.policy_loss.rollout_is == "geometric"


def test_what_the_off_policy_modes_cannot_run_with_is_named():
    R = "actor_rollout_ref.rollout."
    problems = _problems("trainer.mode=one_step_off", "off_policy.max_staleness=2",
                         f"{R}deterministic=true", f"{R}calculate_log_probs=false",
                         f"{R}skip_rollout=true", f"{R}n=2")
    assert any("off_policy.max_staleness must be 1, got 2" in p for p in problems)
    assert any(p.startswith(f"{R}deterministic cannot hold") for p in problems)
    assert any("calculate_log_probs=true" in p for p in problems)
    assert any(p.startswith(f"{R}skip_rollout is not supported") for p in problems)
    for mode in ("one_step_off", "async"):  # agent mode and DAPO's dynamic sampling run
        cfg = load_config(overrides=[f"trainer.mode={mode}", f"{R}agent_function=a.py:run",
                                     "algorithm.filter_groups.enable=true", f"{R}n=2"])
        assert cfg.algorithm.filter_groups.enable and cfg.trainer.mode == mode
    assert _problems("trainer.mode=async", "off_policy.max_staleness=-1") == [
        "off_policy.max_staleness must be >= 0 (0: only the newest version), got -1"]
    assert _problems("trainer.mode=later") == [
        "trainer.mode is 'later'; choose one of sync, one_step_off, async"]
    assert _problems("trainer.watchdog_s=-5") == [
        "trainer.watchdog_s must be >= 0 (0 or null: off), got -5"]
