"""DAPO dynamic sampling (algorithm.filter_groups): groups without variance are dropped and
more batches generated until train_batch_size prompts remain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from agentrl.config import ConfigError
from agentrl.protocol import DataProto
from agentrl.trainer import PPOTrainer
from agentrl.trainer.dynamic_sampling import first_prompts, informative_rows, metric_values

REWARD = Path(__file__).parent.parent / "fixtures" / "alternating_reward.py"


def _batch(uids, scores, extra=None):
    scores_t = torch.zeros(len(uids), 4)
    scores_t[:, -1] = torch.tensor(scores, dtype=torch.float32)
    non_tensors = {"uid": np.array(uids, dtype=object)}
    if extra is not None:
        non_tensors["reward_extra_info"] = np.array(extra, dtype=object)
    return DataProto.from_dict(tensors={"token_level_scores": scores_t}, non_tensors=non_tensors)


def test_groups_with_spread_are_kept_whole_and_failed_rows_ignored():
    data = _batch(["a", "a", "b", "b", "c", "c/failed-5", "d", "d"],
                  [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.25])
    keep, kept, seen = informative_rows(data, "seq_reward")
    # a varies; b does not; c's only finished sample cannot vary (its failed row is ignored)
    assert keep.tolist() == [True, True, False, False, False, False, True, True]
    assert (kept, seen) == (2, 4)
    assert list(first_prompts(data[keep], 1).non_tensor_batch["uid"]) == ["a", "a"]


def test_the_metric_comes_from_the_score_results():
    extra = [{"acc": 1.0, "score": 0.5}, {"acc": 0.0, "score": 0.5}]
    data = _batch(["a", "a"], [0.5, 0.5], extra)
    assert metric_values(data, "acc").tolist() == [1.0, 0.0]
    assert metric_values(data, "score").tolist() == [0.5, 0.5]
    assert metric_values(_batch(["a"], [0.25]), "acc").tolist() == [0.25]  # plain numbers
    with pytest.raises(KeyError, match="'pass_rate' is not a key"):
        metric_values(data, "pass_rate")


def _config(make_config, *extra):
    return make_config(
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
        f"custom_reward_function.path={REWARD}", "custom_reward_function.name=compute_score",
        "data.shuffle=false", "trainer.total_training_steps=1", *extra,
    )  # fmt: skip


@pytest.mark.slow
def test_a_second_generation_batch_fills_the_step(make_config):
    # rows 0, 1 then 2, 3: each batch of 2 prompts has one that varies (rows 0 and 3)
    trainer = PPOTrainer(_config(make_config))
    try:
        (metrics,) = trainer.fit()
    finally:
        trainer.close()
    assert metrics["train/num_gen_batches"] == 2
    assert metrics["train/num_prompts_kept"] == 2 and metrics["train/kept_prompt_ratio"] == 0.5
    assert metrics["train/num_prompts_dropped"] == 2
    assert metrics["critic/score/mean"] == 0.5  # only the groups that vary: 0, 1 each
    assert metrics["actor/grad_norm"] > 0.0  # the kept groups trained


def test_filter_groups_config_errors(make_config):
    with pytest.raises(ConfigError, match="needs actor_rollout_ref.rollout.n >= 2"):
        make_config("algorithm.filter_groups.enable=true", "actor_rollout_ref.rollout.n=1",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=2")


@pytest.mark.slow
def test_too_many_generation_batches_is_an_error_naming_the_key(make_config):
    trainer = PPOTrainer(_config(make_config, "algorithm.filter_groups.max_num_gen_batches=1"))
    try:
        with pytest.raises(RuntimeError, match="max_num_gen_batches=1"):
            trainer.fit()
    finally:
        trainer.close()
