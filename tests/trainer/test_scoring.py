"""The scoring stage's functions: uids, failed rollouts as their own group, the reward
(model and function) and ReMax's greedy baseline, on hand-made batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.algos import compute_advantage
from agentrl.protocol import DataProto
from agentrl.trainer.scoring import greedy_baseline, isolate_failed, prompt_batch, score


def _group_batch(states):
    rewards = torch.zeros(len(states), 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.5, 0.0])[: len(states)]
    mask = torch.ones(len(states), 3)
    for i, state in enumerate(states):
        if state == "failed":
            mask[i] = 0
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": ["a"] * len(states), "request_state": states},
    )


def test_failed_trajectories_leave_their_group_statistics():
    data = _group_batch(["completed", "completed", "completed", "failed"])
    assert isolate_failed(data) == 1
    assert list(data.non_tensor_batch["uid"]) == ["a", "a", "a", "a/failed-3"]
    adv = compute_advantage(data, "grpo").batch["advantages"]
    # the same as a group of the three finished samples alone: rewards 1, 0, 0.5
    alone = compute_advantage(_group_batch(["completed"] * 3), "grpo").batch["advantages"]
    torch.testing.assert_close(adv[:3], alone)
    assert adv[:3, 0].tolist() == pytest.approx([1.0, -1.0, 0.0], abs=1e-5)  # std 0.5
    assert adv[3].abs().sum() == 0  # masked out of the loss
    assert isolate_failed(_group_batch(["completed", "completed"])) == 0


def test_prompt_batch_uids_are_the_step_and_row_and_carry_the_round():
    batch_dict = {"input_ids": torch.zeros(3, 2, dtype=torch.long),
                  "index": np.array([7, 8, 9], dtype=object)}  # fmt: skip
    first = prompt_batch(batch_dict, step=4, round_=0, temperature=0.7)
    assert list(first.non_tensor_batch["uid"]) == ["4-0", "4-1", "4-2"]
    assert first.meta_info == {"temperature": 0.7, "global_steps": 4}
    again = prompt_batch(batch_dict, step=4, round_=2, temperature=1.0)
    assert list(again.non_tensor_batch["uid"]) == ["4.2-0", "4.2-1", "4.2-2"]


class _RewardFn:
    def __init__(self, totals):
        self.totals = totals
        self.seen = []

    def __call__(self, data, return_dict=False):
        assert return_dict
        self.seen.append(data)
        tensor = torch.zeros(len(data), 2)
        tensor[:, -1] = torch.tensor(self.totals[: len(data)])
        return {"reward_tensor": tensor,
                "reward_extra_info": {"acc": [t > 0 for t in self.totals[: len(data)]]}}


class _RewardModel:
    def compute_rm_score(self, data):
        return DataProto.from_dict(tensors={"rm_scores": torch.full((len(data), 2), 0.5)})


def test_score_adds_the_reward_model_first_then_the_reward_and_its_extra_keys():
    data = DataProto.from_dict(tensors={"responses": torch.zeros(2, 2)})
    reward_fn = _RewardFn([1.0, 0.0])
    scored = score(data, reward_fn, _RewardModel())
    assert "rm_scores" in reward_fn.seen[0].batch.keys()  # the function saw the model's score
    assert scored.batch["token_level_scores"][:, -1].tolist() == [1.0, 0.0]
    assert list(scored.non_tensor_batch["reward_extra_info"]) == [{"acc": True}, {"acc": False}]
    plain = score(DataProto.from_dict(tensors={"responses": torch.zeros(2, 2)}), _RewardFn([0, 1]))
    assert "rm_scores" not in plain.batch.keys()


class _GreedyActor:
    def __init__(self):
        self.batches = []

    def generate_sequences(self, batch):
        self.batches.append(batch)
        return batch


def test_greedy_baseline_is_one_validation_sample_per_prompt_repeated_n_times():
    batch = DataProto.from_dict(tensors={"input_ids": torch.zeros(2, 3)},
                                meta_info={"temperature": 1.0})  # fmt: skip
    actor = _GreedyActor()
    baseline = greedy_baseline(actor, _RewardFn([1.0, 0.25]), batch, n_rows=6)
    assert baseline.tolist() == [1.0, 1.0, 1.0, 0.25, 0.25, 0.25]
    assert actor.batches[0].meta_info["validate"] is True  # val_kwargs: greedy, n = 1
    assert "validate" not in batch.meta_info  # the training batch is untouched


def test_an_unscored_sample_is_a_failed_row_never_a_zero_in_its_group():
    """A judge that failed on row 3 (SCORE_FAILED_KEY): the row leaves its group, trains
    nothing and counts in training/score_failed; the others' advantages are those of their
    group alone."""
    from agentrl.protocol import SCORE_FAILED_KEY
    from agentrl.trainer.metrics import _score_failed

    data = _group_batch(["completed"] * 4)
    data.batch["responses"] = torch.zeros(4, 3, dtype=torch.long)

    def judged(batch, return_dict):
        tensor = torch.zeros(4, 3)
        tensor[:, -1] = torch.tensor([1.0, 0.0, 0.5, 0.0])
        return {"reward_tensor": tensor, "reward_extra_info": {
            "judge_score": [1.0, 0.0, 0.5, None],
            SCORE_FAILED_KEY: [None, None, None, "judge: ReadTimeout"]}}

    out = score(data, judged)
    assert list(out.non_tensor_batch["request_state"]) == ["completed"] * 3 + ["failed"]
    assert out.non_tensor_batch["uid"][3] == "a/failed-3"
    assert out.batch["response_mask"][3].sum() == 0 and out.batch["token_level_scores"][3].sum() == 0
    assert _score_failed(out) == 1
    out.batch["token_level_rewards"] = out.batch["token_level_scores"]
    adv = compute_advantage(out, "grpo").batch["advantages"]
    alone = compute_advantage(_group_batch(["completed"] * 3), "grpo").batch["advantages"]
    torch.testing.assert_close(adv[:3], alone)
    assert adv[3].abs().sum() == 0
