"""Masked statistics, loss aggregation, entropy, log-probs and the clipped value loss."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.algos import (
    agg_loss,
    compute_value_loss,
    entropy_from_logits,
    logprobs_from_logits,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)

NAN = float("nan")


def test_masked_mean_sum_ignore_masked_values_even_nan():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, NAN, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    # valid: 1, 2, 4, 6 -> sum 13, mean 13 / 4 = 3.25
    assert masked_sum(values, mask).item() == pytest.approx(13.0)
    assert masked_mean(values, mask).item() == pytest.approx(3.25)
    # per row: (1 + 2) / 2 = 1.5, (4 + 6) / 2 = 5
    assert torch.allclose(masked_mean(values, mask, axis=-1), torch.tensor([1.5, 5.0]))


def test_masked_mean_of_empty_mask_is_zero():
    assert masked_mean(torch.ones(2, 3), torch.zeros(2, 3)).item() == 0.0


def test_masked_var_and_whiten():
    values = torch.tensor([[1.0, 2.0, 99.0], [4.0, 99.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    # valid 1, 2, 4, 6: mean 3.25; squared deviations 5.0625 + 1.5625 + 0.5625 + 7.5625 = 14.75
    assert masked_var(values, mask, unbiased=False).item() == pytest.approx(14.75 / 4)
    assert masked_var(values, mask).item() == pytest.approx(14.75 / 3)
    std = math.sqrt(14.75 / 3 + 1e-8)
    expected = torch.tensor([[1.0, 2.0], [4.0, 6.0]]).sub(3.25).div(std)
    got = masked_whiten(values, mask)
    assert torch.allclose(got[mask.bool()], expected.flatten(), atol=1e-6)
    unshifted = masked_whiten(values, mask, shift_mean=False)
    assert torch.allclose(unshifted[mask.bool()], expected.flatten() + 3.25, atol=1e-6)


def test_masked_var_single_element_is_zero_not_nan():
    # verl raises here; we return 0 so that whitening one token gives 0, not NaN.
    values, mask = torch.tensor([[5.0, 7.0]]), torch.tensor([[1, 0]])
    assert masked_var(values, mask).item() == 0.0
    assert masked_whiten(values, mask)[0, 0].item() == 0.0


LOSS = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 5.0, 6.0, 9.0], [7.0, 7.0, 7.0, 7.0]])
MASK = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])  # row 2: a failed sample


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 valid tokens
        ("seq-mean-token-sum", 3.5),  # rows: 1 + 2 = 3 and 4; empty row left out: 7 / 2
        ("seq-mean-token-mean", 2.75),  # rows: 3 / 2 = 1.5 and 4 / 1 = 4; (1.5 + 4) / 2
        ("seq-mean-token-sum-norm", 1.75),  # (3 + 4) / T with T = 4
    ],
)
def test_agg_loss_modes(mode, expected):
    assert agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_agg_loss_all_masked_is_zero(mode):
    assert agg_loss(torch.full((2, 3), NAN), torch.zeros(2, 3), mode).item() == 0.0


def test_agg_loss_unknown_mode_lists_valid():
    with pytest.raises(ValueError, match="token-mean.*seq-mean-token-sum-norm"):
        agg_loss(LOSS, MASK, "token-sum")


def test_entropy_from_logits():
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)]])
    # uniform over 2: ln 2; probabilities 1/4, 3/4: -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.5623351
    expected = torch.tensor([math.log(2.0), 0.5623351446])
    assert torch.allclose(entropy_from_logits(logits), expected, atol=1e-6)
    big = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0)) * 4
    reference = torch.distributions.Categorical(logits=big).entropy()
    assert torch.allclose(entropy_from_logits(big), reference, atol=1e-5)


def test_logprobs_from_logits():
    logits = torch.tensor([[0.0, math.log(3.0)], [2.0, 2.0]])
    labels = torch.tensor([1, 0])
    # softmax([0, ln 3]) = [1/4, 3/4] -> ln 0.75; uniform -> ln 0.5
    expected = torch.tensor([math.log(0.75), math.log(0.5)])
    assert torch.allclose(logprobs_from_logits(logits, labels), expected, atol=1e-6)


def test_compute_value_loss_clips_and_counts():
    vpreds = torch.tensor([[1.0, 2.4, 50.0]])
    values = torch.tensor([[0.5, 2.5, 0.0]])
    returns = torch.tensor([[2.0, 1.0, 5.0]])
    mask = torch.tensor([[1, 1, 0]])
    # t0: clip(1.0, 0.3, 0.7) = 0.7; (1 - 2)^2 = 1 < (0.7 - 2)^2 = 1.69 -> 1.69, clipped
    # t1: clip(2.4, 2.3, 2.7) = 2.4; both (2.4 - 1)^2 = 1.96 -> 1.96, not clipped
    # loss = 0.5 * (1.69 + 1.96) / 2 = 0.9125; clip fraction 1 / 2
    loss, clipfrac = compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.2)
    assert loss.item() == pytest.approx(0.9125)
    assert clipfrac.item() == pytest.approx(0.5)
    loss_sum, _ = compute_value_loss(
        vpreds, returns, values, mask, cliprange_value=0.2, loss_agg_mode="seq-mean-token-sum"
    )
    assert loss_sum.item() == pytest.approx(0.5 * (1.69 + 1.96))
