"""The quickstart's settings (a task's defaults, its rollout variant's, the flags given) and
the RL stage's config they make."""

from __future__ import annotations

import argparse

from agentrl.quickstart import add_arguments
from agentrl.quickstart.__init__ import settings_from_args
from agentrl.quickstart.settings import QuickstartSettings, rl_config, settings_for
from agentrl.tasks.quickstart import TaskData


def test_a_teacher_makes_the_rl_stage_distil_from_it(tmp_path):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = settings_from_args(parser.parse_args(["--teacher", str(tmp_path / "t")]))
    data = TaskData(tmp_path / "sft.jsonl", tmp_path / "train.parquet", tmp_path / "test.parquet", {})
    cfg = rl_config(tmp_path / "m", data, tmp_path / "tools.yaml", tmp_path / "rl", settings)
    assert cfg.algorithm.adv_estimator == "on_policy_distill"
    assert cfg.actor_rollout_ref.teacher.model.path == str(tmp_path / "t")
    plain = rl_config(tmp_path / "m", data, tmp_path / "tools.yaml", tmp_path / "rl",
                      QuickstartSettings())
    assert plain.algorithm.adv_estimator == "grpo" and not plain.actor_rollout_ref.teacher.model.path


def test_a_game_task_runs_with_its_interaction_and_no_tool(tmp_path):
    data = TaskData(tmp_path / "sft.jsonl", tmp_path / "d" / "train.parquet",
                    tmp_path / "d" / "test.parquet", {})
    game = rl_config(tmp_path / "m", data, None, tmp_path / "rl", settings_for("blackjack"))
    multi_turn = game.actor_rollout_ref.rollout.multi_turn
    assert multi_turn.tool_config_path is None
    assert multi_turn.interaction_config_path == str(tmp_path / "d" / "interaction.yaml")
    assert game.trainer.total_training_steps == 40
    calc = rl_config(tmp_path / "m", data, tmp_path / "tools.yaml", tmp_path / "rl",
                     QuickstartSettings())
    assert calc.actor_rollout_ref.rollout.multi_turn.interaction_config_path is None
    assert calc.actor_rollout_ref.rollout.multi_turn.tool_config_path == str(tmp_path / "tools.yaml")


def test_the_tiny_size_brings_its_own_learning_rates_and_a_flag_still_wins():
    parser = argparse.ArgumentParser()
    add_arguments(parser)

    def settings(*argv: str) -> QuickstartSettings:
        return settings_from_args(parser.parse_args(list(argv)))

    assert (settings().sft_lr, settings().rl_lr) == (3e-3, None)  # nano: the recipe's
    tiny = settings("--size", "tiny")  # e.g. the distillation recipe's teacher, on hf
    assert (tiny.sft_lr, tiny.rl_lr) == (1e-3, 1.5e-4)
    assert settings("--size", "tiny", "--sft-lr", "2e-3").sft_lr == 2e-3
    vllm = settings("--rollout", "vllm")  # the variant's size, and so its lrs
    assert (vllm.size, vllm.untied, vllm.sft_lr, vllm.rl_lr) == ("tiny", True, 1e-3, 1.5e-4)
    assert settings("--rollout", "vllm", "--size", "nano").sft_lr == 3e-3
