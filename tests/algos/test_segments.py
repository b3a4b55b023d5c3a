"""Agent episodes of several rows: the advantage is computed per episode (a GRPO group is
n episodes, not n rows) and broadcast to the episode's other rows; episode weighting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.algos.advantage import compute_advantage
from agentrl.algos.segments import episode_rows, episode_weights
from agentrl.protocol import DataProto


def _batch(rewards, uids, episodes, rows, lengths, T=4):
    mask = torch.zeros(len(rewards), T)
    scores = torch.zeros(len(rewards), T)
    for i, (r, n) in enumerate(zip(rewards, lengths, strict=True)):
        mask[i, :n] = 1
        scores[i, n - 1] = r
    return DataProto.from_dict(
        tensors={"token_level_rewards": scores, "response_mask": mask,
                 "responses": torch.zeros(len(rewards), T, dtype=torch.long),
                 "attention_mask": torch.ones(len(rewards), 2 * T, dtype=torch.long)},
        non_tensors={"uid": np.array(uids, dtype=object),
                     "episode_id": np.array(episodes, dtype=object),
                     "episode_row": np.array(rows, dtype=object)})


def test_grpo_groups_count_episodes_and_segment_rows_take_their_episodes_advantage():
    # one prompt, n=2 episodes: e0 (reward 1) has two extra segment rows, e1 (reward 0) none
    data = _batch([1.0, 0.0, 0.0, 0.0], ["p", "p", "p", "p"], ["e0", "e1", "e0", "e0"],
                  [0, 0, 1, 2], [2, 3, 4, 1])
    compute_advantage(data, "grpo")
    adv = data.batch["advantages"]
    # a group of 2 episodes: (1 - 0.5) / std([1, 0]) = 0.5 / 0.7071
    expected = 0.5 / np.std([1.0, 0.0], ddof=1)
    assert adv[0, :2].tolist() == pytest.approx([expected] * 2, rel=1e-5)
    assert adv[1, :3].tolist() == pytest.approx([-expected] * 3, rel=1e-5)
    assert adv[2].tolist() == pytest.approx([expected] * 4, rel=1e-5)  # e0's earlier segment
    assert adv[3].tolist() == pytest.approx([expected, 0, 0, 0], rel=1e-5)
    assert (adv * (1 - data.batch["response_mask"])).abs().sum() == 0
    # counting the segment rows as group members would give other numbers
    flat = _batch([1.0, 0.0, 0.0, 0.0], ["p"] * 4, ["a", "b", "c", "d"], [0] * 4, [2, 3, 4, 1])
    compute_advantage(flat, "grpo")
    assert flat.batch["advantages"][0, 0] != pytest.approx(expected, rel=1e-3)


def test_one_row_per_episode_is_unchanged():
    args = ([1.0, 0.0, 0.5], ["p", "p", "p"], ["a", "b", "c"], [0, 0, 0], [2, 3, 4])
    data, plain = _batch(*args), _batch(*args)
    del plain.non_tensor_batch["episode_id"], plain.non_tensor_batch["episode_row"]
    compute_advantage(data, "grpo")
    compute_advantage(plain, "grpo")
    assert torch.equal(data.batch["advantages"], plain.batch["advantages"])


def test_an_episode_without_a_reward_row_is_refused():
    with pytest.raises(ValueError, match="exactly one reward row"):
        episode_rows(["a", "a", "b"], [0, 1, 1])


def test_episode_weights_make_every_episode_count_the_same():
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]])
    _, episodes = episode_rows(["a", "b", "b", "c"], [0, 0, 1, 0])
    weights = episode_weights(mask, episodes)
    # a: 2 tokens, b: 8 tokens over two rows; c: none. mean over trained episodes: 5
    assert weights.tolist() == pytest.approx([2.5, 0.625, 0.625, 0.0])
    per_episode = [float(weights[i] * mask[i].sum()) for i in range(4)]
    assert per_episode[0] == pytest.approx(per_episode[1] + per_episode[2])
    same = episode_weights(torch.ones(3, 4), np.arange(3))
    assert same.tolist() == [1.0, 1.0, 1.0]  # equal episodes weigh 1 each: as `token`
