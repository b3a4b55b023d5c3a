"""rollout.agent_function: GRPO steps on CPU where each sample is a user's agent function
talking to the policy through the OpenAI client; a raising and a hanging agent fail only
their own samples."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agentrl.trainer import PPOTrainer

AGENT = Path(__file__).parent.parent / "fixtures" / "agent_function.py"


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
