"""reward_model.enable: a training step is scored by the learned reward model (its score is
the reward, as in verl), not by the rule."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from agentrl.trainer import PPOTrainer


@pytest.mark.slow
def test_a_training_step_is_scored_by_the_reward_model(make_config, tiny_model_dir, tmp_path):
    rm_dir = tmp_path / "rm"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        tiny_model_dir, num_labels=1, pad_token_id=tokenizer.pad_token_id)
    torch.nn.init.normal_(model.score.weight, std=1.0)
    model.save_pretrained(rm_dir)
    tokenizer.save_pretrained(rm_dir)
    trainer = PPOTrainer(make_config("reward_model.enable=true",
                                     f"reward_model.model.path={rm_dir}",
                                     "trainer.total_training_steps=1"))
    try:
        (metrics,) = trainer.fit()
    finally:
        trainer.close()
    # the rule score of this task is 0 or 1 per trajectory (means in quarters for 4 of
    # them); the reward model's is a real number
    assert metrics["critic/score/mean"] not in (0.0, 0.25, 0.5, 0.75, 1.0)
    assert metrics["critic/score/min"] < metrics["critic/score/max"]
