"""Agent batches of several rows per episode: filler rows up to whole mini-batches that
train nothing and leave again; segment_weighting: episode scales each episode's advantages."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.protocol import DataProto
from agentrl.trainer.segment_rows import (
    FILLER_KEY,
    drop_fillers,
    fill_rows,
    row_multiple,
    weight_episodes,
)


def _batch(rows, with_episodes=True):
    B = len(rows)
    non = {"uid": np.array([f"p{i}" for i in range(B)], dtype=object)}
    if with_episodes:
        non["episode_id"] = np.array([f"e{i}" for i in range(B)], dtype=object)
        non["episode_row"] = np.array(rows, dtype=object)
    return DataProto.from_dict(
        tensors={"response_mask": torch.ones(B, 3), "token_level_scores": torch.ones(B, 3),
                 "advantages": torch.ones(B, 3)}, non_tensors=non)


def test_fillers_complete_the_mini_batch_train_nothing_and_leave():
    data = _batch([0, 0, 0, 0, 0])
    filled = fill_rows(data, row_multiple(2, 2))
    assert len(filled) == 8
    assert filled.batch["response_mask"][5:].sum() == 0
    assert filled.batch["token_level_scores"][5:].sum() == 0
    assert len(set(filled.non_tensor_batch["uid"][5:])) == 3  # groups of their own
    back = drop_fillers(filled)
    assert len(back) == 5 and FILLER_KEY not in back.non_tensor_batch
    assert list(back.non_tensor_batch["uid"]) == [f"p{i}" for i in range(5)]


def test_a_batch_without_episodes_is_left_alone():
    data = _batch([0, 0, 0], with_episodes=False)
    assert fill_rows(data, 4) is data and drop_fillers(data) is data


def test_row_multiple_takes_the_critics_mini_batch_too():
    assert row_multiple(2, 4) == 8 and row_multiple(2, 4, 3) == 24


def test_episode_weighting_scales_each_episodes_advantages():
    data = _batch([0, 0, 1])
    data.non_tensor_batch["episode_id"] = np.array(["a", "b", "b"], dtype=object)
    weight_episodes(data)
    # a: 3 tokens, b: 6; mean 4.5 -> a weighs 1.5, b's rows 0.75 each
    assert data.batch["advantages"][:, 0].tolist() == pytest.approx([1.5, 0.75, 0.75])
