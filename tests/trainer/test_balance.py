"""trainer.balance_batch: equal-size parts with nearly equal token sums (agentrl/trainer/balance.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agentrl.protocol import DataProto
from agentrl.trainer.balance import balance_batch, balanced_order, part_sums


@given(st.integers(1, 4).flatmap(
    lambda w: st.tuples(st.just(w), st.lists(st.integers(1, 500), min_size=w, max_size=8 * w)
                        .filter(lambda xs: len(xs) % w == 0))))
def test_order_is_a_permutation_into_equal_parts_no_worse_than_the_input(case):
    world_size, seqlens = case
    order = balanced_order(seqlens, world_size)
    assert sorted(order) == list(range(len(seqlens)))
    balanced = part_sums([seqlens[i] for i in order], world_size)
    spread = max(balanced) - min(balanced)
    # greedy longest-first: the spread is at most the longest row
    assert spread <= max(seqlens)


def test_a_skewed_batch_is_balanced_and_rows_travel_with_their_uid():
    lengths = [100, 90, 80, 70, 10, 9, 8, 7]  # contiguous halves: 340 vs 34 tokens
    mask = torch.zeros(8, 128, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    data = DataProto.from_dict(
        tensors={"attention_mask": mask},
        non_tensors={"uid": np.array([f"u{i}" for i in range(8)], dtype=object)},
    )
    out, metrics = balance_batch(data, 2)
    assert metrics["global_seqlen/minmax_diff"] == 306
    assert metrics["global_seqlen/balanced_max"] - metrics["global_seqlen/balanced_min"] <= 20
    for row in range(8):  # every row still carries its own uid
        i = int(out.non_tensor_batch["uid"][row][1:])
        assert out.batch["attention_mask"][row].sum() == lengths[i]
    same, _ = balance_batch(data, 1)
    assert same is data


def test_rows_that_do_not_split_evenly_are_an_error():
    with pytest.raises(ValueError, match="cannot split 3 rows into 2"):
        balanced_order([1, 2, 3], 2)
