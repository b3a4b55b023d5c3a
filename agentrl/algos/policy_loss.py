"""Policy-gradient losses, registered by name (``actor.policy_loss.loss_mode``).

Every loss has one signature::

    fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
       config=None, rollout_log_probs=None) -> (loss, metrics)

All tensors are (B, T); ``config`` is the actor sub-config (read once by
``policy_loss_settings``); ``metrics`` always has ``actor/pg_clipfrac``, ``actor/ppo_kl``
(the k1 estimate of KL(pi_old || pi) on valid tokens) and ``actor/pg_clipfrac_lower``,
plus the rollout-correction metrics when a correction is on. With ``r = pi / pi_old``
(``log r`` clamped to [-20, 20]) and advantage ``A``:

- ``vanilla``: PPO clip (Schulman et al. 2017, arXiv:1707.06347)
  ``max(-A r, -A clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high))`` with asymmetric
  bounds (DAPO clip-higher, Yu et al. 2025, arXiv:2503.14476) and, for ``A < 0``, the
  dual clip ``min(., -A clip_ratio_c)`` (Ye et al. 2020, arXiv:1912.09729).
- ``gspo``: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv:2507.18071):
  the ratio is the sequence's geometric mean ``s = exp(mean_t log r_t)``, used per token as
  ``sg[s] * pi / sg[pi]`` (GSPO-token) and clipped; always aggregated ``seq-mean-token-mean``.
- ``cispo``: Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv:2506.13585):
  ``-sg(clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high)) * A * log pi``: every token keeps
  a gradient, only the weight is clipped. The loss value is therefore not PPO's.
- ``gpg``: Group Policy Gradient (Chu et al. 2025, arXiv:2504.02546): ``-A log pi``.

The per-token losses are multiplied by the rollout importance weights and aggregated over
the (possibly rejection-masked) loss mask; see ``agentrl.algos.rollout_correction``.
Numbers are verl's for vanilla and gspo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from agentrl.algos.core import TOKEN_MEAN, agg_loss, masked_mean
from agentrl.algos.rollout_correction import policy_loss_settings, rollout_correction
from agentrl.utils.registry import Registry

Tensor = torch.Tensor
PolicyLossFn = Callable[..., tuple[Tensor, dict[str, Tensor]]]
POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator registering a policy loss under ``name`` (duplicates raise)."""
    return POLICY_LOSSES.register(name)


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The policy loss registered as ``name``; an unknown name raises listing the valid ones."""
    return POLICY_LOSSES.get(name)


def _log_ratio(log_prob: Tensor, old_log_prob: Tensor) -> Tensor:
    return torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)  # (B, T)


def _open(config: Any, old_log_prob: Tensor, rollout_log_probs: Tensor | None,
          response_mask: Tensor) -> tuple[Any, Tensor | None, Tensor, dict[str, Tensor]]:
    """Every policy loss's opening: its settings, then the rollout correction's IS weights,
    the loss mask it leaves (rejected tokens out) and its metrics."""
    s = policy_loss_settings(config)
    weights, mask, metrics = rollout_correction(old_log_prob, rollout_log_probs, response_mask, s)
    return s, weights, mask, metrics


def _finish(
    pg_losses: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str,
    weights: Tensor | None,
    metrics: dict[str, Tensor],
) -> tuple[Tensor, dict[str, Tensor]]:
    """Apply the rollout IS weights, aggregate, and return ``(loss, metrics)``."""
    if weights is not None:
        pg_losses = pg_losses * weights
    return agg_loss(pg_losses, loss_mask, loss_agg_mode), metrics


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = TOKEN_MEAN,
    config: Any = None,
    rollout_log_probs: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clip with asymmetric bounds and dual clip for negative advantages."""
    s, weights, mask, metrics = _open(config, old_log_prob, rollout_log_probs, response_mask)
    neg_kl = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(neg_kl)  # (B, T)
    losses1 = -advantages * ratio
    losses2 = -advantages * torch.clamp(ratio, 1 - s.clip_ratio_low, 1 + s.clip_ratio_high)
    clipped1 = torch.maximum(losses1, losses2)
    losses3 = -advantages * s.clip_ratio_c
    clipped2 = torch.minimum(losses3, clipped1)
    pg_losses = torch.where(advantages < 0, clipped2, clipped1)  # (B, T)
    metrics["actor/pg_clipfrac"] = masked_mean(torch.gt(losses2, losses1).float(), mask).detach()
    metrics["actor/ppo_kl"] = masked_mean(-neg_kl, mask).detach()
    lower = torch.gt(clipped1, losses3) & (advantages < 0)
    metrics["actor/pg_clipfrac_lower"] = masked_mean(lower.float(), mask).detach()
    return _finish(pg_losses, mask, loss_agg_mode, weights, metrics)


compute_policy_loss = compute_policy_loss_vanilla


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_log_probs: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO-token: a sequence-level ratio with per-token gradients; ``loss_agg_mode`` is
    ignored (the paper's objective is ``seq-mean-token-mean``)."""
    s, weights, mask, metrics = _open(config, old_log_prob, rollout_log_probs, response_mask)
    neg_kl = log_prob - old_log_prob
    seq_len = mask.sum(dim=-1).clamp(min=1)  # (B,)
    seq_neg_kl = torch.where(mask.bool(), neg_kl, torch.zeros_like(neg_kl)).sum(-1) / seq_len
    log_ratio = log_prob - log_prob.detach() + seq_neg_kl.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(log_ratio, max=10.0))  # (B, T)
    losses1 = -advantages * ratio
    losses2 = -advantages * torch.clamp(ratio, 1 - s.clip_ratio_low, 1 + s.clip_ratio_high)
    pg_losses = torch.maximum(losses1, losses2)
    metrics["actor/pg_clipfrac"] = masked_mean(torch.gt(losses2, losses1).float(), mask).detach()
    metrics["actor/ppo_kl"] = masked_mean(-neg_kl, mask).detach()
    metrics["actor/pg_clipfrac_lower"] = 0.0
    return _finish(pg_losses, mask, "seq-mean-token-mean", weights, metrics)


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = TOKEN_MEAN,
    config: Any = None,
    rollout_log_probs: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO: REINFORCE with a clipped, detached importance weight on every token."""
    s, weights, mask, metrics = _open(config, old_log_prob, rollout_log_probs, response_mask)
    neg_kl = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(neg_kl).detach()  # (B, T)
    low, high = 1 - s.clip_ratio_low, 1 + s.clip_ratio_high
    pg_losses = -advantages * torch.clamp(ratio, low, high) * log_prob
    metrics["actor/pg_clipfrac"] = masked_mean(
        ((ratio < low) | (ratio > high)).float(), mask
    ).detach()
    metrics["actor/ppo_kl"] = masked_mean(-neg_kl, mask).detach()
    metrics["actor/pg_clipfrac_lower"] = masked_mean((ratio < low).float(), mask).detach()
    return _finish(pg_losses, mask, loss_agg_mode, weights, metrics)


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = TOKEN_MEAN,
    config: Any = None,
    rollout_log_probs: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GPG: the plain policy gradient ``-A log pi`` (no ratio, no clipping)."""
    s, weights, mask, metrics = _open(config, old_log_prob, rollout_log_probs, response_mask)
    metrics["actor/pg_clipfrac"] = 0.0
    metrics["actor/ppo_kl"] = masked_mean(old_log_prob - log_prob, mask).detach()
    metrics["actor/pg_clipfrac_lower"] = 0.0
    return _finish(-advantages * log_prob, mask, loss_agg_mode, weights, metrics)
