"""Advantage estimators on token-level rewards, and ``compute_advantage`` for a DataProto.

Every estimator has one signature, so the trainer never branches on the name::

    fn(token_level_rewards, response_mask, index, *, values=None, gamma=1.0, lam=1.0,
       norm_adv_by_std_in_grpo=True, reward_baselines=None, config=None, epsilon=1e-6)
    -> (advantages, returns)            # both (B, T), exactly 0 where response_mask is 0

``token_level_rewards`` and ``response_mask`` are (B, T); ``index`` is a numpy object array
with the ``uid`` of each row (rows with the same uid answer the same prompt and form a
group). An estimator that needs an input it was not given raises ValueError naming it.
What an estimator needs beyond the rewards (a critic's ``values``, a greedy baseline, a
teacher's log-probs, further batch tensors) it declares where it is registered,
``@register_adv_est(name, EstimatorNeeds(...))``; the trainer and the config check ask
``estimator_needs(name)`` and never compare an estimator's name.
Built-in estimators read nothing from ``config`` but ``on_policy_distill`` (its
``distill`` section); it is passed through for user estimators.

- ``gae``: Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438),
  whitened over the batch, as in PPO.
- ``grpo``: group-relative outcome advantage (DeepSeekMath, Shao et al. 2024,
  arXiv:2402.03300): ``(R - mean_g) / (std_g + eps)`` with the unbiased std;
  ``norm_adv_by_std_in_grpo=False`` gives Dr.GRPO (Liu et al. 2025, arXiv:2503.20783).
- ``rloo``: REINFORCE leave-one-out (Ahmadian et al. 2024, arXiv:2402.14740).
- ``reinforce_plus_plus``: discounted return-to-go whitened over the batch
  (Hu 2025, arXiv:2501.03262); ``reinforce_plus_plus_baseline``: group-mean baseline, then
  whitened over the batch.
- ``remax``: return-to-go minus the greedy sample's reward (Li et al. 2023, arXiv:2310.10505).
- ``opo``: length-weighted group baseline (On-Policy RL with Optimal reward baseline,
  Hao et al. 2025, arXiv:2505.23585).
- ``grpo_passk``: only the best sample of a group gets ``r_max - r_second`` (Pass@k
  training, arXiv:2503.19595); needs groups of at least 2.
- ``gpg``: group policy gradient (Chu et al. 2025, arXiv:2504.02546):
  ``alpha * (R - mean_g)`` with ``alpha = B / #(R != 0)``.

Numbers are verl's. Departures: masked positions are exactly 0 in both outputs (verl
leaves carried values there), the group statistics are computed in float64, a group whose
rewards are all equal gets an advantage of exactly 0, and masked positions are transparent
to the token-level recursions (GAE and REINFORCE++): tool-response tokens between two
assistant turns neither receive credit nor cut the return, the recursion simply steps over
them, so a reward placed on the last token of an early turn and the rewards of later turns
both reach every earlier assistant token. A reward placed on a masked position (for
instance the outcome score on the last token of a trajectory that ended with a tool
response) is credited to the nearest valid token before it, undiscounted: the tool tokens
are part of the environment's transition after that action. verl drops such rewards in
GAE and REINFORCE++; for rewards on valid tokens and zero padding the numbers are equal.
Outcome estimators sum the whole row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import torch

from agentrl.algos.core import masked_whiten
from agentrl.algos.segments import broadcast_episode_advantages, episode_rows
from agentrl.utils.registry import Registry

Tensor = torch.Tensor
AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
ADV_ESTIMATORS: Registry[AdvantageFn] = Registry("advantage estimator")


class AdvantageEstimator(str, Enum):
    """The built-in estimator names (``algorithm.adv_estimator``)."""

    GAE = "gae"
    GRPO = "grpo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"
    OPO = "opo"
    GRPO_PASSK = "grpo_passk"
    GPG = "gpg"
    ON_POLICY_DISTILL = "on_policy_distill"


@dataclass(frozen=True)
class EstimatorNeeds:
    """What an estimator needs beyond the rewards, declared where it is registered; the
    trainer and the config check ask this record, never the estimator's name.

    ``critic``: a value model (``critic`` section) whose ``values`` it reads; the critic
    worker is started and trained only then. ``greedy_baseline``: ``reward_baselines`` (B,),
    the reward of a greedy rollout of each prompt under the current weights (stage
    ``gen_max``, taken with ``rollout.val_kwargs``; sync training only). ``teacher``: the
    teacher's log-probs (``actor_rollout_ref.teacher``, stage ``teacher``); a teacher is
    configured exactly when the estimator declares one. ``batch_keys``: further
    ``data.batch`` tensors it reads, each passed as the keyword argument of that name
    (a key absent from the batch is not passed)."""

    critic: bool = False
    greedy_baseline: bool = False
    teacher: bool = False
    batch_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        keys = self.batch_keys
        if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
            raise TypeError(f"EstimatorNeeds.batch_keys must be a tuple of batch key names, "
                            f"got {keys!r}")
        object.__setattr__(self, "batch_keys", tuple(keys))


def _name(name: str | AdvantageEstimator) -> str:
    return name.value if isinstance(name, Enum) else str(name)


# name -> (the registered function, its needs): an entry whose function is no longer the
# registry's (unregistered, then registered again without needs) declares nothing.
_NEEDS: dict[str, tuple[AdvantageFn, EstimatorNeeds]] = {}


def register_adv_est(
    name: str | AdvantageEstimator, needs: EstimatorNeeds | None = None
) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator registering an advantage estimator under ``name`` with what it ``needs``
    (default: nothing beyond the rewards and ``index``); duplicates raise."""
    if needs is not None and not isinstance(needs, EstimatorNeeds):
        raise TypeError(f"register_adv_est({_name(name)!r}): needs must be an EstimatorNeeds, "
                        f"got {type(needs).__name__}")
    register = ADV_ESTIMATORS.register(name)

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        register(fn)
        _NEEDS[_name(name)] = (fn, needs or EstimatorNeeds())
        return fn

    return decorator


