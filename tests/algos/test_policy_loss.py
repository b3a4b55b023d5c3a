"""Policy losses (PPO clip, dual clip, clip-higher, GSPO, CISPO, GPG) and rollout correction."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from agentrl.algos import (
    POLICY_LOSSES,
    UnknownNameError,
    compute_policy_loss,
    get_policy_loss_fn,
    policy_loss_settings,
)

LN = math.log


def cfg(**policy_loss) -> SimpleNamespace:
    """An actor config with the lead's defaults and the given policy_loss keys."""
    base = {"loss_mode": "vanilla", "rollout_is": None, "rollout_is_threshold": 2.0}
    base |= {"rollout_rs": None, "rollout_rs_threshold": 2.0, "rollout_rs_threshold_lower": None}
    return SimpleNamespace(
        clip_ratio=0.2,
        clip_ratio_low=None,
        clip_ratio_high=None,
        clip_ratio_c=3.0,
        policy_loss=SimpleNamespace(**(base | policy_loss)),
    )


# ratios pi / pi_old = [1.5, 0.5, 0.5, 4.0] on valid tokens, a garbage padded token at the end
RATIOS = [1.5, 0.5, 0.5, 4.0]
OLD = torch.tensor([[-1.0, -1.0, -1.0, -1.0, -1.0]])
NEW = OLD + torch.tensor([[LN(1.5), LN(0.5), LN(0.5), LN(4.0), 1e4]])
ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0, 7.0]])
MASK = torch.tensor([[1, 1, 1, 1, 0]])


