"""The policy step: from scored trajectories to updated models.

    balance (trainer.balance_batch) -> old log-probs (or in the update: fused) -> ref log-probs
    -> teacher log-probs (on-policy distillation) -> values
    -> KL-in-reward + advantage (driver, agentrl.algos) -> update_critic -> update_actor

Agent mode's episodes of several rows (segment_rows.py) get filler rows up to a whole
number of mini-batches first, taken out again at the end, and ``actor.segment_weighting:
episode`` weighs each episode the same, after the advantages.

`policy_step` runs the stages above on the worker groups of the step's `StepContext`
(step_context.py), each inside the trainer's `stage` (timed, watched for hangs), and is the same for the sync and the
off-policy trainers (they differ in where the batch comes from and when weights sync). The
workers' own update loop (mini-batches, micro-batches, optimizer steps) is
agentrl/workers/update.py; the advantage estimators are agentrl/algos/advantage.py.
"""

from __future__ import annotations

from typing import Any

from agentrl.algos import apply_kl_penalty, compute_advantage, distill_metrics
from agentrl.protocol import DataProto
from agentrl.trainer.balance import balance_batch
from agentrl.trainer.metrics import compute_rollout_logprob_gap
from agentrl.trainer.segment_rows import drop_fillers, fill_rows, weight_episodes
from agentrl.trainer.step_context import StepContext


def rewards_and_advantages(data: DataProto, algorithm: Any, n: int,
                       kl_ctrl: Any = None) -> dict[str, float]:  # fmt: skip
    """`token_level_rewards` (the scores, less the KL penalty when `kl_ctrl`), then the
    configured estimator's `advantages` and `returns` (algos.compute_advantage), in place;
    returns the KL metrics."""
    metrics: dict[str, float] = {}
    if kl_ctrl is not None:
        data, metrics = apply_kl_penalty(data, kl_ctrl, algorithm.kl_penalty)
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    compute_advantage(
        data,
        algorithm.adv_estimator,
        gamma=float(algorithm.gamma),
        lam=float(algorithm.lam),
        num_repeat=n,
        norm_adv_by_std_in_grpo=bool(algorithm.norm_adv_by_std_in_grpo),
        config=algorithm,
    )
    return metrics


def policy_step(
    data: DataProto,
    step: int,
    ctx: StepContext,
    *,
    sync_weights: bool,
    metrics: dict[str, float],
    timing: dict[str, float],
) -> DataProto:
    """Scored trajectories -> old (and ref) log-probs, values -> advantages -> critic and
    actor updates; adds to `metrics` and `timing`, returns the batch with it all. The actor
    starts updating after `trainer.critic_warmup` steps; it syncs the rollout's weights
    itself when `sync_weights` (the off-policy trainer syncs when its producer allows).
    The step trace (`ctx.trace`, trainer.trace) is given the workers' update spans."""
    models, stage = ctx.models, ctx.stage
    data = fill_rows(data, ctx.row_multiple)  # agent mode's segment rows (segment_rows.py)
    if ctx.trainer_cfg.balance_batch:
        data, balance_metrics = balance_batch(data, ctx.n_workers)
        metrics |= balance_metrics
    actor = models.actor_rollout
    updates = step > ctx.trainer_cfg.critic_warmup
    # nothing before the update reads them (no KL in the reward, no distillation): the
    # update makes them itself, its first mini-batch from its own forward (PPOActor)
    fuse = ctx.fuse_old_log_prob and updates and ctx.kl_ctrl is None and not models.use_teacher
    if not fuse:
        with stage("old_log_prob", timing):
            data = data.union(actor.compute_log_prob(data))
        metrics |= compute_rollout_logprob_gap(data)
    if models.use_reference_policy:
        with stage("ref", timing):
            data = data.union(actor.compute_ref_log_prob(data))
    if models.use_teacher:
        teacher = models.remote_teacher or actor
        with stage("teacher", timing):
            data = data.union(teacher.compute_teacher_log_prob(data))
        metrics |= distill_metrics(data)
    if models.critic is not None:
        with stage("values", timing):
            data = data.union(models.critic.compute_values(data))
    with stage("adv", timing):
        n = int(ctx.rollout.n)
        metrics |= rewards_and_advantages(data, ctx.algorithm, n, ctx.kl_ctrl)
        if ctx.segment_weighting == "episode":
            weight_episodes(data)
    if models.critic is not None:
        with stage("update_critic", timing):
            metrics |= models.critic.update_critic(data).meta_info["metrics"]
    if updates:
        data.meta_info["sync_weights"] = sync_weights
        data.meta_info["fuse_old_log_prob"] = fuse
        with stage("update_actor", timing):
            out = actor.update_actor(data)
        metrics |= out.meta_info["metrics"]
        ctx.trace.absorb(out)
        if fuse:
            data = data.union(out.select(batch_keys=["old_log_probs"], meta_info_keys=[]))
            metrics |= compute_rollout_logprob_gap(data)
    return drop_fillers(data)
