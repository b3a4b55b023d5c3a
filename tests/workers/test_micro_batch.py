"""Micro-batches by count and by token budget, and the padding window of a micro-batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.protocol import DataProto
from agentrl.workers.micro_batch import (
    MicroBatching,
    count_groups,
    padded_tokens,
    plan_micro_batches,
    row_extents,
    token_budget_groups,
    trim_window,
)

# 3 rows, P = 4, R = 3: prompt lengths 2, 4, 1; response lengths 3, 1, 0
MASK = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 1, 0, 0, 0]])


def _data(mask: torch.Tensor, response_length: int) -> DataProto:
    n = mask.shape[0]
    return DataProto.from_dict(
        tensors={
            "attention_mask": mask,
            "responses": torch.zeros((n, response_length), dtype=torch.long),
        }
    )


def test_row_extents_and_trim_window():
    prompt, response = row_extents(MASK, 3)
    assert prompt.tolist() == [2, 4, 1] and response.tolist() == [3, 1, 0]
    assert trim_window(MASK, 3) == (0, 3)
    assert trim_window(MASK[[0, 2]], 3) == (2, 3)
    assert trim_window(MASK[[2]], 3) == (3, 1)  # no response token: keep one column


def test_count_groups_are_consecutive():
    assert [g.tolist() for g in count_groups(5, 2)] == [[0, 1], [2, 3], [4]]
    assert [g.tolist() for g in count_groups(3, None)] == [[0, 1, 2]]


def test_token_budget_groups_fit_the_budget_and_sort_by_length():
    prompt = np.array([10, 2, 10, 3, 2, 9])  # lengths 30, 4, 28, 6, 4, 28
    response = np.array([20, 2, 18, 3, 2, 19])
    groups = token_budget_groups(prompt, response, max_token_len=60)
    # longest first: [0, 2] costs 2 x 30; [5, 3] costs 2 x (9 + 19); [1, 4] costs 2 x 4
    assert [g.tolist() for g in groups] == [[0, 2], [5, 3], [1, 4]]
    for g in groups:
        assert len(g) * (prompt[g].max() + response[g].max()) <= 60


def test_token_budget_groups_can_be_made_more_numerous():
    prompt, response = np.array([4, 4, 4, 4]), np.array([4, 4, 4, 4])
    assert len(token_budget_groups(prompt, response, 64)) == 1
    groups = token_budget_groups(prompt, response, 64, min_groups=3)
    assert len(groups) == 3 and sorted(np.concatenate(groups).tolist()) == [0, 1, 2, 3]
    groups = token_budget_groups(prompt, response, 64, min_groups=6)
    assert [len(g) for g in groups] == [1, 1, 1, 1, 0, 0]  # empty passes pad the count


def test_a_sequence_longer_than_the_budget_is_an_error():
    with pytest.raises(
        ValueError,
        match="a sequence of 30 tokens does not fit the token budget ppo_max_token_len_per_gpu=20",
    ):
        token_budget_groups(np.array([10]), np.array([20]), 20)


def test_plan_by_count_and_by_budget():
    data = _data(MASK, 3)
    by_count = plan_micro_batches(data, MicroBatching(micro_batch_size=2))
    assert [g.tolist() for g in by_count] == [[0, 1], [2]]
    by_tokens = plan_micro_batches(data, MicroBatching(use_dynamic_bsz=True, max_token_len=10))
    # lengths 5, 5, 1: rows 0 and 1 together cost 2 x (4 + 3) = 14 > 10
    assert [g.tolist() for g in by_tokens] == [[0], [1, 2]]
    assert padded_tokens(data, by_tokens) == 5 + 2 * (4 + 1)


def test_micro_batching_validates_its_sizes():
    with pytest.raises(ValueError, match="micro_batch_size must be >= 1, got 0"):
        MicroBatching(micro_batch_size=0)
    with pytest.raises(ValueError, match="max_token_len must be >= 1"):
        MicroBatching(max_token_len=0)


def test_with_shared_prefixes_the_token_budget_keeps_each_group_together():
    """Two GRPO groups of 4 (prompts of 40 tokens, responses of 4 to 8) and four
    unrelated rows, shuffled: cut longest first, the groups are split by their response
    lengths; in families, each group is one micro-batch and the budget still holds."""
    from agentrl.testing.workers import batch_from_rows, grpo_group_rows

    rng = np.random.default_rng(0)
    loose = [(rng.integers(1, 900, 30).tolist(), rng.integers(1, 900, k).tolist())
             for k in (2, 5, 8, 3)]  # fmt: skip
    rows = grpo_group_rows(4, 40, 8, 900, seed=1) + grpo_group_rows(4, 40, 8, 900, seed=2) + loose
    shuffle = rng.permutation(len(rows))
    data = batch_from_rows([rows[i] for i in shuffle])
    groups = [set(np.flatnonzero(shuffle < 4)), set(np.flatnonzero((shuffle >= 4) & (shuffle < 8)))]
    budget = 4 * 48
    flat = plan_micro_batches(data, MicroBatching(use_dynamic_bsz=True, max_token_len=budget))
    shared = plan_micro_batches(data, MicroBatching(True, max_token_len=budget, shared_prefix=True))
    assert any(group not in [set(g) for g in flat] for group in groups)
    assert all(group in [set(g.tolist()) for g in shared] for group in groups)
    prompt, response = row_extents(data.batch["attention_mask"], data.batch["responses"].shape[1])
    assert all(len(g) * (prompt[g].max() + response[g].max()) <= budget for g in shared)
    assert sorted(np.concatenate(shared).tolist()) == list(range(len(rows)))
