"""KL estimators, KL controllers and KL-in-reward on a DataProto."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from agentrl.algos import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    get_kl_controller,
    kl_penalty,
)
from agentrl.protocol import DataProto

LOGPROB = torch.tensor([[-1.0, -2.0]])
REF = torch.tensor([[-1.5, -1.0]])  # d = logprob - ref = [0.5, -1.0]
K3 = [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1]  # exp(-d) + d - 1 = [0.1065307, 0.7182818]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("kl", [0.5, -1.0]),
        ("k1", [0.5, -1.0]),
        ("abs", [0.5, 1.0]),
        ("mse", [0.125, 0.5]),  # d^2 / 2
        ("k2", [0.125, 0.5]),
        ("low_var_kl", K3),
        ("k3", K3),
    ],
)
def test_kl_estimators(name, expected):
    got = kl_penalty(LOGPROB, REF, name)
    assert torch.allclose(got, torch.tensor([expected]), atol=1e-6)


def test_low_var_kl_is_clamped_to_ten():
    # d = -30: -d is clamped to 20, exp(20) - 20 - 1 is huge, the result is clamped to 10
    assert kl_penalty(torch.tensor([[-31.0]]), torch.tensor([[-1.0]]), "k3").item() == 10.0


def test_straight_through_variant_has_k3_value_and_k2_gradient():
    logprob = LOGPROB.clone().requires_grad_(True)
    value = kl_penalty(logprob, REF, "k3+")
    assert torch.allclose(value, torch.tensor([K3]), atol=1e-6)
    value.sum().backward()
    # d/dlogprob of d^2 / 2 is d
    assert torch.allclose(logprob.grad, torch.tensor([[0.5, -1.0]]))


def test_unknown_kl_penalty_lists_valid():
    with pytest.raises(ValueError, match="unknown kl_penalty 'k4'.*low_var_kl"):
        kl_penalty(LOGPROB, REF, "k4")


def test_fixed_controller_never_moves():
    ctrl = FixedKLController(kl_coef=0.05)
    ctrl.update(current_kl=10.0, n_steps=100)
    assert ctrl.value == 0.05


def test_adaptive_controller_follows_ziegler():
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.5, horizon=100)
    ctrl.update(current_kl=1.0, n_steps=10)
    # error = clip(1.0 / 0.5 - 1, -0.2, 0.2) = 0.2; beta *= 1 + 0.2 * 10 / 100 = 1.02
    assert ctrl.value == pytest.approx(0.102)
    ctrl.update(current_kl=0.45, n_steps=10)
    # error = 0.45 / 0.5 - 1 = -0.1; beta *= 1 - 0.1 * 10 / 100 = 0.99
    assert ctrl.value == pytest.approx(0.102 * 0.99)


def test_get_kl_controller_from_config():
    fixed = get_kl_controller(OmegaConf.create({"type": "fixed", "kl_coef": 0.001}))
    assert isinstance(fixed, FixedKLController) and fixed.value == 0.001
    cfg = SimpleNamespace(type="adaptive", kl_coef=0.2, target_kl=0.1, horizon=10000)
    adaptive = get_kl_controller(cfg)
    assert isinstance(adaptive, AdaptiveKLController)
    assert (adaptive.value, adaptive.target, adaptive.horizon) == (0.2, 0.1, 10000)
    with pytest.raises(ValueError, match="kl_ctrl.type 'pid'.*fixed, adaptive"):
        get_kl_controller(SimpleNamespace(type="pid", kl_coef=0.1))
    with pytest.raises(ValueError, match="horizon"):
        get_kl_controller(SimpleNamespace(type="adaptive", kl_coef=0.1, target_kl=0.1, horizon=0))


def _kl_batch() -> DataProto:
    return DataProto.from_dict(
        tensors={
            "token_level_scores": torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]),
            "old_log_probs": torch.full((2, 3), -1.0),
            "ref_log_prob": torch.tensor([[-1.5, -1.0, -2.0], [-1.0, -0.5, -1.0]]),
            "response_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        }
    )


def test_apply_kl_penalty_subtracts_beta_kl_and_updates_controller():
    data = _kl_batch()
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=100)
    data, metrics = apply_kl_penalty(data, ctrl, kl_penalty="kl")
    # kl = old - ref = [[0.5, 0, 1], [0, -0.5, 0]] (masked)
    # rewards = scores - 0.1 * kl = [[-0.05, 0, 0.9], [0, 2.05, 0]]
    expected = torch.tensor([[-0.05, 0.0, 0.9], [0.0, 2.05, 0.0]])
    assert torch.allclose(data.batch["token_level_rewards"], expected)
    # per-row means: 1.5 / 3 = 0.5 and -0.5 / 2 = -0.25; batch mean 0.125
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.125)
    assert metrics["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1)
    # error = clip(0.125 / 0.1 - 1, +-0.2) = 0.2; n_steps = batch size 2 -> beta * 1.004
    assert ctrl.value == pytest.approx(0.1 * (1 + 0.2 * 2 / 100))


def test_apply_kl_penalty_names_a_missing_key():
    data = _kl_batch()
    data.batch.pop("ref_log_prob")
    with pytest.raises(KeyError, match="ref_log_prob"):
        apply_kl_penalty(data, FixedKLController(0.1))
