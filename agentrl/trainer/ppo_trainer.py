"""PPOTrainer: the single-controller fit loop (verl's RayPPOTrainer), for PPO, GRPO and relatives.

    from agentrl.trainer import PPOTrainer, run_train
    history = run_train(load_config("recipe.yaml"))     # build, fit, close
    # or: trainer = PPOTrainer(cfg); history = trainer.fit(); trainer.close()

The driver holds the data loaders, the reward managers and the tracker, and calls the worker
groups (worker_setup.py, docs/workers.md). One step, each stage in the module named for it:

    batch source: rollout (remax: greedy baseline) -> reward     batch_source.py, scoring.py,
        [more batches until enough prompts disagree]             dynamic_sampling.py, replay.py
    -> old and ref log-probs, values -> KL-in-reward, advantage -> critic, actor  policy_step.py
    -> metrics; validation (every test_freq steps and after the last)      validation.py
    -> checkpoint (every save_freq steps and after the last)          run_checkpoints.py

The stages get a `StepContext` (step_context.py), built once the workers have started, not
the trainer. The hang guard (hang_guard.py) times and watches every stage. The off-policy trainer
(off_policy.py) is this class with another batch source. Departures from verl: uids are
`"{step}-{row}"` (a resumed run sees the same batch); a FAILED rollout is a group of its own
(scoring.isolate_failed), and so is one hit by an infrastructure failure with
`rollout.on_infra_error: mask` (scoring.settle_infra_failures); `trainer.balance_batch` evens tokens across ranks (balance.py).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from tqdm.auto import tqdm

from agentrl.algos import estimator_needs, get_kl_controller
from agentrl.config import ConfigError
from agentrl.config.validate import training_problems
from agentrl.models.tokenizer import load_tokenizer
from agentrl.protocol import DataProto
from agentrl.reward import load_reward_manager
from agentrl.trainer import checkpointing as ckpt
from agentrl.trainer import trainer_settings as ts
from agentrl.trainer import worker_setup
from agentrl.trainer.alerts import BehaviourMonitor
from agentrl.trainer.batch_source import BatchSource, RolloutInStep, Update, rollout_step
from agentrl.trainer.dump import dump_trajectories
from agentrl.trainer.hang_guard import HangGuard
from agentrl.trainer.metrics import (
    compute_timing_metrics,
    progress_postfix,
    timer,
    train_step_metrics,
)
from agentrl.trainer.policy_step import policy_step
from agentrl.trainer.preflight import check_run_inputs
from agentrl.trainer.run_checkpoints import RunCheckpoints
from agentrl.trainer.scoring import score
from agentrl.trainer.step_context import StepContext
from agentrl.trainer.tracing import StepTrace
from agentrl.trainer.tracking import Tracking
from agentrl.trainer.validation import validate
from agentrl.utils.seeding import seed_everything

logger = logging.getLogger(__name__)
# a step of a batch source: (ctx, step, timing, update) -> (updated batch, metrics)
RunStep = Callable[[StepContext, int, dict[str, float], Update], tuple[DataProto, dict[str, float]]]


class PPOTrainer:
    """See the module docstring; `config` is the full validated tree (`load_config`);
    `source`: where each step's batch comes from (default: rollout in the step)."""

    def __init__(self, config: DictConfig, source: BatchSource | None = None) -> None:
        self.config = config
        self.source: BatchSource = source or RolloutInStep()
        seed_everything(int(config.trainer.seed))  # the driver's streams (reward functions)
        self.use_critic = estimator_needs(config.algorithm.adv_estimator).critic
        self.use_reference_policy = worker_setup.uses_reference_policy(config)
        self.n_workers = worker_setup.n_workers(config)
        if problems := training_problems(config):
            raise ConfigError(problems)
        check_run_inputs(config)  # data, tools, device: before the tokenizer and any model
        checkpoint = ts.CheckpointSettings.from_config(config.trainer)
        resume_from = ckpt.resume_path(checkpoint)  # a bad path fails before workers
        self.tokenizer = load_tokenizer(
            config.data.tokenizer or config.actor_rollout_ref.model.path,
            trust_remote_code=bool(config.data.trust_remote_code),
            chat_template=config.actor_rollout_ref.model.custom_chat_template,
        )
        loaders = worker_setup.create_loaders(config, self.tokenizer)
        self.train_dataloader, self.val_dataloader = loaders.train, loaders.val
        self.total_training_steps = loaders.total_training_steps
        self.worker_config = worker_setup.worker_config(
            config, self.total_training_steps, worker_setup.default_canary_prompts(config, loaders))
        reward_args = (config.reward_model, config.custom_reward_function, self.tokenizer)
        key = config.data.reward_fn_key
        self.reward_fn = load_reward_manager(*reward_args, reward_fn_key=key, num_examine=0)
        self.val_reward_fn = load_reward_manager(*reward_args, reward_fn_key=key, num_examine=1)
        algorithm = config.algorithm
        self.kl_ctrl = get_kl_controller(algorithm.kl_ctrl) if algorithm.use_kl_in_reward else None
        self.monitor = BehaviourMonitor(ts.AlertSettings.from_config(config.trainer.alerts))
        self.tracking = Tracking(config.trainer.project_name, config.trainer.experiment_name,
                                 default_backend=list(config.trainer.logger), config=config)
        self.trace = StepTrace(bool(config.trainer.trace), self.tracking.log_dir / "trace")
        self.hang_guard = HangGuard(ts.HangGuardSettings.from_config(config.trainer))
        self.validation = ts.ValidationSettings.from_config(config.trainer)
        self.watchdog = self.hang_guard.watchdog
        self.checkpoints = RunCheckpoints(checkpoint, resume_from, self.train_dataloader,
                                          self.kl_ctrl, self.monitor, self.source)  # fmt: skip
        self.global_steps = 0
        self.val_metrics: dict[str, float] = {}
        self.workers: worker_setup.Workers | None = None
        self.context: StepContext | None = None  # what the stages get (init_workers)
        self._checkpoint_loaded = False

    # the worker groups (None before init_workers)
    models = property(lambda self: self.workers.models if self.workers else None)
    group = property(lambda self: self.workers.group if self.workers else None)
    actor_rollout_wg = property(lambda self: self.models.actor_rollout if self.models else None)
    critic_wg = property(lambda self: self.models.critic if self.models else None)
    rm_wg = property(lambda self: self.models.reward_model if self.models else None)
    resume_from = property(lambda self: self.checkpoints.resume_from)  # None: a fresh start

    def worker_group_kind(self) -> str:
        """`in_process` or `ray` from `trainer.worker_group` (auto: see the config)."""
        return worker_setup.worker_group_kind(self.config)

    def init_workers(self) -> None:
        """Start the worker group (in-process or Ray) and load the models."""
        self.workers = self.source.start_workers(self.config, self.worker_config)
        if (loop := self.workers.rollout_event_loop()) is not None:  # in a hang report
            self.watchdog.register_loop(loop, "rollout")
        self.context = StepContext.of(
            self.config, self.models, reward_fn=self.reward_fn, kl_ctrl=self.kl_ctrl,
            trace=self.trace, watchdog=self.watchdog, stage=self.stage, n_workers=self.n_workers,
            total_training_steps=self.total_training_steps)  # fmt: skip

    def fit(self) -> list[dict[str, float]]:
        """Train to `total_training_steps`; returns (and logs) one metrics dict per step."""
        if self.workers is None:
            self.init_workers()
        if not self._checkpoint_loaded:
            self.load_checkpoint()
        ckpt.save_resolved_config(self.config, self.checkpoints.root)
        history: list[dict[str, float]] = []
        if self.val_dataloader is not None and self.config.trainer.val_before_train:
            self.val_metrics = self.validate()
            self.tracking.log(self.val_metrics, step=self.global_steps)
        if self.config.trainer.val_only:
            return history
        self.hang_guard.start()
        try:
            with self.source.running(self.context, self.batches(), self.global_steps,
                                     self.checkpoints.resumed):  # fmt: skip
                self._train(history)
        finally:
            self.hang_guard.stop()
        return history

    def _train(self, history: list[dict[str, float]]) -> None:
        """`fit`'s steps, each step's metrics appended to `history`; a hang (the watchdog)
        saves the last finished step and raises, the batch source still running."""
        try:
            bar = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="rl",
                       unit="step")  # fmt: skip
            with bar:
                while self.global_steps < self.total_training_steps:
                    self.global_steps += 1
                    with self.trace.step(self.global_steps):  # trainer.trace (tracing.py)
                        metrics, stop = self._fit_step()
                    history.append(metrics)
                    bar.set_postfix(progress_postfix(metrics), refresh=False)
                    bar.update(1)
                    if stop:
                        break
            self.trace.flush()  # trainer.trace: every step's file is on disk when fit returns
        except Exception as err:
            hang = self.hang_guard.hang_error(err, self.save_checkpoint)
            if hang is None or hang is err:
                raise
            raise hang from err

    def _fit_step(self) -> tuple[dict[str, float], bool]:
        """Step `global_steps` of `fit` from the batch source, then alerts, validation,
        checkpoint and the tracker; returns its metrics and whether to stop (an alert with
        `trainer.alerts.stop_on_alert`: a checkpoint is saved first)."""
        step = self.global_steps
        self.hang_guard.remember(lambda: self.checkpoints.driver_state(step - 1))
        metrics = self._run_step(self.source.run_step)
        alerts, alert_metrics = self.monitor.observe(step, metrics)
        metrics |= alert_metrics
        stop = bool(alerts) and self.config.trainer.alerts.stop_on_alert
        metrics |= self._after_step(force_save=stop)
        self.tracking.log(metrics, step=step)
        if stop:
            logger.error("stopping at step %d (trainer.alerts.stop_on_alert): %s; a checkpoint "
                         "was saved", step, "; ".join(a.rule for a in alerts))  # fmt: skip
        return metrics, stop

    def batches(self) -> Iterator[dict[str, Any]]:
        """The loader's batches, epoch after epoch (the loader moves on by itself)."""
        while True:
            yield from self.train_dataloader

    def train_step(
        self, batch_dict: dict[str, Any], more_batches: Iterator[dict[str, Any]] | None = None
    ) -> dict[str, float]:
        """One step on one batch of prompts, rolled out in the step: rollout -> reward ->
        advantage -> update. With `algorithm.filter_groups` (DAPO's dynamic sampling)
        further batches are drawn from `more_batches` until enough prompts disagree."""
        return self._run_step(lambda ctx, step, timing, update: rollout_step(
            ctx, batch_dict, more_batches, step, timing, update))

    def _run_step(self, run: RunStep) -> dict[str, float]:
        """Step `global_steps`: `run` gets the batch, updates on it (`policy_step`) and does
        the source's after-update work (the off-policy weight sync); then every metric."""
        step, timing, ctx = self.global_steps, {}, self.context
        update = functools.partial(policy_step, step=step, ctx=ctx, timing=timing)
        with timer("step", timing):
            data, metrics = run(ctx, step, timing, update)
        if self.config.trainer.rollout_data_dir:
            dump_trajectories(Path(self.config.trainer.rollout_data_dir), data, step,
                              self.tokenizer)  # fmt: skip
        metrics |= train_step_metrics(data, timing, self.n_workers, self.use_critic,
                                 self.config.data.reward_fn_key)
        metrics["training/global_step"] = float(step)
        metrics["training/epoch"] = float(self.train_dataloader.epoch)
        sampler = self.train_dataloader.sampler
        if callable(getattr(sampler, "update", None)):  # a curriculum (data.sampler)
            sampler.update(batch=data)
        return metrics

    def _after_step(self, force_save: bool = False) -> dict[str, float]:
        """Validation and checkpoint when due (every N steps, after the last step, and when
        `force_save`)."""
        trainer, step = self.config.trainer, self.global_steps
        last = step >= self.total_training_steps
        timing: dict[str, float] = {}
        metrics: dict[str, float] = {}
        if self.val_dataloader is not None and (
            last or (trainer.test_freq > 0 and step % trainer.test_freq == 0)
        ):
            with self.stage("testing", timing):
                self.val_metrics = self.validate()
            metrics |= self.val_metrics
        if force_save or last or (trainer.save_freq > 0 and step % trainer.save_freq == 0):
            with self.stage("save_checkpoint", timing):
                self.save_checkpoint(final=force_save or last)  # the run's last: + hf_model
        return metrics | compute_timing_metrics(timing)

    @contextlib.contextmanager
    def stage(self, name: str, timing: dict[str, float]) -> Iterator[None]:
        """Time a stage (`timing_s/{name}`, traced) and watch it (`trainer.watchdog_s`)."""
        with (self.watchdog.stage(name, f"step {self.global_steps}"),
              timer(name, timing, self.trace.stages)):  # fmt: skip
            yield

    def validate(self) -> dict[str, float]:
        """Roll out the validation set with `rollout.val_kwargs` and score it."""
        if self.val_dataloader is None:
            return {}
        return validate(self.actor_rollout_wg, self.val_dataloader,
                        lambda data: score(data, self.val_reward_fn, self.rm_wg), self.tokenizer,
                        self.validation, self.config.data.reward_fn_key, self.global_steps)

    def save_checkpoint(self, state: dict[str, Any] | None = None, final: bool = False) -> Path:
        """Checkpoint the models and the driver's `state` (default: now's) as its step;
        `final`: the run's last, with a Hugging Face model (run_checkpoints.py)."""
        state = state or self.checkpoints.driver_state(self.global_steps)
        return self.checkpoints.save(self.models, state, final=final)

    def load_checkpoint(self) -> int:
        """Resume per `trainer.resume_mode`: worker states, data loader position and global
        step; returns the step to continue after (0 for a fresh start)."""
        if self.workers is None:
            self.init_workers()
        self._checkpoint_loaded = True
        self.global_steps = self.checkpoints.resume(self.models, self.global_steps)
        return self.global_steps

    def close(self) -> None:
        """Finish tracking, stop the rollout and the workers (and Ray if we started it)."""
        self.hang_guard.stop()
        self.trace.close()  # trainer.trace: the files still pending are written
        try:
            self.tracking.finish()
        finally:
            workers, self.workers, self.context = self.workers, None, None
            self.source.close(workers)

    def __enter__(self) -> PPOTrainer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
