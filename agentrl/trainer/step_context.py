"""StepContext: what a training step's stages use, and nothing else of the trainer.

    ctx = StepContext.of(config, models, reward_fn=..., kl_ctrl=..., trace=..., watchdog=...,
                         stage=..., n_workers=..., total_training_steps=...)
    data, metrics = source.run_step(ctx, step, timing, update)  # batch_source.py
    data = policy_step(data, step, ctx, ...)                     # policy_step.py: `update`

`PPOTrainer` builds it once, when its worker group has loaded the models (ppo_trainer.py),
and hands it to the batch source, the rollout stages and the policy step (batch_source.py,
off_policy.py, policy_step.py); no stage takes the trainer. `Models` is the worker groups a step calls; `Stage` is the
trainer's timed, watched stage (`with ctx.stage("gen", timing): ...`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from agentrl.trainer.segment_rows import row_multiple
from agentrl.trainer.tracing import StepTrace
from agentrl.trainer.watchdog import Watchdog

#: `stage(name, timing)`: time the block as `timing_s/{name}` (traced) and watch it for hangs
Stage = Callable[[str, dict[str, float]], AbstractContextManager[None]]


@dataclass
class Models:
    """The worker groups of a run: the actor (with its rollout and, when
    `use_reference_policy`, the reference policy; with `use_teacher`, the distillation
    teacher), the critic (GAE only) and a reward model (`reward_model.enable`); None where
    the run has none."""

    actor_rollout: Any
    critic: Any = None
    reward_model: Any = None
    use_reference_policy: bool = False
    use_teacher: bool = False  # on-policy distillation: a teacher scores the tokens
    remote_teacher: Any = None  # ... behind HTTP (trainer/teacher.py); else in the workers


@dataclass(frozen=True)
class StepContext:
    """The objects a step's stages use: the worker groups, the validated config sections
    they read, the training reward function, the KL controller, the step trace, the
    watchdog and the trainer's `stage` timer."""

    models: Models
    algorithm: DictConfig  # config.algorithm
    data: DictConfig  # config.data
    rollout: DictConfig  # config.actor_rollout_ref.rollout
    trainer_cfg: DictConfig  # config.trainer (balance_batch, critic_warmup)
    reward_fn: Any  # the training reward manager (load_reward_manager)
    kl_ctrl: Any  # algorithm.use_kl_in_reward: the KL controller (its value is checkpointed); else None
    trace: StepTrace  # trainer.trace
    watchdog: Watchdog  # trainer.watchdog_s
    stage: Stage
    n_workers: int  # ranks (trainer.balance_batch evens tokens across them)
    total_training_steps: int
    fuse_old_log_prob: bool = False  # actor.fuse_old_log_prob, with one PPO epoch
    segment_weighting: str = "token"  # actor.segment_weighting (segment_rows.py)
    row_multiple: int = 1  # the global mini-batch in rows: agent mode's filler rows fill to it

    @classmethod
    def of(cls, config: DictConfig, models: Models, *, reward_fn: Any, kl_ctrl: Any,
           trace: StepTrace, watchdog: Watchdog, stage: Stage, n_workers: int,
           total_training_steps: int) -> StepContext:  # fmt: skip
        """The context of a run of the validated `config` (its sections, not the tree)."""
        return cls(models=models, algorithm=config.algorithm, data=config.data,
                   rollout=config.actor_rollout_ref.rollout, trainer_cfg=config.trainer,
                   reward_fn=reward_fn, kl_ctrl=kl_ctrl, trace=trace, watchdog=watchdog,
                   stage=stage, n_workers=n_workers,
                   total_training_steps=total_training_steps,
                   fuse_old_log_prob=fused_old_log_prob(config.actor_rollout_ref.actor),
                   segment_weighting=str(config.actor_rollout_ref.actor.segment_weighting),
                   row_multiple=row_multiple(
                       config.actor_rollout_ref.actor.ppo_mini_batch_size,
                       config.actor_rollout_ref.rollout.n,
                       config.critic.ppo_mini_batch_size if models.critic is not None else None,
                   ))  # fmt: skip


def fused_old_log_prob(actor: DictConfig) -> bool:
    """Whether the update makes the old log-probs itself (``actor.fuse_old_log_prob``; it
    needs one PPO epoch, so other values keep the separate pass)."""
    return bool(actor.fuse_old_log_prob) and int(actor.ppo_epochs) == 1
