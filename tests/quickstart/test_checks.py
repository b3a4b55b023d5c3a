"""What the quickstart refuses before its first stage: settings out of range, an out dir it
cannot write, and an RL config (the overrides given) that does not validate, all found
before the model is made or SFT runs."""

from __future__ import annotations

import pytest

from agentrl.cli import main
from agentrl.config import ConfigError
from agentrl.quickstart import run_quickstart
from agentrl.quickstart.checks import check_run, setting_problems
from agentrl.quickstart.settings import QuickstartSettings, settings_for
from agentrl.utils.command import DEBUG_ENV


@pytest.fixture
def no_stage(monkeypatch):
    """Any stage that starts fails the test: the model, the data, SFT, RL."""
    import agentrl.models.tiny as tiny
    import agentrl.trainer as trainer
    import agentrl.trainer.sft as sft

    def started(*args, **kwargs):
        raise AssertionError("a stage ran before the checks refused the run")

    monkeypatch.setattr(tiny, "make_tiny_model", started)
    monkeypatch.setattr(sft, "run_sft", started)
    monkeypatch.setattr(trainer, "run_train", started)
    monkeypatch.setenv(DEBUG_ENV, "")  # a leaked --debug would print tracebacks


def test_settings_out_of_range_are_named_by_their_flags():
    assert setting_problems(QuickstartSettings()) == []
    for task in ("search", "retool", "blackjack"):
        assert setting_problems(settings_for(task)) == []
    bad = QuickstartSettings(steps=-1, direct_rate=2.0, sft_lr=0.0, size="huge", n_test=0)
    assert setting_problems(bad) == [
        "--steps must be >= 0, got -1",
        "--direct-rate must be between 0.0 and 1.0, got 2.0",
        "--n-test must be >= 1, got 0",
        "--sft-lr must be > 0, got 0.0",
        "--size is 'huge'; choose one of nano, tiny, small, medium, large",
    ]
    assert setting_problems(QuickstartSettings(sft_examples=100)) == [
        "--sft-examples 100 leaves nothing to train on: the SFT check holds out 128 "
        "conversations (more --sft-examples, or --sft-check 0)"]
    assert setting_problems(QuickstartSettings(sft_examples=100, sft_check=0)) == []
    assert setting_problems(QuickstartSettings(teacher="/nowhere")) == [
        "--teacher /nowhere is not a model directory (no config.json)"]


def test_an_out_dir_that_is_a_file_is_refused_by_its_flag(tmp_path, no_stage):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="^--out-dir .*file is a file, not a directory$"):
        check_run(tmp_path / "file", QuickstartSettings())


def test_the_rl_config_is_checked_before_any_stage(tmp_path, no_stage):
    with pytest.raises(ConfigError, match="unknown config key nosuch"):
        check_run(tmp_path / "a", QuickstartSettings(overrides=("nosuch.key=1",)))
    with pytest.raises(ConfigError, match="trainer.mode is 'bogus'"):
        run_quickstart(tmp_path / "b", QuickstartSettings(overrides=("trainer.mode=bogus",)))
    with pytest.raises(ConfigError, match=r"--n-train 8 is fewer than one batch of 16 \(data"):
        check_run(tmp_path / "d", QuickstartSettings(n_train=8))
    check_run(tmp_path / "e", QuickstartSettings(n_train=8, steps=0))  # no RL, no batch
    check_run(tmp_path / "f", QuickstartSettings(n_train=8, overrides=(
        "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4")))
    with pytest.raises(ConfigError, match="trainer.device is cuda but torch finds no CUDA"):
        check_run(tmp_path / "c", QuickstartSettings(overrides=("trainer.device=cuda",)))
    for task in ("calculator", "search", "retool", "reasoning_gym", "blackjack"):
        check_run(tmp_path / task, settings_for(task))  # every task's own config passes
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(("argv", "says"), [
    (["trainer.mode=bogus"], "trainer.mode is 'bogus'; choose one of"),
    (["actor_rollout_ref.rollout.nosuch=1"], "unknown config key actor_rollout_ref.rollout.nosuch"),
    (["--steps", "-1"], "--steps must be >= 0, got -1"),
    (["--size", "huge"], "--size is 'huge'"),
    (["--rollout", "nope"], "actor_rollout_ref.rollout.name is 'nope'"),
])  # fmt: skip
def test_the_command_refuses_with_one_message_and_exit_2_before_sft(tmp_path, capsys, no_stage,
                                                                    argv, says):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out-dir", str(out), "--seed", "1", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and err.count("\n") <= 3, err
    assert not out.exists()


def test_an_agent_or_reward_function_that_does_not_load_is_named_before_sft(tmp_path, no_stage):
    agent = "actor_rollout_ref.rollout.agent_function"
    with pytest.raises(ConfigError, match=f"{agent}: cannot load 'nowhere/agent.py:run': file "
                                          "not found"):
        check_run(tmp_path, QuickstartSettings(overrides=(f"{agent}=nowhere/agent.py:run",)))
    with pytest.raises(ConfigError, match="custom_reward_function: cannot load"):
        check_run(tmp_path, QuickstartSettings(overrides=(
            f"custom_reward_function.path={tmp_path / 'r.py'}",)))
