"""KL divergence estimators between the policy and the reference, and KL-in-reward control.

Estimators of KL(pi || pi_ref) from one sample per token, with ``d = logprob - ref_logprob``
(Schulman, "Approximating KL divergence", 2020):

- ``kl`` / ``k1``: ``d`` (unbiased, high variance, can be negative);
- ``abs``: ``|d|``;
- ``mse`` / ``k2``: ``d^2 / 2`` (biased, low variance; its gradient is the true KL gradient);
- ``low_var_kl`` / ``k3``: ``exp(-d) + d - 1`` (unbiased, never negative), with ``-d``
  clamped to [-20, 20] before ``exp`` and the result clamped to [-10, 10] as verl does.

A name ending in ``+`` (``k3+``, ``low_var_kl+``, ``k1+``, ``abs+``) keeps that estimator's
value but takes the gradient of ``k2``, which is the unbiased gradient of the KL
(verl's straight-through variant).

KL-in-reward (InstructGPT, Ouyang et al. 2022): ``apply_kl_penalty`` subtracts
``beta * kl`` from the token-level scores; ``beta`` comes from a fixed controller or from the
adaptive controller of Ziegler et al. 2019 ("Fine-Tuning Language Models from Human
Preferences"), which moves ``beta`` so that the measured KL tracks ``target_kl``.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from agentrl.algos.core import masked_mean

KL_PENALTIES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def _kl_value(logprob: torch.Tensor, ref_logprob: torch.Tensor, name: str) -> torch.Tensor:
    diff = logprob - ref_logprob
    if name in ("kl", "k1"):
        return diff
    if name == "abs":
        return diff.abs()
    if name in ("mse", "k2"):
        return 0.5 * diff.square()
    if name in ("low_var_kl", "k3"):
        neg = torch.clamp(-diff, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(neg) - neg - 1, min=-10.0, max=10.0)
    valid = ", ".join(KL_PENALTIES + tuple(f"{k}+" for k in KL_PENALTIES))
    raise ValueError(f"unknown kl_penalty {name!r}; valid: {valid}")


def _estimate(logprob: torch.Tensor, ref_logprob: torch.Tensor, name: str) -> torch.Tensor:
    if not name.endswith("+"):
        return _kl_value(logprob, ref_logprob, name)
    value = _kl_value(logprob, ref_logprob, name[:-1])
    k2 = 0.5 * (logprob - ref_logprob).square()
    return k2 - k2.detach() + value.detach()  # the value of `value`, the gradient of k2


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate (B, T) between the policy and the reference log-probs."""
    return _estimate(logprob, ref_logprob, kl_penalty)


class KLController(Protocol):
    """Holds the KL coefficient ``value`` used in the reward; ``update`` after each step."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> None: ...


class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to do: the coefficient is fixed."""


class AdaptiveKLController:
    """Ziegler et al. 2019: ``beta *= 1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon``."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        if horizon <= 0:
            raise ValueError(f"kl_ctrl.horizon must be > 0, got {horizon}")
        if target_kl <= 0:
            raise ValueError(f"kl_ctrl.target_kl must be > 0, got {target_kl}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move the coefficient towards the value that gives ``target_kl``."""
        proportional_error = float(np.clip(current_kl / self.target - 1, -0.2, 0.2))
        self.value *= 1 + proportional_error * n_steps / self.horizon


KL_CONTROLLERS = ("fixed", "adaptive")  # algorithm.kl_ctrl.type (the validator's list too)


def get_kl_controller(kl_ctrl_config: Any) -> KLController:
    """Build a controller from ``algorithm.kl_ctrl``: ``type`` (fixed|adaptive), ``kl_coef``,
    and for adaptive ``target_kl`` and ``horizon``."""
    kind = kl_ctrl_config.type
    if kind == "fixed":
        return FixedKLController(kl_coef=kl_ctrl_config.kl_coef)
    if kind == "adaptive":
        return AdaptiveKLController(
            init_kl_coef=kl_ctrl_config.kl_coef,
            target_kl=kl_ctrl_config.target_kl,
            horizon=kl_ctrl_config.horizon,
        )
    raise ValueError(f"unknown algorithm.kl_ctrl.type {kind!r}; valid: {', '.join(KL_CONTROLLERS)}")


def apply_kl_penalty(
    data: Any, kl_ctrl: KLController, kl_penalty: str = "kl"
) -> tuple[Any, dict[str, float]]:
    """KL-in-reward on a DataProto: ``token_level_rewards = token_level_scores - beta * kl``.

    Reads ``batch["token_level_scores"]``, ``batch["old_log_probs"]``,
    ``batch["ref_log_prob"]`` and ``batch["response_mask"]`` (all (B, T)); writes
    ``batch["token_level_rewards"]``; updates the controller with the batch's mean
    per-sequence KL. Returns ``(data, metrics)``.
    """
    batch = data.batch
    for key in ("token_level_scores", "old_log_probs", "ref_log_prob", "response_mask"):
        if key not in batch.keys():
            raise KeyError(f"apply_kl_penalty needs data.batch[{key!r}]")
    response_mask = batch["response_mask"]
    kld = _estimate(batch["old_log_probs"], batch["ref_log_prob"], kl_penalty) * response_mask
    beta = kl_ctrl.value
    batch["token_level_rewards"] = batch["token_level_scores"] - beta * kld  # (B, T)
    current_kl = masked_mean(kld, response_mask, axis=-1).mean().item()
    kl_ctrl.update(current_kl=current_kl, n_steps=batch.batch_size[0])
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
