"""`agentrl train --config X.yaml key=value ...` through the command's parser."""

from __future__ import annotations

import argparse
import json

import yaml

from agentrl.trainer import main as train_main


def _run(argv):
    parser = argparse.ArgumentParser(prog="agentrl train")
    train_main.add_arguments(parser)
    return train_main.run(parser.parse_args(argv))


def test_train_command_runs_a_recipe_with_overrides(make_config, tmp_path):
    base = make_config()  # the test recipe: tiny model, calculator, GRPO
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({
        "data": {"train_files": base.data.train_files, "train_batch_size": 2,
                 "max_prompt_length": 768, "max_response_length": 16},
        "actor_rollout_ref": {
            "model": {"path": base.actor_rollout_ref.model.path},
            "actor": {"ppo_mini_batch_size": 2},
            "rollout": {"n": 2, "multi_turn": {
                "enable": True,
                "tool_config_path": base.actor_rollout_ref.rollout.multi_turn.tool_config_path}},
        },
        "algorithm": {"adv_estimator": "grpo"},
        "trainer": {"logger": ["file"], "val_before_train": False},
    }))  # fmt: skip
    out = tmp_path / "run"
    assert (
        _run(
            [
                "--config",
                str(recipe),
                "trainer.total_training_steps=1",
                f"+trainer.default_local_dir={out}",
            ]
        )
        == 0
    )
    (row,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and row["response_length/max"] <= 16
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "1"


def test_train_command_reports_config_problems(tmp_path, capsys):
    assert _run(["trainer.total_epochs=0"]) == 2
    assert "trainer.total_epochs must be >= 1" in capsys.readouterr().err
    assert _run([f"trainer.default_local_dir={tmp_path}"]) == 2  # no data, no model
    err = capsys.readouterr().err
    assert "data.train_files must name" in err and "actor_rollout_ref.model.path must" in err