def test_vanilla_ppo_clip_and_dual_clip_hand_values():
    log_prob = NEW.clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn("vanilla")(OLD, log_prob, ADV, MASK, "token-mean", cfg())
    # t0: A=1, r=1.5: max(-1.5, -1.2) = -1.2 (clipped)
    # t1: A=1, r=0.5: max(-0.5, -0.8) = -0.5
    # t2: A=-1, r=0.5: max(0.5, 0.8) = 0.8 (clipped); min(3, 0.8) = 0.8
    # t3: A=-1, r=4: max(4, 1.2) = 4; dual clip min(3, 4) = 3 (lower clip)
    # token-mean = (-1.2 - 0.5 + 0.8 + 3) / 4 = 0.525
    assert loss.item() == pytest.approx(0.525, abs=1e-6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(0.25)
    # ppo_kl = mean(-log r) = -(ln 1.5 + 2 ln 0.5 + ln 4) / 4 = -ln 1.5 / 4
    assert metrics["actor/ppo_kl"] == pytest.approx(-LN(1.5) / 4, abs=1e-6)
    loss.backward()
    # only t1 is unclipped: d/dlogp (-A r / 4) = -r / 4 = -0.125
    assert torch.allclose(log_prob.grad, torch.tensor([[0.0, -0.125, 0.0, 0.0, 0.0]]))


def test_compute_policy_loss_is_vanilla():
    assert compute_policy_loss is get_policy_loss_fn("vanilla")


def test_clip_higher_uses_asymmetric_bounds():
    config = cfg()
    config.clip_ratio_high = 0.28
    loss, _ = compute_policy_loss(OLD, NEW, ADV, MASK, "token-mean", config)
    # t0 is now clipped at 1.28: (-1.28 - 0.5 + 0.8 + 3) / 4 = 0.505
    assert loss.item() == pytest.approx(0.505, abs=1e-6)
    config.clip_ratio_low = 0.6
    loss, _ = compute_policy_loss(OLD, NEW, ADV, MASK, "token-mean", config)
    # t2: clip(0.5, 0.4, 1.28) = 0.5 -> max(0.5, 0.5) = 0.5: (-1.28 - 0.5 + 0.5 + 3) / 4
    assert loss.item() == pytest.approx(0.43, abs=1e-6)


def test_dual_clip_bound_must_exceed_one():
    config = cfg()
    config.clip_ratio_c = 1.0
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1.0"):
        compute_policy_loss(OLD, NEW, ADV, MASK, "token-mean", config)


def test_vanilla_aggregation_modes():
    old = torch.zeros(2, 3)
    new = torch.zeros(2, 3)  # ratio 1 everywhere: per-token loss = -A
    adv = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, _ = compute_policy_loss(old, new, adv, mask, "seq-mean-token-sum", None)
    assert loss.item() == pytest.approx(-(3 + 4) / 2)
    loss, _ = compute_policy_loss(old, new, adv, mask, "seq-mean-token-mean", None)
    assert loss.item() == pytest.approx(-(1.5 + 4) / 2)


# GSPO: row 0 ratios [1.5, 0.5] -> s = sqrt(0.75) = 0.8660254, inside [0.8, 1.2];
#       row 1 ratios [2, 2] -> s = 2, clipped to 1.2.
GS_OLD = torch.full((2, 3), -2.0)
GS_NEW = GS_OLD + torch.tensor([[LN(1.5), LN(0.5), 5.0], [LN(2.0), LN(2.0), 5.0]])
GS_MASK = torch.tensor([[1, 1, 0], [1, 1, 0]])


def test_gspo_sequence_ratio_hand_values():
    log_prob = GS_NEW.clone().requires_grad_(True)
    adv = torch.ones(2, 3)
    loss, metrics = get_policy_loss_fn("gspo")(GS_OLD, log_prob, adv, GS_MASK, "token-mean", cfg())
    s = math.sqrt(0.75)
    # per token: row 0 -0.8660254, row 1 max(-2, -1.2) = -1.2; seq-mean-token-mean
    assert loss.item() == pytest.approx((-s - 1.2) / 2, abs=1e-6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)
    assert metrics["actor/pg_clipfrac_lower"] == 0.0
    # ppo_kl = -(ln 1.5 + ln 0.5 + 2 ln 2) / 4
    assert metrics["actor/ppo_kl"] == pytest.approx(-(LN(0.75) + 2 * LN(2)) / 4, abs=1e-6)
    loss.backward()
    # row 0: d/dlogp_t of (1/2 rows)(1/2 tokens)(-A s pi/sg(pi)) = -s / 4; row 1 clipped: 0
    expected = torch.tensor([[-s / 4, -s / 4, 0.0], [0.0, 0.0, 0.0]])
    assert torch.allclose(log_prob.grad, expected, atol=1e-6)


def test_cispo_clips_the_weight_but_keeps_every_gradient():
    old = torch.tensor([[-1.0, -1.0]])
    log_prob = (old + torch.tensor([[LN(1.5), LN(0.5)]])).requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.ones(1, 2)
    loss, metrics = get_policy_loss_fn("cispo")(old, log_prob, adv, mask, "token-mean", cfg())
    # weights clip(1.5) = 1.2, clip(0.5) = 0.8; log_prob = [-1 + ln 1.5, -1 + ln 0.5]
    # losses: -1 * 1.2 * (-0.5945349) = 0.7134419; +1 * 0.8 * (-1.6931472) = -1.3545177
    assert loss.item() == pytest.approx((0.7134419 - 1.3545177) / 2, abs=1e-6)
    loss.backward()
    # gradient -A * w / 2 per token: -0.6 and +0.4, non-zero although both are clipped
    assert torch.allclose(log_prob.grad, torch.tensor([[-0.6, 0.4]]))
    assert metrics["actor/pg_clipfrac"] == 1.0 and metrics["actor/pg_clipfrac_lower"] == 0.5


def test_gpg_is_plain_policy_gradient():
    log_prob = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    adv = torch.tensor([[2.0, 2.0, 2.0]])
    loss, _ = get_policy_loss_fn("gpg")(log_prob.detach(), log_prob, adv, MASK[:, :3], "token-mean")
    assert loss.item() == pytest.approx(2.0 * 6 / 3)  # -A * mean(log_prob) = 2 * 2
    loss.backward()
    assert torch.allclose(log_prob.grad, torch.full((1, 3), -2 / 3))


def test_unknown_loss_lists_valid_names():
    with pytest.raises(UnknownNameError, match="unknown policy loss 'ppo'.*cispo.*vanilla"):
        get_policy_loss_fn("ppo")
    assert {"vanilla", "gspo", "cispo", "gpg"} <= set(POLICY_LOSSES.names())


# --------------------------------------------------------------------------- rollout correction

# old / rollout ratios [0.5, 1, 4]; the policy equals pi_old (r = 1) and A = 1: loss = -1 * w
RC_OLD = torch.full((1, 3), -2.0)
RC_ROLLOUT = RC_OLD - torch.tensor([[LN(0.5), 0.0, LN(4.0)]])
RC_ADV = torch.ones(1, 3)
RC_MASK = torch.ones(1, 3)


def rc_loss(config, old=RC_OLD, rollout=RC_ROLLOUT, adv=RC_ADV, mask=RC_MASK):
    return compute_policy_loss(old, old.clone(), adv, mask, "token-mean", config, rollout)


def test_token_level_truncated_importance_weights():
    loss, metrics = rc_loss(cfg(rollout_is="token"))
    # w = min(ratio, 2) = [0.5, 1, 2]; loss = -(0.5 + 1 + 2) / 3
    assert loss.item() == pytest.approx(-3.5 / 3, abs=1e-6)
    assert metrics["actor/rollout_is_mean"] == pytest.approx(3.5 / 3, abs=1e-6)
    assert metrics["actor/rollout_is_clipped_frac"] == pytest.approx(1 / 3)
    # KL(rollout || old) estimate: mean(log rollout - log old) = -(ln 0.5 + ln 4) / 3
    assert metrics["actor/rollout_kl"] == pytest.approx(-LN(2) / 3, abs=1e-6)


def test_sequence_and_geometric_importance_weights():
    # sequence: product 0.5 * 1 * 4 = 2, capped at 1.5 -> loss -1.5
    loss, metrics = rc_loss(cfg(rollout_is="sequence", rollout_is_threshold=1.5))
    assert loss.item() == pytest.approx(-1.5, abs=1e-6)
    assert metrics["actor/rollout_is_clipped_frac"] == 1.0
    # geometric: 2 ** (1/3) = 1.2599 < 1.5 -> loss -1.2599
    loss, _ = rc_loss(cfg(rollout_is="geometric", rollout_is_threshold=1.5))
    assert loss.item() == pytest.approx(-(2 ** (1 / 3)), abs=1e-6)


def test_importance_weights_carry_no_gradient():
    log_prob = RC_OLD.clone().requires_grad_(True)
    rollout = RC_ROLLOUT.clone().requires_grad_(True)
    loss, _ = compute_policy_loss(
        RC_OLD, log_prob, RC_ADV, RC_MASK, "token-mean", cfg(rollout_is="token"), rollout
    )
    loss.backward()
    assert rollout.grad is None or torch.all(rollout.grad == 0)
    # d/dlogp of -w r / 3 at r = 1: -w / 3
    assert torch.allclose(log_prob.grad, -torch.tensor([[0.5, 1.0, 2.0]]) / 3)


def test_token_rejection_masks_out_of_bounds_tokens():
    rollout = RC_OLD - torch.tensor([[LN(0.25), 0.0, LN(4.0)]])  # ratios 0.25, 1, 4
    loss, metrics = rc_loss(cfg(rollout_rs="token"), rollout=rollout)
    # bounds [1/2, 2]: only t1 stays -> loss -1 over one token
    assert loss.item() == pytest.approx(-1.0)
    assert metrics["actor/rollout_is_masked_frac"] == pytest.approx(2 / 3)


def test_sequence_rejection_masks_whole_samples_and_combines_with_is():
    old = RC_OLD.repeat(2, 1)
    rollout = old - torch.tensor([[LN(0.25), 0.0, LN(4.0)], [LN(4.0), 0.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [5.0, 5.0, 5.0]])
    mask = torch.ones(2, 3)
    # row 0 product 1 (kept), row 1 product 4 (rejected): loss = -1 over row 0's tokens
    loss, metrics = rc_loss(cfg(rollout_rs="sequence"), old, rollout, adv, mask)
    assert loss.item() == pytest.approx(-1.0)
    assert metrics["actor/rollout_is_masked_frac"] == pytest.approx(0.5)
    # with token IS (cap 2) on top: row 0 weights [0.25, 1, 2] -> -(3.25) / 3
    config = cfg(rollout_rs="sequence", rollout_is="token")
    loss, _ = rc_loss(config, old, rollout, adv, mask)
    assert loss.item() == pytest.approx(-3.25 / 3, abs=1e-6)


def test_correction_without_rollout_log_probs_is_an_error():
    with pytest.raises(ValueError, match="rollout_log_probs"):
        compute_policy_loss(RC_OLD, RC_OLD, RC_ADV, RC_MASK, "token-mean", cfg(rollout_is="token"))


def test_bad_correction_level_is_named():
    with pytest.raises(ValueError, match="policy_loss.rollout_is must be null or one of token"):
        policy_loss_settings(cfg(rollout_is="tokens"))


# --------------------------------------------------------------------------- settings


def test_settings_defaults_and_config_forms():
    assert policy_loss_settings(None) == policy_loss_settings(cfg())
    s = policy_loss_settings(None)
    assert (s.clip_ratio_low, s.clip_ratio_high, s.clip_ratio_c) == (0.2, 0.2, 3.0)
    assert (s.rollout_is, s.rollout_rs, s.rollout_rs_threshold_lower) == (None, None, 0.5)
    omega = OmegaConf.create(
        {
            "clip_ratio": 0.1,
            "clip_ratio_low": None,
            "clip_ratio_high": 0.28,
            "clip_ratio_c": 10.0,
            "policy_loss": {"loss_mode": "gspo", "rollout_rs": "token", "rollout_rs_threshold": 4},
        }
    )
    OmegaConf.set_struct(omega, True)  # missing keys fall back to the documented defaults
    s = policy_loss_settings(omega)
    assert (s.clip_ratio_low, s.clip_ratio_high, s.clip_ratio_c, s.loss_mode) == (
        0.1,
        0.28,
        10.0,
        "gspo",
    )
    assert (s.rollout_rs_threshold, s.rollout_rs_threshold_lower) == (4.0, 0.25)
    assert policy_loss_settings({"clip_ratio": 0.3}).clip_ratio_high == 0.3


# --------------------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["vanilla", "gspo", "cispo", "gpg"]),
    st.sampled_from(["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]),
    st.sampled_from([None, "token", "sequence", "geometric"]),
    st.integers(0, 2**31 - 1),
)
def test_losses_are_finite_for_wild_inputs(name, agg, level, seed):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 5, generator=g) * 30
    new = -torch.rand(3, 5, generator=g) * 30
    rollout = -torch.rand(3, 5, generator=g) * 30
    adv = torch.randn(3, 5, generator=g) * 10
    mask = (torch.rand(3, 5, generator=g) > 0.4).float()
    mask[0] = 0  # a failed sample
    config = cfg(rollout_is=level, rollout_rs=level)
    log_prob = new.requires_grad_(True)
    loss, metrics = get_policy_loss_fn(name)(old, log_prob, adv, mask, agg, config, rollout)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(log_prob.grad).all()
    assert all(math.isfinite(v) for v in metrics.values())
    assert torch.all(log_prob.grad[mask == 0] == 0)


def test_the_yaml_states_the_settings_defaults():
    """The YAML's actor keys and PolicyLossSettings' defaults are one set of values: the
    YAML's null is the derived default (clip_ratio_low/high -> clip_ratio, the rejection's
    lower bound -> 1 / its upper bound), and the default config reads as the defaults."""
    from dataclasses import fields

    from agentrl.algos.rollout_correction import PolicyLossSettings
    from agentrl.config import load_config

    actor = load_config().actor_rollout_ref.actor
    defaults = {f.name: f.default for f in fields(PolicyLossSettings)}
    for key in ("clip_ratio", "clip_ratio_c"):
        assert actor[key] == defaults[key], key
    for key in ("loss_mode", "rollout_is", "rollout_is_threshold", "rollout_rs",
                "rollout_rs_threshold"):  # fmt: skip
        assert actor.policy_loss[key] == defaults[key], key
    assert actor.clip_ratio_low is None and actor.clip_ratio_high is None
    assert defaults["clip_ratio_low"] == defaults["clip_ratio_high"] == defaults["clip_ratio"]
    assert actor.policy_loss.rollout_rs_threshold_lower is None
    assert defaults["rollout_rs_threshold_lower"] == 1 / defaults["rollout_rs_threshold"]
    assert policy_loss_settings(actor) == PolicyLossSettings() == policy_loss_settings(None)
