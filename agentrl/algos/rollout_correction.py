"""Policy-loss settings, and the correction for the rollout engine / trainer mismatch.

The rollout engine (SGLang, or the embedded engine) samples with its own kernels and
precision, so its log-probs ``pi_rollout`` differ from the trainer's ``pi_old`` for the
same weights. Two corrections, both driven by ``log_ratio = log pi_old - log pi_rollout``
on the valid tokens (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
Off-Policy RL Training"; verl's rollout correction):

- truncated importance sampling (``policy_loss.rollout_is``): every per-token policy loss
  is multiplied by ``w = min(pi_old / pi_rollout, rollout_is_threshold)``, detached;
- rejection (``policy_loss.rollout_rs``): tokens, or whole samples, whose ratio lies outside
  ``[rollout_rs_threshold_lower, rollout_rs_threshold]`` are removed from the loss mask.

The ratio is taken per ``token``, per ``sequence`` (the product over the sample's valid
tokens) or ``geometric`` (the geometric mean over the sample's valid tokens, which stays
near 1 for long samples where the product does not).

``policy_loss_settings(config)`` is the one place that reads the actor config's policy-loss
keys. A key the config lacks (or ``config=None``, verl's loss functions' default) takes
``PolicyLossSettings``' default, the one definition in code of the values
``agentrl/config/ppo_trainer.yaml`` states (tests/algos/test_policy_loss.py checks
that the two agree).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

from agentrl.algos.core import masked_mean

RATIO_LEVELS = ("token", "sequence", "geometric")


@dataclass(frozen=True)
class PolicyLossSettings:
    """The actor config keys the policy losses read, with their defaults.

    ``clip_ratio_low``/``clip_ratio_high`` default to ``clip_ratio`` (DAPO's clip-higher
    sets ``clip_ratio_high`` above it); ``clip_ratio_c`` is the dual-clip bound (Ye et al.
    2020, arXiv:1912.09729) for negative advantages; ``loss_mode`` names the policy loss;
    the ``rollout_*`` keys configure the correction described in the module docstring.
    """

    clip_ratio: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_mode: str = "vanilla"
    rollout_is: str | None = None
    rollout_is_threshold: float = 2.0
    rollout_rs: str | None = None
    rollout_rs_threshold: float = 2.0
    rollout_rs_threshold_lower: float = 0.5


_DEFAULTS = {field.name: field.default for field in fields(PolicyLossSettings)}


def _read(node: Any, key: str, default: Any = None) -> Any:
    """``node[key]`` of a mapping or an object's attribute; when missing or null, ``default``,
    else PolicyLossSettings' default of ``key``."""
    if default is None:
        default = _DEFAULTS.get(key)
    if node is None:
        return default
    # OmegaConf DictConfig is a Mapping too; .get keeps struct-mode configs from raising.
    value = node.get(key, default) if isinstance(node, Mapping) else getattr(node, key, default)
    return default if value is None else value


def policy_loss_settings(config: Any = None) -> PolicyLossSettings:
    """Read the actor config (OmegaConf node, object with attributes, dict or None)."""
    if isinstance(config, PolicyLossSettings):
        return config
    clip_ratio = float(_read(config, "clip_ratio"))
    sub = _read(config, "policy_loss")
    rs_threshold = float(_read(sub, "rollout_rs_threshold"))
    settings = PolicyLossSettings(
        clip_ratio=clip_ratio,
        clip_ratio_low=float(_read(config, "clip_ratio_low", clip_ratio)),
        clip_ratio_high=float(_read(config, "clip_ratio_high", clip_ratio)),
        clip_ratio_c=float(_read(config, "clip_ratio_c")),
        loss_mode=str(_read(sub, "loss_mode")),
        rollout_is=_read(sub, "rollout_is"),
        rollout_is_threshold=float(_read(sub, "rollout_is_threshold")),
        rollout_rs=_read(sub, "rollout_rs"),
        rollout_rs_threshold=rs_threshold,
        rollout_rs_threshold_lower=float(
            _read(sub, "rollout_rs_threshold_lower", 1 / rs_threshold)
        ),
    )
    _validate(settings)
    return settings


