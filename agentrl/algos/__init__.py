"""RL algorithms as pure torch functions: advantages, policy/value/KL/entropy losses.

No Ray, no I/O, no config loading: the trainer and the workers call these with tensors
(and ``compute_advantage`` / ``apply_kl_penalty`` with a DataProto). Estimators and policy
losses live in registries with one signature each; see docs/algorithms.md.

    from agentrl.algos import compute_advantage, get_policy_loss_fn
    data = compute_advantage(data, "grpo", norm_adv_by_std_in_grpo=True)
    loss, metrics = get_policy_loss_fn("vanilla")(old_lp, lp, adv, mask, "token-mean", cfg)
"""

from agentrl.algos.advantage import (
    ADV_ESTIMATORS,
    AdvantageEstimator,
    EstimatorNeeds,
    compute_advantage,
    compute_response_mask,
    distill_metrics,
    estimator_needs,
    get_adv_estimator_fn,
    register_adv_est,
    thin_group_rows,
)
from agentrl.algos.core import (
    LOSS_AGG_MODES,
    agg_loss,
    compute_value_loss,
    entropy_from_logits,
    logprobs_from_logits,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from agentrl.algos.kl import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    get_kl_controller,
    kl_penalty,
)
from agentrl.algos.policy_loss import (
    POLICY_LOSSES,
    compute_policy_loss,
    get_policy_loss_fn,
    register_policy_loss,
)
from agentrl.algos.rollout_correction import PolicyLossSettings, policy_loss_settings
from agentrl.utils.registry import Registry, UnknownNameError

__all__ = [
    "ADV_ESTIMATORS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "EstimatorNeeds",
    "FixedKLController",
    "PolicyLossSettings",
    "Registry",
    "UnknownNameError",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage",
    "distill_metrics",
    "compute_policy_loss",
    "compute_response_mask",
    "compute_value_loss",
    "entropy_from_logits",
    "estimator_needs",
    "get_adv_estimator_fn",
    "get_kl_controller",
    "get_policy_loss_fn",
    "kl_penalty",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "policy_loss_settings",
    "register_adv_est",
    "thin_group_rows",
    "register_policy_loss",
]
