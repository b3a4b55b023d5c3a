"""Masked tensor statistics, loss aggregation, entropy, log-probs and the clipped value loss.

Everything takes a ``mask`` of the same shape as the values (1 = the token counts, 0 = it
does not: padding, or tool-response tokens of a multi-turn trajectory). Values under a 0 in
the mask never reach a result, even when they are NaN or inf.

Numbers are verl's (``verl.utils.torch_functional`` and ``verl.trainer.ppo.core_algos``),
with two departures made so that no input of the right shape gives NaN:

- ``masked_var(unbiased=True)`` over a single element returns 0 instead of raising;
- the ``seq-mean-*`` aggregation modes leave out sequences whose mask is all 0 (a failed
  sample masked out of the loss) instead of counting them as 0 or dividing by 0.
"""

from __future__ import annotations

import torch

TOKEN_MEAN = "token-mean"  # the loss aggregation of actor.loss_agg_mode's default
LOSS_AGG_MODES = (
    TOKEN_MEAN,
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
_EPS = 1e-8


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is 1 (NaN/inf under a 0 are ignored)."""
    valid = torch.where(mask.bool(), values, torch.zeros_like(values))
    return (valid * mask).sum() if axis is None else (valid * mask).sum(dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1; 0 when the mask is empty."""
    count = mask.sum() if axis is None else mask.sum(dim=axis)
    return masked_sum(values, mask, axis) / (count + _EPS)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over all positions where ``mask`` is 1 (Bessel-corrected when ``unbiased``)."""
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    count = mask.sum()
    if unbiased and count > 1:
        variance = variance * count / (count - 1)
    return variance


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True
) -> torch.Tensor:
    """``(values - mean) / sqrt(var + 1e-8)`` with statistics over the masked positions.

    Positions outside the mask are transformed too (callers multiply by the mask); with
    ``shift_mean=False`` the mean is added back.
    """
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + _EPS)
    return whitened if shift_mean else whitened + mean


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str) -> torch.Tensor:
    """Reduce a (B, T) per-token loss to a scalar.

    - ``token-mean``: sum over all valid tokens / number of valid tokens (DAPO's choice);
    - ``seq-mean-token-sum``: per sequence the sum over its tokens, then the mean over
      sequences;
    - ``seq-mean-token-mean``: per sequence the mean over its tokens, then the mean over
      sequences (GRPO paper, GSPO);
    - ``seq-mean-token-sum-norm``: sum over all valid tokens / T, the padded length
      (Dr.GRPO's constant normaliser).
    """
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    seq_sums = masked_sum(loss_mat, loss_mask, axis=-1)  # (B,)
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return seq_sums.sum() / loss_mask.shape[-1]
    seq_counts = loss_mask.sum(dim=-1)  # (B,)
    seq_valid = (seq_counts > 0).to(loss_mat.dtype)  # (B,)
    if loss_agg_mode == "seq-mean-token-sum":
        return masked_mean(seq_sums, seq_valid)
    if loss_agg_mode == "seq-mean-token-mean":
        seq_means = seq_sums / seq_counts.clamp(min=1)
        return masked_mean(seq_means, seq_valid)
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; valid: {', '.join(LOSS_AGG_MODES)}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last dim: ``logsumexp(z) - sum(softmax(z) * z)``."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of ``labels`` under ``softmax(logits)``: (..., V), (...) -> (...)."""
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = TOKEN_MEAN,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss; returns ``(loss, clip_fraction)``.

    ``0.5 * agg(max((v - R)^2, (clip(v, v_old - c, v_old + c) - R)^2))`` where ``v`` are the
    new predictions, ``v_old`` the values from rollout time and ``R`` the returns
    (Schulman et al. 2017, as in OpenAI baselines). The clip fraction is the share of valid
    tokens where the clipped term is the larger one.
    """
    vpred_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    losses_unclipped = (vpreds - returns) ** 2  # (B, T)
    losses_clipped = (vpred_clipped - returns) ** 2  # (B, T)
    loss = 0.5 * agg_loss(
        torch.maximum(losses_unclipped, losses_clipped), response_mask, loss_agg_mode
    )
    clipfrac = masked_mean(torch.gt(losses_clipped, losses_unclipped).float(), response_mask)
    return loss, clipfrac
