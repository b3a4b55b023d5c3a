"""Where a training step's batch comes from: the one thing (with when weights sync) in which
the sync and the off-policy trainers differ.

`PPOTrainer` runs the same step for both (trainer/ppo_trainer.py); each call gets the step's
`StepContext` (step_context.py: the worker groups, the config sections, the reward function,
the trace, the watchdog and the stage timer), never the trainer:

    data, metrics = source.next_batch(ctx, step, timing)         # scored trajectories
    data = policy_step(data, ...)                                 # trainer/policy_step.py
    metrics |= source.after_update(ctx, step, timing)            # e.g. weight sync
    metrics |= source.step_metrics(data, step, timing)

`RolloutInStep` (here, `trainer.mode: sync`) rolls the loader's next batch out inside the
step, scores it, and with `algorithm.filter_groups` generates more until enough prompts
disagree; the actor syncs the rollout's weights at the end of its update. The off-policy
source (`ProducerBatchSource`, trainer/off_policy.py) takes finished groups from a
producer that generates on servers of its own, and syncs the weights after the update.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

from omegaconf import DictConfig

from agentrl.algos import estimator_needs
from agentrl.protocol import DataProto
from agentrl.trainer.dynamic_sampling import collect_informative
from agentrl.trainer.replay import generate_or_replay
from agentrl.trainer.scoring import (
    greedy_baseline,
    isolate_failed,
    prompt_batch,
    score,
    settle_infra_failures,
)
from agentrl.trainer.step_context import StepContext


class BatchSource(Protocol):
    """What the trainer asks of a batch source, in the order it asks."""

    #: the actor syncs the rollout's weights at the end of `update_actor`
    sync_weights_in_update: bool

    def prepare_workers(self, worker_config: DictConfig) -> DictConfig:
        """Before the worker group starts: the config the workers start with, made from the
        trainer's `worker_config` (a new one where the source changes it: the trainer's
        stays as it is)."""

    def workers_started(self, ctx: StepContext) -> None:
        """After the worker group has loaded its models."""

    def start(self, ctx: StepContext, batches: Iterator[dict[str, Any]],
              global_step: int) -> None:  # fmt: skip
        """Before the first step of `fit`: the loader's batches, epoch after epoch, and the
        step trained last (0 on a fresh start)."""

    def next_batch(self, ctx: StepContext, step: int,
                   timing: dict[str, float]) -> tuple[DataProto, dict[str, float]]:  # fmt: skip
        """Step `step`'s scored trajectories and the metrics of getting them."""

    def after_update(self, ctx: StepContext, step: int,
                     timing: dict[str, float]) -> dict[str, float]:  # fmt: skip
        """After the update, inside the step's time."""

    def step_metrics(self, data: DataProto, step: int,
                     timing: dict[str, float]) -> dict[str, float]:  # fmt: skip
        """The source's metrics of the finished step."""

    def stop(self) -> None:
        """After the last step of `fit` (or its failure)."""

    def state_dict(self) -> dict[str, Any]:
        """The source's share of a checkpoint's driver state."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def closing(self) -> contextlib.AbstractContextManager[None]:
        """Around the worker group's teardown in `close`."""


def rollout_batch(
    ctx: StepContext,
    batch_dict: dict[str, Any],
    more_batches: Iterator[dict[str, Any]] | None,
    step: int,
    timing: dict[str, float],
) -> tuple[DataProto, dict[str, float]]:
    """Roll out and score one loader batch in the step; with `algorithm.filter_groups`,
    further batches from `more_batches` until enough prompts have samples that disagree."""
    data = generate_and_score(ctx, batch_dict, step, timing)
    if not ctx.algorithm.filter_groups.enable:
        return data, {}
    more = None
    if more_batches is not None:
        def more(round_: int) -> DataProto:
            return generate_and_score(ctx, next(more_batches), step, timing, round_)
    return collect_informative(data, more, ctx.algorithm.filter_groups,
                               int(ctx.data.train_batch_size), step)  # fmt: skip


def generate_and_score(ctx: StepContext, batch_dict: dict[str, Any], step: int,
                       timing: dict[str, float], round_: int = 0) -> DataProto:  # fmt: skip
    """Stages `gen` (rollout, or its replay), `gen_max` (ReMax's greedy baseline) and
    `reward` on one loader batch; failed rollouts become groups of their own, and those hit
    by infrastructure failures are settled per `rollout.on_infra_error`."""
    models, rollout_cfg = ctx.models, ctx.rollout
    batch = prompt_batch(batch_dict, step, round_, rollout_cfg.temperature)
    ctx.trace.request(batch)  # trainer.trace: the rollout and the update record events
    with ctx.stage("gen", timing):
        data = generate_or_replay(models.actor_rollout, rollout_cfg, batch, step, round_)
    ctx.trace.absorb(data)
    if estimator_needs(ctx.algorithm.adv_estimator).greedy_baseline:
        with ctx.stage("gen_max", timing):
            data.batch["reward_baselines"] = greedy_baseline(
                models.actor_rollout, ctx.reward_fn, batch, len(data)
            )
    isolate_failed(data)
    with ctx.stage("reward", timing):
        data = score(data, ctx.reward_fn, models.reward_model)
    settle_infra_failures(data, rollout_cfg.on_infra_error, step)
    return data


class RolloutInStep:
    """`trainer.mode: sync`: each step rolls out the loader's next batch (module doc)."""

    sync_weights_in_update = True

    def __init__(self) -> None:
        self.batches: Iterator[dict[str, Any]] | None = None

    def prepare_workers(self, worker_config: DictConfig) -> DictConfig:
        return worker_config

    def workers_started(self, ctx: StepContext) -> None:
        pass

    def start(self, ctx: StepContext, batches: Iterator[dict[str, Any]],
              global_step: int) -> None:  # fmt: skip
        self.batches = batches

    def next_batch(self, ctx: StepContext, step: int,
                   timing: dict[str, float]) -> tuple[DataProto, dict[str, float]]:  # fmt: skip
        assert self.batches is not None, "start() first"
        return rollout_batch(ctx, next(self.batches), self.batches, step, timing)

    def after_update(self, ctx: StepContext, step: int,
                     timing: dict[str, float]) -> dict[str, float]:  # fmt: skip
        return {}

    def step_metrics(self, data: DataProto, step: int,
                     timing: dict[str, float]) -> dict[str, float]:  # fmt: skip
        return {}

    def stop(self) -> None:
        self.batches = None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def closing(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()
