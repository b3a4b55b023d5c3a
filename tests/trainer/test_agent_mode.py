"""rollout.agent_function: GRPO steps on CPU where each sample is a user's agent function
talking to the policy through the OpenAI client; a raising and a hanging agent fail only
their own samples; in trainer.mode=async the producer runs the episodes, and those a weight
update reaches mid-episode keep their earlier calls (partial episodes)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from agentrl.trainer import PPOTrainer, run_train

AGENT = Path(__file__).parent.parent / "fixtures" / "agent_function.py"
MULTI_CALL_AGENT = Path(__file__).parent.parent / "fixtures" / "multi_call_agent.py"


@pytest.mark.slow
def test_two_grpo_steps_in_agent_mode(make_config):
    cfg = make_config(f"actor_rollout_ref.rollout.agent_function={AGENT}:run",
                      "actor_rollout_ref.rollout.agent_timeout=3",
                      "actor_rollout_ref.rollout.multi_turn.enable=false",
                      "data.shuffle=false", "trainer.total_training_steps=2")
    trainer = PPOTrainer(cfg)
    try:
        history = trainer.fit()
    finally:
        trainer.close()
    assert [m["training/global_step"] for m in history] == [1.0, 2.0]
    for metrics in history:  # rows 0,1 then 2,3, two samples each: one row fails per step
        assert metrics["rollout/agent_errors"] == 2
        assert metrics["training/failed"] == 2
        assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] >= 0
        assert 0.0 <= metrics["critic/score/max"] <= 1.0


@pytest.mark.slow
def test_agent_mode_runs_async_with_partial_episodes_and_bounded_staleness(
    make_config, tmp_path, ray_cluster  # Ray up: the run neither starts nor stops it
):
    steps, batch, n = 4, 2, 2
    history = run_train(make_config(
        "trainer.mode=async", "off_policy.max_staleness=1",
        f"actor_rollout_ref.rollout.agent_function={MULTI_CALL_AGENT}:run",
        "actor_rollout_ref.rollout.agent_timeout=60",
        "actor_rollout_ref.rollout.multi_turn.enable=false", "data.max_response_length=64",
        "data.shuffle=false", f"trainer.total_training_steps={steps}",
        f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
    ))  # fmt: skip
    assert [m["training/global_step"] for m in history] == [1.0, 2.0, 3.0, 4.0]
    assert all(m["rollout/agent_errors"] == 0 for m in history)
    assert all("actor/rollout_is_mean" in m for m in history)  # the correction ran per token
    rows = []
    for step in range(1, steps + 1):
        path = tmp_path / "rollouts" / f"{step}.jsonl"
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    # every model call's tokens carry a version; staleness is the oldest token's
    assert all(row["policy_versions"] for row in rows)
    assert all(row["step"] - 1 - min(row["policy_versions"]) <= 1 for row in rows)
    # episodes a weight update reached mid-episode were kept whole and counted
    partial = [row for row in rows if len(row["policy_versions"]) > 1]
    assert partial, "no episode spanned a weight update"
    assert sum(m["async/partial_episodes"] for m in history) == len(partial)
    # every prompt of the data order trained once, n episodes each
    assert Counter(r["uid"] for r in rows) == {f"{b}-{i}": n for b in range(1, steps + 1)
                                               for i in range(batch)}


REWRITING_AGENT = Path(__file__).parent.parent / "fixtures" / "rewriting_agent.py"


@pytest.mark.slow
def test_a_rewritten_history_trains_both_segments(make_config):
    history = run_train(make_config(
        f"actor_rollout_ref.rollout.agent_function={REWRITING_AGENT}:run",
        "actor_rollout_ref.rollout.agent_timeout=60",
        "actor_rollout_ref.rollout.multi_turn.enable=false", "data.max_response_length=64",
        "actor_rollout_ref.actor.segment_weighting=episode",
        "data.shuffle=false", "trainer.total_training_steps=1",
    ))  # fmt: skip
    metrics = history[0]
    episodes = metrics["rollout/requests"]
    assert metrics["agent/segments"] == 2 * episodes  # each session forked once
    assert metrics["rollout/agent_rewrites"] == episodes
    # every policy token of both segments trained once
    assert metrics["agent/tokens_trained"] == metrics["agent/tokens_recorded"] > 0
    assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] >= 0