def get_adv_estimator_fn(name: str | AdvantageEstimator) -> AdvantageFn:
    """The estimator registered as ``name``; an unknown name raises listing the valid ones."""
    return ADV_ESTIMATORS.get(name)


def estimator_needs(name: str | AdvantageEstimator) -> EstimatorNeeds:
    """What the estimator registered as ``name`` declared it needs (EstimatorNeeds); an
    unknown name raises listing the valid ones."""
    fn = ADV_ESTIMATORS.get(name)
    entry = _NEEDS.get(_name(name))
    return entry[1] if entry is not None and entry[0] is fn else EstimatorNeeds()


# --------------------------------------------------------------------------- helpers


def _where_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` where ``mask`` is set, exactly 0 elsewhere (NaN/inf there do not leak)."""
    return torch.where(mask.bool(), x, torch.zeros_like(x))


def _group_ids(index: Any, scores: torch.Tensor, estimator: str) -> torch.Tensor:
    """Map each row's uid to a dense group id (B,); groups come from uids, not positions."""
    batch_size = scores.shape[0]
    if index is None:
        raise ValueError(
            f"advantage estimator {estimator!r} needs `index`, the uid of each row "
            "(data.non_tensor_batch['uid'])"
        )
    if len(index) != batch_size:
        raise ValueError(f"index has {len(index)} entries but the batch has {batch_size} rows")
    ids: dict[Any, int] = {}
    dense = [ids.setdefault(uid, len(ids)) for uid in index]
    return torch.tensor(dense, dtype=torch.long, device=scores.device)


def _group_stats(
    scores: torch.Tensor, ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row: group mean, unbiased group std, group size, and whether the group is constant.

    All (B,), float64. Statistics are those of the row's group; callers override singletons.
    """
    n_groups = int(ids.max()) + 1 if ids.numel() else 0
    x = scores.double()  # (B,)
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=x.device)
    count = zeros.index_add(0, ids, torch.ones_like(x))  # (G,)
    mean = zeros.index_add(0, ids, x) / count  # (G,)
    sq_dev = zeros.index_add(0, ids, (x - mean[ids]) ** 2)  # (G,)
    std = torch.sqrt(sq_dev / (count - 1).clamp(min=1))  # (G,)
    gmax = zeros.scatter_reduce(0, ids, x, reduce="amax", include_self=False)
    gmin = zeros.scatter_reduce(0, ids, x, reduce="amin", include_self=False)
    return mean[ids], std[ids], count[ids], (gmax == gmin)[ids]


def _centered(scores: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per row: score minus group mean, group std, group size (float64, (B,) each).

    A group of one has mean 0 and std 1 (verl's convention); a constant group gives exactly 0.
    """
    mean, std, count, constant = _group_stats(scores, ids)
    singleton = count == 1
    centered = torch.where(singleton, scores.double(), scores.double() - mean)
    centered = torch.where(constant & ~singleton, torch.zeros_like(centered), centered)
    return centered, torch.where(singleton, torch.ones_like(std), std), count


def _broadcast(per_row: torch.Tensor, like: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) -> (B, T) in ``like``'s dtype, 0 where the mask is 0."""
    return _where_mask(per_row.to(like.dtype).unsqueeze(-1).expand_as(like), mask)


# --------------------------------------------------------------------------- estimators


@register_adv_est(AdvantageEstimator.GAE, EstimatorNeeds(critic=True))
def compute_gae_advantage_return(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """GAE: ``A_t = sum_k (gamma lam)^k delta_{t+k}``, ``delta_t = r_t + gamma V_{t+1} - V_t``,
    over valid tokens only (masked ones are skipped); returns ``A + V``; then A is whitened."""
    if values is None:
        raise ValueError("advantage estimator 'gae' needs `values` (data.batch['values'])")
    mask = response_mask.bool()
    batch, length = token_level_rewards.shape
    next_value = token_level_rewards.new_zeros(batch)  # V of the next valid token
    last_gae = token_level_rewards.new_zeros(batch)
    pending = token_level_rewards.new_zeros(batch)  # rewards on masked tokens after t
    advantages = token_level_rewards.new_zeros(batch, length)
    for t in reversed(range(length)):
        reward = token_level_rewards[:, t] + pending
        delta = reward + gamma * next_value - values[:, t]
        gae_t = delta + gamma * lam * last_gae
        next_value = torch.where(mask[:, t], values[:, t], next_value)
        last_gae = torch.where(mask[:, t], gae_t, last_gae)
        pending = torch.where(mask[:, t], torch.zeros_like(reward), reward)
        advantages[:, t] = last_gae
    returns = _where_mask(advantages + values, mask)
    advantages = _where_mask(masked_whiten(advantages, response_mask), mask)
    return advantages, returns


@register_adv_est(AdvantageEstimator.GRPO)
def compute_grpo_outcome_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """GRPO: ``(R - mean_g) / (std_g + eps)`` (or ``R - mean_g``), broadcast to valid tokens.
    A group of one has mean 0 and std 1."""
    scores = token_level_rewards.sum(dim=-1)  # (B,)
    ids = _group_ids(index, scores, "grpo")
    centered, std, _ = _centered(scores, ids)
    adv = centered / (std + epsilon) if norm_adv_by_std_in_grpo else centered
    adv = _broadcast(adv, token_level_rewards, response_mask)
    return adv, adv


@register_adv_est(AdvantageEstimator.RLOO)
def compute_rloo_outcome_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """RLOO: ``R_i - mean_{j != i} R_j = (R_i - mean_g) * n / (n - 1)``; a group of one keeps R."""
    scores = token_level_rewards.sum(dim=-1)  # (B,)
    ids = _group_ids(index, scores, "rloo")
    centered, _, count = _centered(scores, ids)
    adv = torch.where(count > 1, centered * count / (count - 1).clamp(min=1), centered)
    adv = _broadcast(adv, token_level_rewards, response_mask)
    return adv, adv


@register_adv_est(AdvantageEstimator.OPO)
def compute_opo_outcome_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """OPO: ``R_i - sum_j |y_j| R_j / sum_j |y_j|`` over the group (|y| = valid tokens);
    a group of one has baseline 0."""
    scores = token_level_rewards.sum(dim=-1).double()  # (B,)
    lengths = response_mask.sum(dim=-1).double()  # (B,)
    ids = _group_ids(index, scores, "opo")
    _, _, count, constant = _group_stats(scores, ids)
    n_groups = int(ids.max()) + 1 if ids.numel() else 0
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=scores.device)
    weighted = zeros.index_add(0, ids, lengths * scores)[ids]  # (B,)
    total_len = zeros.index_add(0, ids, lengths)[ids]  # (B,)
    baseline = torch.where(total_len > 0, weighted / total_len.clamp(min=1e-12), 0.0)
    adv = torch.where(count > 1, scores - baseline, scores)
    adv = torch.where(constant & (count > 1), torch.zeros_like(adv), adv)
    adv = _broadcast(adv, token_level_rewards, response_mask)
    return adv, adv


@register_adv_est(AdvantageEstimator.GPG)
def compute_gpg_outcome_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """GPG: ``alpha * (R - mean_g)``, ``alpha = B / max(1, number of non-zero R)``."""
    scores = token_level_rewards.sum(dim=-1)  # (B,)
    ids = _group_ids(index, scores, "gpg")
    centered, _, _ = _centered(scores, ids)
    alpha = scores.shape[0] / max(1, int(torch.count_nonzero(scores)))
    adv = _broadcast(alpha * centered, token_level_rewards, response_mask)
    return adv, adv


@register_adv_est(AdvantageEstimator.GRPO_PASSK)
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Pass@k: the best row of each group gets ``r_max - r_second`` (divided by
    ``std_g + eps`` when ``norm_adv_by_std_in_grpo``); every other row gets 0."""
    scores = token_level_rewards.sum(dim=-1)  # (B,)
    ids = _group_ids(index, scores, "grpo_passk")
    adv = torch.zeros_like(scores)
    for g in range(int(ids.max()) + 1 if ids.numel() else 0):
        rows = torch.nonzero(ids == g).squeeze(-1)
        group = scores[rows]
        if group.numel() < 2:
            uid = index[int(rows[0])]
            raise ValueError(f"grpo_passk needs at least 2 samples per group; uid {uid!r} has 1")
        top, top_idx = torch.topk(group, 2)
        best = top[0] - top[1]
        if norm_adv_by_std_in_grpo:
            best = best / (torch.std(group) + epsilon)
        adv[rows[top_idx[0]]] = best
    adv = _broadcast(adv, token_level_rewards, response_mask)
    return adv, adv


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """REINFORCE++: returns ``G_t = r_t + gamma G_next`` over valid tokens (masked ones are
    skipped), advantages = returns whitened over the batch."""
    mask = response_mask.bool()
    batch, length = token_level_rewards.shape
    running = token_level_rewards.new_zeros(batch)
    pending = token_level_rewards.new_zeros(batch)  # rewards on masked tokens after t
    returns = token_level_rewards.new_zeros(batch, length)
    for t in reversed(range(length)):
        reward = token_level_rewards[:, t] + pending
        running = torch.where(mask[:, t], reward + gamma * running, running)
        pending = torch.where(mask[:, t], torch.zeros_like(reward), reward)
        returns[:, t] = torch.where(mask[:, t], running, torch.zeros_like(running))
    advantages = _where_mask(masked_whiten(returns, response_mask), mask)
    return advantages, returns


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """REINFORCE++ with a baseline: ``R - mean_g`` on every valid token, whitened over the
    batch; a group of one has baseline 0."""
    scores = token_level_rewards.sum(dim=-1)  # (B,)
    ids = _group_ids(index, scores, "reinforce_plus_plus_baseline")
    centered, _, _ = _centered(scores, ids)
    adv = _broadcast(centered, token_level_rewards, response_mask)
    adv = _where_mask(masked_whiten(adv, response_mask), response_mask)
    return adv, adv


@register_adv_est(AdvantageEstimator.REMAX, EstimatorNeeds(greedy_baseline=True))
def compute_remax_outcome_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """ReMax: returns = undiscounted return-to-go (rewards on masked tokens included, as
    for GAE); advantages = returns - baseline (B,)."""
    if reward_baselines is None:
        raise ValueError(
            "advantage estimator 'remax' needs `reward_baselines` (data.batch['reward_baselines'])"
        )
    to_go = token_level_rewards.flip(-1).cumsum(-1).flip(-1)  # (B, T)
    returns = _where_mask(to_go, response_mask)
    baselines = reward_baselines.to(returns.dtype).unsqueeze(-1)  # (B, 1)
    advantages = _where_mask(returns - baselines, response_mask)
    return advantages, returns


# --------------------------------------------------------------------------- DataProto entry


@register_adv_est(AdvantageEstimator.ON_POLICY_DISTILL,
                  EstimatorNeeds(teacher=True, batch_keys=("teacher_log_prob", "old_log_probs")))
def compute_on_policy_distill_advantage(
    token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray | None = None, *,
    values: Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True, reward_baselines: Tensor | None = None,
    config: Any = None, epsilon: float = 1e-6,
    teacher_log_prob: Tensor | None = None, old_log_probs: Tensor | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """On-policy distillation: each sampled token's advantage is the negative per-token
    reverse KL to the teacher, ``kl_coef * (log p_teacher(y_t) - log p_student(y_t))`` (the
    single-sample estimate of ``-KL(student || teacher)`` at that token, no discounting),
    plus ``task_reward_weight`` times the GRPO advantage of the task reward when that weight
    is not 0. ``config.distill.{kl_coef, task_reward_weight}`` (``algorithm.distill``, its
    defaults in agentrl/config/ppo_trainer.yaml); only the model's own tokens
    (``response_mask``) get one."""
    if teacher_log_prob is None or old_log_probs is None:
        raise KeyError("on_policy_distill needs data.batch['teacher_log_prob'] (the teacher's "
                       "log-probs of the sampled tokens) and ['old_log_probs'] (the student's)")
    distill = config.get("distill") if config is not None else None
    if distill is None:
        raise ValueError("on_policy_distill needs config.distill (algorithm.distill: kl_coef, "
                         "task_reward_weight)")
    kl_coef = float(distill["kl_coef"])
    task_weight = float(distill["task_reward_weight"])
    adv = _where_mask(kl_coef * (teacher_log_prob - old_log_probs), response_mask.bool())
    if task_weight:
        task, _ = compute_grpo_outcome_advantage(
            token_level_rewards, response_mask, index,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon)
        adv = adv + task_weight * task
    return adv, adv


def distill_metrics(data: Any) -> dict[str, float]:
    """``distill/reverse_kl`` (mean of ``log p_student - log p_teacher`` over the model's
    tokens) and ``distill/teacher_logprob`` (the teacher's mean log-prob of them)."""
    batch = data.batch
    mask = batch["response_mask"].bool()
    if not mask.any():
        return {}
    teacher = batch["teacher_log_prob"][mask]
    student = batch["old_log_probs"][mask]
    return {"distill/reverse_kl": float((student - teacher).mean()),
            "distill/teacher_logprob": float(teacher.mean())}


def thin_group_rows(index: Any, valid: np.ndarray, min_valid: int = 2) -> np.ndarray:
    """(B,) bool: the valid rows of the groups left too thin to train once their invalid
    rows leave them: groups (rows sharing a uid in ``index``) with at least one row not
    ``valid`` and fewer than ``min_valid`` valid rows. A group that lost nothing is never
    thin (n = 1 stays trainable). The caller takes the invalid rows out of their groups
    (a uid of their own, a zero response mask), so a group's statistics are those of its
    valid rows alone, and drops these rows too (an estimate from one sample is no group
    estimate: GRPO would give it its raw score)."""
    valid = np.asarray(valid, dtype=bool)
    if len(index) != valid.shape[0]:
        raise ValueError(f"index has {len(index)} entries but valid has {valid.shape[0]}")
    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(index):
        groups.setdefault(uid, []).append(row)
    thin = np.zeros(valid.shape[0], dtype=bool)
    for rows in groups.values():
        kept = [r for r in rows if valid[r]]
        if len(kept) < len(rows) and len(kept) < min_valid:
            thin[kept] = True
    return thin


def compute_response_mask(data: Any) -> torch.Tensor:
    """The response part of the attention mask: ``attention_mask[:, -R:]`` (B, R)."""
    response_length = data.batch["responses"].shape[-1]
    return data.batch["attention_mask"][:, -response_length:]


def compute_advantage(
    data: Any,
    adv_estimator: str | AdvantageEstimator,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> Any:
    """Fill ``data.batch["advantages"]`` and ``data.batch["returns"]`` and return ``data``.

    Reads ``batch["token_level_rewards"]``, ``batch["response_mask"]`` (computed from
    ``attention_mask`` and ``responses`` and stored when absent), ``batch["values"]``
    (gae), ``batch["reward_baselines"]`` (remax), the keys of the estimator's
    ``EstimatorNeeds.batch_keys`` and ``non_tensor_batch["uid"]``.
    ``num_repeat`` is accepted for verl compatibility and unused: groups come from uids.
    An agent episode of several rows (``non_tensor_batch["episode_id"]`` and
    ``["episode_row"]``, agent mode) is one group member: the estimator runs on the reward
    rows and the other rows take their episode's advantage (agentrl/algos/segments.py).
    ``config`` (``algorithm``) is passed through to the estimator.
    """
    fn = get_adv_estimator_fn(adv_estimator)
    batch = data.batch
    if "token_level_rewards" not in batch.keys():
        raise KeyError("compute_advantage needs data.batch['token_level_rewards']")
    if "response_mask" not in batch.keys():
        batch["response_mask"] = compute_response_mask(data)
    index = data.non_tensor_batch.get("uid")
    index = np.asarray(index, dtype=object) if index is not None else None
    # what an estimator reads beyond the common arguments, by the batch key's name
    extra = {key: batch[key] for key in estimator_needs(adv_estimator).batch_keys
             if key in batch.keys()}
    rows = slice(None)
    episode_row = data.non_tensor_batch.get("episode_row")
    if episode_row is not None and any(int(r) for r in episode_row):
        # an agent episode of several rows: the estimator sees its reward row alone
        primary, episodes = episode_rows(data.non_tensor_batch["episode_id"], episode_row)
        rows = torch.as_tensor(np.flatnonzero(primary))

    def pick(value: Any) -> Any:
        return value if value is None or isinstance(rows, slice) else value[rows]

    with torch.no_grad():
        advantages, returns = fn(
            pick(batch["token_level_rewards"]),
            pick(batch["response_mask"]),
            index if index is None or isinstance(rows, slice) else index[rows.numpy()],
            values=pick(batch.get("values", None)),
            gamma=gamma,
            lam=lam,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
            reward_baselines=pick(batch.get("reward_baselines", None)),
            config=config,
            **{key: pick(value) for key, value in extra.items()},
        )
        if not isinstance(rows, slice):
            advantages, returns = broadcast_episode_advantages(
                advantages, returns, batch["response_mask"], primary, episodes,
                batch.get("values", None))  # fmt: skip
    batch["advantages"] = advantages
    batch["returns"] = returns
    return data