def _validate(s: PolicyLossSettings) -> None:
    if s.clip_ratio_c <= 1.0:
        raise ValueError(f"actor.clip_ratio_c must be > 1.0 (dual clip), got {s.clip_ratio_c}")
    for key in ("rollout_is", "rollout_rs"):
        value = getattr(s, key)
        if value is not None and value not in RATIO_LEVELS:
            raise ValueError(
                f"actor.policy_loss.{key} must be null or one of {', '.join(RATIO_LEVELS)}, "
                f"got {value!r}"
            )
    if s.rollout_is_threshold <= 0:
        raise ValueError(
            f"actor.policy_loss.rollout_is_threshold must be > 0, got {s.rollout_is_threshold}"
        )
    if not 0 < s.rollout_rs_threshold_lower <= s.rollout_rs_threshold:
        raise ValueError(
            "actor.policy_loss.rollout_rs_threshold_lower must be in (0, rollout_rs_threshold], "
            f"got {s.rollout_rs_threshold_lower} and {s.rollout_rs_threshold}"
        )


def _log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """Per-token log-ratio at ``level``, broadcast back to (B, T)."""
    if level == "token":
        return log_ratio
    seq_sum = log_ratio.sum(dim=-1, keepdim=True)  # (B, 1), masked tokens are already 0
    if level == "sequence":
        return seq_sum.expand_as(log_ratio)
    seq_len = mask.sum(dim=-1, keepdim=True).clamp(min=1)  # (B, 1)
    return (seq_sum / seq_len).expand_as(log_ratio)


def rollout_correction(
    old_log_prob: torch.Tensor,
    rollout_log_probs: torch.Tensor | None,
    response_mask: torch.Tensor,
    settings: PolicyLossSettings,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, torch.Tensor]]:
    """Return ``(is_weights or None, loss_mask, metrics)`` for the configured correction.

    ``is_weights`` (B, T) is detached and multiplies the per-token loss; ``loss_mask`` is
    ``response_mask`` with rejected tokens set to 0. With both corrections off this is
    ``(None, response_mask, {})``.
    """
    if settings.rollout_is is None and settings.rollout_rs is None:
        return None, response_mask, {}
    if rollout_log_probs is None:
        raise ValueError(
            "actor.policy_loss.rollout_is/rollout_rs is set but no rollout_log_probs were "
            "given (data.batch['rollout_log_probs'] from the rollout engine)"
        )
    valid = response_mask.bool()
    diff = (old_log_prob - rollout_log_probs).detach()
    log_ratio = torch.where(valid, diff, torch.zeros_like(diff))  # (B, T)
    metrics = {"actor/rollout_kl": masked_mean(-log_ratio, response_mask).detach()}
    weights = None
    loss_mask = response_mask
    if settings.rollout_is is not None:
        log_w = _log_ratio(log_ratio, response_mask, settings.rollout_is)
        log_cap = math.log(settings.rollout_is_threshold)
        weights = torch.exp(torch.clamp(log_w, max=log_cap))  # (B, T)
        metrics["actor/rollout_is_mean"] = masked_mean(weights, response_mask).detach()
        metrics["actor/rollout_is_clipped_frac"] = masked_mean(
            (log_w > log_cap).float(), response_mask
        ).detach()
    if settings.rollout_rs is not None:
        log_r = _log_ratio(log_ratio, response_mask, settings.rollout_rs)
        keep = (log_r >= math.log(settings.rollout_rs_threshold_lower)) & (
            log_r <= math.log(settings.rollout_rs_threshold)
        )
        loss_mask = response_mask * keep.to(response_mask.dtype)
        metrics["actor/rollout_is_masked_frac"] = masked_mean(
            (~keep).float(), response_mask
        ).detach()
    return weights, loss_mask, metrics
