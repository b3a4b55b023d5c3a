"""`agentrl quickstart`: evaluation metrics, the recipe, and the whole pipeline on tiny budgets."""

from __future__ import annotations

import argparse
import json
import logging

import pytest

from agentrl.config import load_config
from agentrl.quickstart import (
    RECIPE_CONFIG,
    RECIPE_TOOLS,
    add_arguments,
    reward_curve,
    rl_model_dir,
    run_quickstart,
    trajectory_metrics,
)
from agentrl.tools import load_tool_schemas, load_tools


def row(calls: int, score: float, final: str, tool_errors=None, parse_errors=0) -> dict:
    return {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": final}],
        "metrics": {
            "tool_calls": {"calculator": calls} if calls else {},
            "tool_errors": tool_errors or {},
            "parse_errors": parse_errors,
        },
        "score": score,
        "num_turns": 2 + 2 * calls,
    }


def test_trajectory_metrics():
    rows = [
        row(1, 1.0, "<answer>12</answer>"),
        row(1, 0.0, "<answer>13</answer>", tool_errors={"syntax": 1}),
        row(0, 0.0, "I don't know", parse_errors=1),
        row(2, 0.0, "no tag"),
    ]
    assert trajectory_metrics(rows) == {
        "trajectories": 4.0,
        "accuracy": 0.25,
        "tool_call_rate": 0.75,
        "well_formed_call_rate": 0.5,
        "answer_rate": 0.5,
        "turns/mean": (4 + 4 + 2 + 6) / 4,
    }
    with pytest.raises(ValueError, match="no trajectories"):
        trajectory_metrics([])


def test_recipe_is_valid_and_differs_from_the_defaults():
    cfg = load_config(RECIPE_CONFIG, ["actor_rollout_ref.model.path=m", "data.train_files=t"])
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.actor_rollout_ref.rollout.multi_turn.enable
    assert 4 <= cfg.actor_rollout_ref.rollout.n <= 8
    assert "hf_model" in cfg.actor_rollout_ref.actor.checkpoint.save_contents
    assert list(load_tools(RECIPE_TOOLS)) == ["calculator"]
    (schema,) = load_tool_schemas(RECIPE_TOOLS)
    assert schema["function"]["parameters"]["required"] == ["expression"]


def test_reward_curve_and_missing_export(tmp_path):
    history = [{"critic/score/mean": 0.25, "actor/pg_loss": -0.1, "other": 3.0}, {}]
    assert reward_curve(history) == [
        {"step": 1, "critic/score/mean": 0.25, "actor/pg_loss": -0.1},
        {"step": 2},
    ]
    cfg = load_config(RECIPE_CONFIG, [f"trainer.default_local_dir={tmp_path}"])
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    with pytest.raises(FileNotFoundError, match="global_step_3/actor/huggingface"):
        rl_model_dir(cfg)


def test_arguments():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--out-dir", "o", "--steps", "2", "data.max_response_length=64"])
    assert (args.out_dir, args.steps, args.size, args.overrides) == (
        "o",
        2,
        "tiny",
        ["data.max_response_length=64"],
    )
    assert (args.difficulty, args.batch_size) == ("basic", 8)


@pytest.mark.slow
def test_quickstart_end_to_end_on_tiny_budgets(tmp_path, caplog):
    caplog.set_level(logging.INFO)  # the run's log file gets what the root logger lets through
    report = run_quickstart(
        tmp_path / "qs",
        steps=1,
        size="tiny",
        sft_examples=16,
        sft_epochs=1,
        n_train=8,
        n_test=4,
        overrides=[
            "data.train_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
            "data.max_response_length=96",
        ],
    )
    assert report == json.loads((tmp_path / "qs" / "report.json").read_text())
    assert set(report["timing_s"]) == {"model", "data", "sft", "eval_sft", "rl", "eval_rl", "total"}
    assert all(v > 0 for v in report["timing_s"].values())
    assert (
        report["timing_s"]["total"]
        >= sum(v for k, v in report["timing_s"].items() if k != "total") - 1e-6
    )
    sft = report["sft"]
    assert sft["examples"] == 16 and sft["steps"] == 2
    assert sft["loss_after"] < sft["loss_before"]
    for name in ("eval_sft", "eval_rl"):
        metrics = report[name]
        assert metrics["trajectories"] == 4
        for key in ("accuracy", "tool_call_rate", "well_formed_call_rate", "answer_rate"):
            assert 0.0 <= metrics[key] <= 1.0
        assert metrics["well_formed_call_rate"] <= metrics["tool_call_rate"]
        assert metrics["turns/mean"] >= 2
    (step,) = report["rl"]
    assert step["step"] == 1
    assert 0.0 <= step["critic/score/mean"] <= 1.0
    log = (tmp_path / "qs" / "quickstart.log").read_text()
    assert "quickstart stage eval_rl" in log
    assert (tmp_path / "qs" / "eval_rl.jsonl").is_file()
