"""Where a training step's batch comes from: the one thing (with when weights sync) in which
the sync and the off-policy trainers differ.

`PPOTrainer` (trainer/ppo_trainer.py) asks its source this, in this order, and nothing
else; from `running` on, the calls get the run's `StepContext` (step_context.py: the worker
groups, the config sections, the reward function, the trace, the watchdog and the stage
timer), never the trainer:

    workers = source.start_workers(config, worker_config)          # init_workers
    with source.running(ctx, batches, global_step, resumed):       # fit
        data, metrics = source.run_step(ctx, step, timing, update)  # each step
    source.state_dict()                                            # a checkpoint's share
    source.close(workers)                                          # close

`update(data, sync_weights=..., metrics=...)` is the step's `policy_step` (policy_step.py):
the source gets its batch, hands it to `update`, and does what the update needs after it.

`RolloutInStep` (here, `trainer.mode: sync`) rolls the loader's next batch out inside the
step, scores it, and with `algorithm.filter_groups` generates more until enough prompts
disagree; the actor syncs the rollout's weights at the end of its update. The off-policy
source (`ProducerBatchSource`, trainer/off_policy.py) starts servers of its own before the
workers, takes finished groups from a producer that generates on them, and syncs the
weights after the update.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
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
from agentrl.trainer.worker_setup import Workers, start_workers


class Update(Protocol):
    """The step's policy update (`policy_step` with the step and its context bound): adds
    to `metrics`, returns the updated batch; `sync_weights`: the actor syncs the rollout's
    weights at the end of its update."""

    def __call__(self, data: DataProto, *, sync_weights: bool,
                 metrics: dict[str, float]) -> DataProto: ...  # fmt: skip


class BatchSource(ABC):
    """What the trainer asks of a batch source (module docstring). The defaults are a
    source whose rollout lives in the workers: they start as the trainer configured them,
    and a checkpoint holds nothing of the source."""

    def start_workers(self, config: DictConfig, worker_config: DictConfig) -> Workers:
        """Start the worker group and load its models (`worker_setup.start_workers`);
        `worker_config` is the trainer's, which a source that changes it copies."""
        return start_workers(config, worker_config)

    @abstractmethod
    def running(self, ctx: StepContext, batches: Iterator[dict[str, Any]], global_step: int,
                resumed: dict[str, Any]) -> contextlib.AbstractContextManager[None]:  # fmt: skip
        """Around `fit`'s steps: the loader's batches, epoch after epoch, the step trained
        last (0 on a fresh start) and the driver state the run resumed from (a checkpoint's
        `data.pt`, with the source's `state_dict`; empty on a fresh start)."""

    @abstractmethod
    def run_step(self, ctx: StepContext, step: int, timing: dict[str, float],
                 update: Update) -> tuple[DataProto, dict[str, float]]:  # fmt: skip
        """Step `step`: its scored trajectories through `update`; returns the updated batch
        and the step's metrics of getting it (and of the weight sync)."""

    def state_dict(self) -> dict[str, Any]:
        """The source's share of a checkpoint's driver state (none by default); `running`
        gets it back in the state a run resumes from."""
        return {}

    def close(self, workers: Workers | None) -> None:
        """Close the workers `start_workers` started (None: they never started)."""
        if workers is not None:
            workers.close()


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


def rollout_step(ctx: StepContext, batch_dict: dict[str, Any],
                 more_batches: Iterator[dict[str, Any]] | None, step: int,
                 timing: dict[str, float], update: Update) -> tuple[DataProto, dict[str, float]]:  # fmt: skip
    """A sync step: `rollout_batch`, then `update`, which syncs the rollout's weights."""
    data, metrics = rollout_batch(ctx, batch_dict, more_batches, step, timing)
    return update(data, sync_weights=True, metrics=metrics), metrics


class RolloutInStep(BatchSource):
    """`trainer.mode: sync`: each step rolls out the loader's next batch (module doc)."""

    def __init__(self) -> None:
        self.batches: Iterator[dict[str, Any]] | None = None

    @contextlib.contextmanager
    def running(self, ctx: StepContext, batches: Iterator[dict[str, Any]], global_step: int,
                resumed: dict[str, Any]) -> Iterator[None]:  # fmt: skip
        self.batches = batches
        try:
            yield
        finally:
            self.batches = None

    def run_step(self, ctx: StepContext, step: int, timing: dict[str, float],
                 update: Update) -> tuple[DataProto, dict[str, float]]:  # fmt: skip
        assert self.batches is not None, "run_step runs inside running()"
        return rollout_step(ctx, next(self.batches), self.batches, step, timing, update)


__all__ = ["BatchSource", "RolloutInStep", "Update", "generate_and_score", "rollout_batch",
           "rollout_step"]
