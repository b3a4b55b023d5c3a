"""PPOTrainer: the single-controller fit loop (verl's RayPPOTrainer), for PPO, GRPO and relatives.

    from agentrl.config import load_config
    from agentrl.trainer import PPOTrainer, run_train
    history = run_train(load_config("recipe.yaml"))     # build, fit, close
    # or: trainer = PPOTrainer(cfg); history = trainer.fit(); trainer.close()

The driver holds the data loaders, the reward managers and the tracker, and calls worker
groups (docs/workers.md): an ``ActorRolloutRefWorker`` (role ``actor_rollout_ref`` when a
reference policy is needed, i.e. ``actor.use_kl_loss`` or ``algorithm.use_kl_in_reward``,
else ``actor_rollout``) and, for ``algorithm.adv_estimator=gae``, a colocated
``CriticWorker``. One training step reads like CleanRL:

    rollout (generate_sequences; remax: a greedy baseline) -> reward -> old log-probs
    -> ref log-probs -> values -> KL-in-reward + advantage (driver, agentrl.algos)
    -> update_critic -> update_actor (after trainer.critic_warmup steps) -> metrics

then validation (every ``trainer.test_freq`` steps and after the last), a checkpoint (every
``trainer.save_freq`` steps and after the last; agentrl/trainer/checkpointing.py) and one
``Tracking.log``. Departures from verl: uids are ``"{step}-{row}"`` (deterministic, so a
resumed run sees the same batch); the actor starts updating after ``critic_warmup`` steps
(step > critic_warmup); a trajectory whose rollout FAILED is its own group (see
``isolate_failed``); with ``trainer.balance_batch`` the trajectories are reordered so
every data-parallel rank gets about the same number of tokens (agentrl/trainer/balance.py).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from agentrl.algos import apply_kl_penalty, compute_advantage, get_kl_controller
from agentrl.config import ConfigError
from agentrl.data import create_rl_dataset, create_train_dataloader, create_val_dataloader
from agentrl.distributed import InProcessWorkerGroup, RayWorkerGroup, ResourcePool, WorkerSpec
from agentrl.models.tokenizer import load_tokenizer
from agentrl.protocol import DataProto, to_object_array
from agentrl.reward import load_reward_manager
from agentrl.trainer import checkpointing as ckpt
from agentrl.trainer.alerts import BehaviourMonitor
from agentrl.trainer.balance import balance_batch
from agentrl.trainer.dump import dump_trajectories, trajectory_ids
from agentrl.trainer.dynamic_sampling import first_prompts, informative_rows
from agentrl.trainer.metrics import (
    compute_data_metrics,
    compute_rollout_logprob_gap,
    compute_throughput_metrics,
    compute_timing_metrics,
    failed_rows,
    merge_batch_metrics,
    process_validation_metrics,
    timer,
)
from agentrl.trainer.tracking import Tracking
from agentrl.trainer.watchdog import HangReport, StageHangError, Watchdog
from agentrl.utils.seeding import seed_everything
from agentrl.workers import ActorRolloutRefWorker, CriticWorker
from agentrl.workers.reward_model import RewardModelWorker

logger = logging.getLogger(__name__)


def isolate_failed(data: DataProto) -> int:
    """Give every FAILED trajectory a uid of its own; returns how many there are.

    A failed rollout keeps a zero loss mask, so it never trains; but its reward (usually 0)
    would still enter its group's mean and std and shift the advantages of the samples that
    did finish. As a group of one it drops out of those statistics (and its advantage is 0).
    """
    failed = failed_rows(data)
    if failed.any():
        uids = list(data.non_tensor_batch["uid"])
        for i in np.flatnonzero(failed):
            uids[i] = f"{uids[i]}/failed-{i}"
        data.non_tensor_batch["uid"] = to_object_array(uids, "uid")
    return int(failed.sum())


# stages of a step that change no model: a hang in one can stop with the last step saved
STAGES_BEFORE_UPDATE = frozenset(
    {"gen", "gen_max", "reward", "old_log_prob", "ref", "values", "adv", "wait_for_rollouts"}
)

# metric -> its short name in the progress bar
_PROGRESS_KEYS = {
    "critic/score/mean": "reward",
    "rollout/tool_call_rate": "tool_rate",
    "response_length/mean": "resp_len",
}


def progress_postfix(metrics: dict[str, float]) -> dict[str, str]:
    """The few numbers of a step the progress bar shows (those present)."""
    return {short: f"{metrics[k]:.3g}" for k, short in _PROGRESS_KEYS.items() if k in metrics}


def worker_config(config: DictConfig, total_training_steps: int) -> DictConfig:
    """A read-only copy of ``config`` with the optimizers' ``total_training_steps`` set."""
    copy = OmegaConf.merge(
        OmegaConf.to_container(config, resolve=True),
        {
            "actor_rollout_ref": {
                "actor": {"optim": {"total_training_steps": total_training_steps}}
            },
            "critic": {"optim": {"total_training_steps": total_training_steps}},
        },
    )
    OmegaConf.set_readonly(copy, True)
    return copy


class PPOTrainer:
    """See the module docstring; ``config`` is the full validated tree (``load_config``)."""

    def __init__(self, config: DictConfig) -> None:
        self.config = config
        seed_everything(int(config.trainer.seed))  # the driver's streams (reward functions)
        self.use_critic = config.algorithm.adv_estimator == "gae"
        self.use_reference_policy = bool(
            config.actor_rollout_ref.actor.use_kl_loss or config.algorithm.use_kl_in_reward
        )
        self.n_workers = int(config.trainer.nnodes * config.trainer.n_gpus_per_node)
        self._check_config()
        self.resume_from = ckpt.resume_path(config.trainer)  # a bad path fails before workers
        self.tokenizer = load_tokenizer(
            config.data.tokenizer or config.actor_rollout_ref.model.path,
            trust_remote_code=bool(config.data.trust_remote_code),
            chat_template=config.actor_rollout_ref.model.custom_chat_template,
        )
        self._create_dataloaders()
        self.worker_config = worker_config(config, self.total_training_steps)
        reward_args = (config.reward_model, config.custom_reward_function, self.tokenizer)
        key = config.data.reward_fn_key
        self.reward_fn = load_reward_manager(*reward_args, reward_fn_key=key, num_examine=0)
        self.val_reward_fn = load_reward_manager(*reward_args, reward_fn_key=key, num_examine=1)
        self.kl_ctrl = (
            get_kl_controller(config.algorithm.kl_ctrl)
            if config.algorithm.use_kl_in_reward
            else None
        )
        self.monitor = BehaviourMonitor(config.trainer.alerts)
        self.tracking = Tracking(
            config.trainer.project_name,
            config.trainer.experiment_name,
            default_backend=list(config.trainer.logger),
            config=config,
        )
        self.watchdog = Watchdog(config.trainer.watchdog_s, on_hang=self._on_hang)
        self._hang: HangReport | None = None
        self._previous_handler: Any = None
        self._hang_signal = False  # our SIGUSR1 handler is installed (watchdog_action: stop)
        self._step_start_state: dict[str, Any] | None = None
        # the actor syncs the rollout's weights in update_actor (the off-policy modes: no)
        self.sync_weights_in_update = True
        self.global_steps = 0
        self.val_metrics: dict[str, float] = {}
        self.group: Any = None
        self.actor_rollout_wg: Any = None
        self.critic_wg: Any = None
        self.rm_wg: Any = None
        self._pool: ResourcePool | None = None
        self._ray_temp_dir: str | None = None
        self._checkpoint_loaded = False

    # ------------------------------------------------------------------ setup

    def _check_config(self) -> None:
        cfg = self.config
        problems = []
        if not cfg.data.train_files:
            problems.append("data.train_files must name the training parquet file(s)")
        if not cfg.actor_rollout_ref.model.path:
            problems.append("actor_rollout_ref.model.path must name the policy model")
        val_kwargs = cfg.actor_rollout_ref.rollout.val_kwargs
        greedy = not val_kwargs.do_sample or val_kwargs.temperature == 0
        if cfg.algorithm.adv_estimator == "remax" and (val_kwargs.n != 1 or not greedy):
            problems.append(
                "algorithm.adv_estimator=remax takes its greedy baseline with "
                "actor_rollout_ref.rollout.val_kwargs: set val_kwargs.n=1 and do_sample=false"
            )
        if cfg.trainer.worker_group == "in_process" and self.n_workers != 1:
            problems.append(
                f"trainer.worker_group=in_process runs one worker but trainer.nnodes x "
                f"trainer.n_gpus_per_node = {self.n_workers}; use worker_group=ray or auto"
            )
        if problems:
            raise ConfigError(problems)

    def _create_dataloaders(self) -> None:
        data_cfg = self.config.data
        train = create_rl_dataset(data_cfg.train_files, data_cfg, self.tokenizer)
        self.train_dataloader = create_train_dataloader(train, data_cfg)
        self.val_dataloader = None
        if data_cfg.val_files:
            val = create_rl_dataset(data_cfg.val_files, data_cfg, self.tokenizer)
            self.val_dataloader = create_val_dataloader(val, data_cfg)
        total = len(self.train_dataloader) * int(self.config.trainer.total_epochs)
        if self.config.trainer.total_training_steps is not None:
            total = min(total, int(self.config.trainer.total_training_steps))
        self.total_training_steps = total
        logger.info("%d training steps (%d batches per epoch)", total, len(self.train_dataloader))

    def worker_group_kind(self) -> str:
        """``in_process`` or ``ray`` from ``trainer.worker_group`` (auto: see the config)."""
        kind = self.config.trainer.worker_group
        if kind != "auto":
            return kind
        local = self.n_workers == 1 and self.config.ray_init.address is None
        return "in_process" if local else "ray"

    def init_workers(self) -> None:
        """Start the worker group (in-process or Ray) and load the models."""
        cfg, wcfg = self.config, self.worker_config
        role = "actor_rollout_ref" if self.use_reference_policy else "actor_rollout"
        chat_kwargs = OmegaConf.to_container(cfg.data.apply_chat_template_kwargs, resolve=True)
        specs = {
            "actor_rollout": WorkerSpec(
                ActorRolloutRefWorker,
                wcfg.actor_rollout_ref,
                role=role,
                seed=int(cfg.trainer.seed),
                chat_template_kwargs=chat_kwargs,
            )
        }
        if self.use_critic:
            specs["critic"] = WorkerSpec(CriticWorker, wcfg.critic, seed=int(cfg.trainer.seed))
        if cfg.reward_model.enable:
            specs["reward_model"] = WorkerSpec(RewardModelWorker, wcfg.reward_model,
                                               seed=int(cfg.trainer.seed))
        if self.worker_group_kind() == "in_process":
            self.group = InProcessWorkerGroup(specs, dist_timeout_s=float(cfg.trainer.dist_timeout))
        else:
            self.group = self._ray_group(specs)
        self.actor_rollout_wg = self.group.role("actor_rollout")
        self.actor_rollout_wg.init_model()
        if self.use_critic:
            self.critic_wg = self.group.role("critic")
            self.critic_wg.init_model()
        if cfg.reward_model.enable:
            self.rm_wg = self.group.role("reward_model")
            self.rm_wg.init_model()
        if isinstance(self.group, InProcessWorkerGroup):  # its engine's tasks, in a hang report
            rollout = getattr(self.group.worker("actor_rollout"), "rollout", None)
            if rollout is not None:
                self.watchdog.register_loop(rollout.loop.loop, "rollout")

    def _init_ray(self) -> None:
        """Connect to ``ray_init.address``, or start a local Ray (stopped by ``close``)."""
        import ray

        cfg = self.config
        if ray.is_initialized():
            return
        if cfg.ray_init.address is not None:
            ray.init(address=cfg.ray_init.address)
            return
        self._ray_temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short paths
        ray.init(num_cpus=cfg.ray_init.num_cpus, _temp_dir=self._ray_temp_dir,
                 include_dashboard=False)

    def _ray_group(self, specs: dict[str, WorkerSpec]) -> RayWorkerGroup:
        cfg = self.config
        self._init_ray()
        use_gpu = cfg.trainer.device != "cpu" and torch.cuda.is_available()
        self._pool = ResourcePool(
            [int(cfg.trainer.n_gpus_per_node)] * int(cfg.trainer.nnodes), use_gpu=use_gpu
        )
        return RayWorkerGroup(
            self._pool,
            specs,
            dist_timeout_s=float(cfg.trainer.dist_timeout),
            error_grace_s=float(cfg.trainer.worker_error_grace),
            setup_timeout_s=float(cfg.trainer.ray_wait_register_center_timeout),
        )

    # ------------------------------------------------------------------ the loop

    def fit(self) -> list[dict[str, float]]:
        """Train to ``total_training_steps``; returns (and logs) one metrics dict per step."""
        if self.group is None:
            self.init_workers()
        if not self._checkpoint_loaded:
            self.load_checkpoint()
        self._save_config()
        history: list[dict[str, float]] = []
        if self.val_dataloader is not None and self.config.trainer.val_before_train:
            self.val_metrics = self.validate()
            self.tracking.log(self.val_metrics, step=self.global_steps)
        if self.config.trainer.val_only:
            return history
        self._start_training()
        try:
            with tqdm(
                total=self.total_training_steps, initial=self.global_steps, desc="rl", unit="step"
            ) as bar:
                while self.global_steps < self.total_training_steps:
                    self.global_steps += 1
                    metrics = self._next_step()
                    alerts, alert_metrics = self.monitor.observe(self.global_steps, metrics)
                    metrics |= alert_metrics
                    stop = bool(alerts) and self.config.trainer.alerts.stop_on_alert
                    metrics |= self._after_step(force_save=stop)
                    self.tracking.log(metrics, step=self.global_steps)
                    history.append(metrics)
                    bar.set_postfix(progress_postfix(metrics), refresh=False)
                    bar.update(1)
                    if stop:
                        logger.error(
                            "stopping at step %d (trainer.alerts.stop_on_alert): %s; a "
                            "checkpoint was saved", self.global_steps,
                            "; ".join(a.rule for a in alerts))
                        break
        except Exception as err:
            if self._hang is None:
                raise
            # the signal's StageHangError, possibly wrapped by a worker call it interrupted
            hang = err if isinstance(err, StageHangError) else StageHangError(self._hang)
            self._stop_after_hang(hang)
            if hang is err:
                raise
            raise hang from err
        finally:
            self._stop_training()
        return history

    def _save_config(self) -> None:
        """Write the resolved config to ``default_local_dir/config.yaml``, the dump
        directories made absolute, so ``agentrl report`` finds them from anywhere."""
        config = OmegaConf.to_container(self.config, resolve=True)
        for key in ("rollout_data_dir", "validation_data_dir"):
            if config["trainer"][key]:
                config["trainer"][key] = str(Path(config["trainer"][key]).resolve())
        self.checkpoint_root.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(config), self.checkpoint_root / "config.yaml")

    def _batches(self) -> Iterator[dict[str, Any]]:
        while True:  # the loader moves to the next epoch by itself
            yield from self.train_dataloader

    # The three hooks of the fit loop the off-policy trainer (async_trainer.py) replaces.

    def _start_training(self) -> None:
        """Before the first step: the batch iterator (and the watchdog's stop signal)."""
        self._train_batches = self._batches()
        self.watchdog.start()
        self._install_hang_signal()

    def _next_step(self) -> dict[str, float]:
        """Step ``global_steps``: draw its batch, train on it, return its metrics."""
        self._remember_step_start()
        return self.train_step(next(self._train_batches), self._train_batches)

    def _remember_step_start(self) -> None:
        """With ``watchdog_action: stop``, the state a hang before the update saves (the
        last finished step's)."""
        if self.config.trainer.watchdog_action == "stop":
            self._step_start_state = self._trainer_state(self.global_steps - 1)

    def _stop_training(self) -> None:
        self._restore_hang_signal()
        self.watchdog.stop()

    def _after_step(self, force_save: bool = False) -> dict[str, float]:
        """Validation and checkpoint when due (every N steps, after the last step, and when
        ``force_save``)."""
        trainer, step = self.config.trainer, self.global_steps
        last = step >= self.total_training_steps
        timing: dict[str, float] = {}
        metrics: dict[str, float] = {}
        if self.val_dataloader is not None and (
            last or (trainer.test_freq > 0 and step % trainer.test_freq == 0)
        ):
            with self._stage("testing", timing):
                self.val_metrics = self.validate()
            metrics |= self.val_metrics
        if force_save or last or (trainer.save_freq > 0 and step % trainer.save_freq == 0):
            with self._stage("save_checkpoint", timing):
                self.save_checkpoint()
        return metrics | compute_timing_metrics(timing)

    def train_step(
        self, batch_dict: dict[str, Any], more_batches: Iterator[dict[str, Any]] | None = None
    ) -> dict[str, float]:
        """One step on one batch of prompts: rollout -> reward -> advantage -> update.

        With ``algorithm.filter_groups`` (DAPO's dynamic sampling) further batches are drawn
        from ``more_batches`` until enough prompts have samples that disagree."""
        cfg, step, timing = self.config, self.global_steps, {}
        metrics: dict[str, float] = {}
        with timer("step", timing):
            data = self._generate_and_score(batch_dict, step, timing)
            if cfg.algorithm.filter_groups.enable:
                data, sampling_metrics = self._dynamic_sampling(data, more_batches, step, timing)
                metrics |= sampling_metrics
            data = self._update(data, step, metrics, timing)
        return self._step_metrics(data, step, metrics, timing)

    def _update(
        self, data: DataProto, step: int, metrics: dict[str, float], timing: dict[str, float]
    ) -> DataProto:
        """Scored trajectories -> old (and ref) log-probs, values -> advantages -> critic and
        actor updates; adds to ``metrics`` and ``timing``, returns the batch with it all.
        The actor syncs the rollout's weights itself unless ``sync_weights_in_update`` is
        off (the off-policy modes sync when their producer allows)."""
        cfg = self.config
        if cfg.trainer.balance_batch:
            data, balance_metrics = balance_batch(data, self.n_workers)
            metrics |= balance_metrics
        with self._stage("old_log_prob", timing):
            data = data.union(self.actor_rollout_wg.compute_log_prob(data))
        metrics |= compute_rollout_logprob_gap(data)
        if self.use_reference_policy:
            with self._stage("ref", timing):
                data = data.union(self.actor_rollout_wg.compute_ref_log_prob(data))
        if self.use_critic:
            with self._stage("values", timing):
                data = data.union(self.critic_wg.compute_values(data))
        with self._stage("adv", timing):
            metrics |= self._advantage(data)
        if self.use_critic:
            with self._stage("update_critic", timing):
                metrics |= self.critic_wg.update_critic(data).meta_info["metrics"]
        if step > cfg.trainer.critic_warmup:
            data.meta_info["sync_weights"] = self.sync_weights_in_update
            with self._stage("update_actor", timing):
                metrics |= self.actor_rollout_wg.update_actor(data).meta_info["metrics"]
        return data

    def _step_metrics(
        self, data: DataProto, step: int, metrics: dict[str, float], timing: dict[str, float]
    ) -> dict[str, float]:
        """Dump the step's trajectories (``rollout_data_dir``), gather its metrics, and give
        a curriculum sampler the batch."""
        cfg = self.config
        if cfg.trainer.rollout_data_dir:
            self._dump(Path(cfg.trainer.rollout_data_dir), data)
        metrics |= {k: float(v) for k, v in data.meta_info.get("metrics", {}).items()}
        metrics |= {k: float(v) for k, v in data.meta_info.get("timing", {}).items()}
        metrics |= compute_data_metrics(data, use_critic=self.use_critic)
        metrics |= compute_timing_metrics(timing)
        metrics |= compute_throughput_metrics(data, timing, self.n_workers)
        metrics["training/global_step"] = float(step)
        metrics["training/epoch"] = float(self.train_dataloader.epoch)
        sampler = self.train_dataloader.sampler
        if callable(getattr(sampler, "update", None)):  # a curriculum (data.sampler)
            sampler.update(batch=data)
        return metrics

    @contextlib.contextmanager
    def _stage(self, name: str, timing: dict[str, float]) -> Iterator[None]:
        """Time a stage (``timing_s/{name}``) and watch it for hangs (``trainer.watchdog_s``)."""
        with self.watchdog.stage(name, f"step {self.global_steps}"), timer(name, timing):
            yield

    def _generate_and_score(
        self, batch_dict: dict[str, Any], step: int, timing: dict[str, float], round_: int = 0
    ) -> DataProto:
        """Roll out one batch of prompts and score it: ``token_level_scores``, and the score
        function's extra keys per row in ``non_tensor_batch["reward_extra_info"]``."""
        cfg = self.config
        batch = DataProto.from_single_dict(batch_dict)
        prefix = f"{step}" if round_ == 0 else f"{step}.{round_}"
        batch.non_tensor_batch["uid"] = to_object_array(
            [f"{prefix}-{i}" for i in range(len(batch))], "uid"
        )
        batch.meta_info.update(
            temperature=float(cfg.actor_rollout_ref.rollout.temperature), global_steps=step
        )
        with self._stage("gen", timing):
            data = self._rollout(batch, step, round_)
        if cfg.algorithm.adv_estimator == "remax":
            with self._stage("gen_max", timing):
                data.batch["reward_baselines"] = self._greedy_baseline(batch, len(data))
        isolate_failed(data)
        with self._stage("reward", timing):
            data = self._score(data, self.reward_fn)
        return data

    def _score(self, data: DataProto, reward_fn: Any) -> DataProto:
        """Add the reward model's score (when there is one), then score ``data`` with
        ``reward_fn``: ``token_level_scores``, and the score function's extra keys per row
        in ``non_tensor_batch["reward_extra_info"]``."""
        if self.rm_wg is not None:
            data = data.union(self.rm_wg.compute_rm_score(data))
        scored = reward_fn(data, return_dict=True)
        data.batch["token_level_scores"] = scored["reward_tensor"]
        extra = scored["reward_extra_info"]
        data.non_tensor_batch["reward_extra_info"] = to_object_array(
            [{k: v[i] for k, v in extra.items()} for i in range(len(data))],
            "reward_extra_info",
        )
        return data

    def _rollout(self, batch: DataProto, step: int, round_: int) -> DataProto:
        """Generate, or with ``rollout.skip_rollout`` (verl's RolloutSkip) replay the batch an
        earlier run dumped for this step to ``rollout.skip_dump_dir`` (dumping it the first
        time), so training can be debugged without inference."""
        rollout = self.config.actor_rollout_ref.rollout
        if not rollout.skip_rollout:
            return self.actor_rollout_wg.generate_sequences(batch)
        name = f"step_{step}.pt" if round_ == 0 else f"step_{step}_{round_}.pt"
        path = Path(str(rollout.skip_dump_dir)) / name
        if path.is_file():
            data = DataProto.load_from_disk(path)
            expected = len(batch) * int(rollout.n)
            same_rows = "index" not in batch.non_tensor_batch or sorted(
                set(map(str, data.non_tensor_batch.get("index", [])))
            ) == sorted(set(map(str, batch.non_tensor_batch["index"])))
            if len(data) != expected or not same_rows:
                raise RuntimeError(
                    f"{path} holds {len(data)} trajectories of other prompts than step {step}'s "
                    f"{len(batch)} x n={rollout.n}: it was dumped by a run with another data "
                    "order or batch size; point rollout.skip_dump_dir elsewhere"
                )
            logger.info("step %d: replaying the rollout dumped in %s (rollout.skip_rollout)",
                        step, path)
            return data
        data = self.actor_rollout_wg.generate_sequences(batch)
        path.parent.mkdir(parents=True, exist_ok=True)
        data.save_to_disk(path)
        return data

    def _dynamic_sampling(
        self,
        data: DataProto,
        more_batches: Iterator[dict[str, Any]] | None,
        step: int,
        timing: dict[str, float],
    ) -> tuple[DataProto, dict[str, float]]:
        """Keep the prompts whose samples disagree; generate more batches until
        ``train_batch_size`` such prompts are collected, then trim to exactly that many."""
        groups = self.config.algorithm.filter_groups
        target = int(self.config.data.train_batch_size)
        kept: list[DataProto] = []
        n_kept = n_seen = rounds = 0
        while True:
            rounds += 1
            keep, kept_now, seen_now = informative_rows(data, groups.metric)
            kept.append(data[keep])
            n_kept, n_seen = n_kept + kept_now, n_seen + seen_now
            if n_kept >= target:
                break
            if 0 < groups.max_num_gen_batches <= rounds or more_batches is None:
                raise RuntimeError(
                    f"step {step}: {rounds} generation batches gave {n_kept} of the {target} "
                    f"prompts whose samples differ in {groups.metric!r} "
                    f"(algorithm.filter_groups.max_num_gen_batches="
                    f"{groups.max_num_gen_batches}); raise it (0: no limit), or check that "
                    "the task is neither solved nor hopeless for the policy"
                )
            logger.info("step %d: %d of %d prompts with varied %s after %d batches; "
                        "generating another", step, n_kept, target, groups.metric, rounds)
            data = self._generate_and_score(next(more_batches), step, timing, round_=rounds)
        merged = first_prompts(DataProto.concat(kept), target)
        return merged, {
            "train/num_gen_batches": float(rounds),
            "train/num_prompts_kept": float(n_kept),
            "train/kept_prompt_ratio": n_kept / max(n_seen, 1),
        }

    def _greedy_baseline(self, batch: DataProto, n_rows: int) -> torch.Tensor:
        """ReMax's baseline: the reward of one greedy sample per prompt (B * n,)."""
        greedy = batch.select(deepcopy=True)
        greedy.meta_info["validate"] = True  # val_kwargs: n = 1, greedy (checked at start)
        out = self.actor_rollout_wg.generate_sequences(greedy)
        baseline = self.reward_fn(out, return_dict=True)["reward_tensor"].sum(-1)  # (B,)
        return baseline.repeat_interleave(n_rows // len(batch))  # (B * n,)

    def _advantage(self, data: DataProto) -> dict[str, float]:
        algo = self.config.algorithm
        metrics: dict[str, float] = {}
        if self.kl_ctrl is not None:
            data, metrics = apply_kl_penalty(data, self.kl_ctrl, algo.kl_penalty)
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
        compute_advantage(
            data,
            algo.adv_estimator,
            gamma=float(algo.gamma),
            lam=float(algo.lam),
            num_repeat=int(self.config.actor_rollout_ref.rollout.n),
            norm_adv_by_std_in_grpo=bool(algo.norm_adv_by_std_in_grpo),
            config=algo,
        )
        return metrics

    # ------------------------------------------------------------------ validation

    def validate(self) -> dict[str, float]:
        """Roll out the validation set with ``rollout.val_kwargs`` and score it."""
        if self.val_dataloader is None:
            return {}
        key = self.config.data.reward_fn_key
        sources: list[str] = []
        uids: list[str] = []
        rows: list[dict[str, Any]] = []
        rollout: list[dict[str, float]] = []  # each batch's rollout metrics
        for i, batch_dict in enumerate(self.val_dataloader):
            batch = DataProto.from_single_dict(batch_dict)
            batch.non_tensor_batch["uid"] = to_object_array(
                [f"val-{i}-{j}" for j in range(len(batch))], "uid"
            )
            batch.meta_info.update(validate=True, global_steps=self.global_steps)
            out = self.actor_rollout_wg.generate_sequences(batch)
            rollout.append(dict(out.meta_info.get("metrics", {})))
            out = self._score(out, self.val_reward_fn)
            scores = out.batch["token_level_scores"].sum(-1).tolist()
            per_row = list(out.non_tensor_batch["reward_extra_info"])
            sources += [str(s) for s in out.non_tensor_batch.get(key, ["unknown"] * len(out))]
            uids += list(out.non_tensor_batch["uid"])
            rows += [{"reward": s, **row} for s, row in zip(scores, per_row, strict=True)]
            self._log_generations(out, scores)
            if self.config.trainer.validation_data_dir:
                self._dump(Path(self.config.trainer.validation_data_dir), out)
        names = list(dict.fromkeys(name for row in rows for name in row))
        variables = {name: [row.get(name) for row in rows] for name in names}
        metrics = process_validation_metrics(sources, uids, variables)
        return metrics | {f"val-aux/{k}": v for k, v in merge_batch_metrics(rollout).items()}

    def _log_generations(self, data: DataProto, scores: list[float]) -> None:
        for i in range(min(int(self.config.trainer.log_val_generations), len(data))):
            prompt, response = self._texts(data, i)
            logger.info(
                "val sample %d (step %d, score %.3f)\n[prompt] %s\n[response] %s",
                i, self.global_steps, scores[i], prompt, response,
            )  # fmt: skip

    def _texts(self, data: DataProto, i: int) -> tuple[str, str]:
        prompt, response, _ = trajectory_ids(data, i)
        decode = self.tokenizer.decode
        return decode(prompt, skip_special_tokens=True), decode(response, skip_special_tokens=True)

    def _dump(self, directory: Path, data: DataProto) -> None:
        """The batch's trajectories to ``directory/{global_step}.jsonl`` (dump.py)."""
        dump_trajectories(directory, data, self.global_steps, self.tokenizer)

    # ------------------------------------------------------------------ checkpoints

    @property
    def checkpoint_root(self) -> Path:
        """``trainer.default_local_dir`` as an absolute path (Ray workers have other cwds)."""
        return Path(str(self.config.trainer.default_local_dir)).resolve()

    def save_checkpoint(self, state: dict[str, Any] | None = None) -> Path:
        """Write ``global_step_N/{actor,critic,data.pt}`` (under a ``.partial`` name until
        complete), mark it latest, rotate old ones. ``state``: the driver's state to save
        (``_trainer_state``; default: now's)."""
        trainer = self.config.trainer
        step = self.global_steps if state is None else int(state["global_step"])
        ckpt.remove_partial(self.checkpoint_root)
        partial = ckpt.partial_dir(self.checkpoint_root, step)
        partial.mkdir(parents=True, exist_ok=True)
        self.actor_rollout_wg.save_checkpoint(str(partial / "actor"), global_step=step)
        if self.use_critic:
            self.critic_wg.save_checkpoint(str(partial / "critic"), global_step=step)
        ckpt.save_trainer_state(partial, state or self._trainer_state(step))
        path = ckpt.commit(self.checkpoint_root, step)
        ckpt.rotate(self.checkpoint_root, "actor", trainer.max_actor_ckpt_to_keep)
        ckpt.rotate(self.checkpoint_root, "critic", trainer.max_critic_ckpt_to_keep)
        logger.info("saved checkpoint %s", path)
        return path

    def load_checkpoint(self) -> int:
        """Resume per ``trainer.resume_mode``: worker states, data loader position and global
        step; returns the step to continue after (0 for a fresh start)."""
        if self.group is None:
            self.init_workers()
        self._checkpoint_loaded = True
        path = self.resume_from
        if path is None:
            logger.info("training from scratch (resume_mode=%s)", self.config.trainer.resume_mode)
            return self.global_steps
        ckpt.check_complete(path, ("actor", "critic") if self.use_critic else ("actor",))
        self.actor_rollout_wg.load_checkpoint(str(path.resolve() / "actor"))
        if self.use_critic:
            self.critic_wg.load_checkpoint(str(path.resolve() / "critic"))
        self._load_trainer_state(ckpt.load_trainer_state(path))
        logger.info("resumed from %s at global step %d", path, self.global_steps)
        return self.global_steps

    def _trainer_state(self, step: int) -> dict[str, Any]:
        """The driver's share of a checkpoint (``data.pt``) as of ``step``."""
        state = {"global_step": step, "dataloader": self.train_dataloader.state_dict()}
        if self.kl_ctrl is not None:
            state["kl_coef"] = float(self.kl_ctrl.value)
        state["alerts"] = self.monitor.state_dict()
        return state

    def _load_trainer_state(self, state: dict[str, Any]) -> None:
        self.train_dataloader.load_state_dict(state["dataloader"])
        if self.kl_ctrl is not None and "kl_coef" in state:
            self.kl_ctrl.value = state["kl_coef"]
        self.monitor.load_state_dict(state.get("alerts", {}))
        self.global_steps = int(state["global_step"])

    # ------------------------------------------------------------------ hangs

    def _on_hang(self, report: HangReport) -> None:
        """The watchdog's callback (its thread): with ``watchdog_action: stop``, interrupt
        the training loop, which raises StageHangError in the main thread."""
        if self._hang_signal and self._hang is None:  # else SIGUSR1 would kill the process
            self._hang = report
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    def _install_hang_signal(self) -> None:
        if self.config.trainer.watchdog_action != "stop" or not self.watchdog.enabled:
            return
        if threading.current_thread() is not threading.main_thread():
            logger.warning("trainer.watchdog_action=stop needs the trainer in the main "
                           "thread; a hang will only be logged")
            return

        def raise_hang(signum: int, frame: Any) -> None:
            raise StageHangError(self._hang)

        self._previous_handler = signal.signal(signal.SIGUSR1, raise_hang)
        self._hang_signal = True

    def _restore_hang_signal(self) -> None:
        if self._hang_signal:
            signal.signal(signal.SIGUSR1, self._previous_handler)
            self._hang_signal, self._previous_handler = False, None

    def _stop_after_hang(self, err: StageHangError) -> None:
        """Save the state of the last finished step when the hang came before anything of
        the current step changed the models (so nothing is trained twice or skipped)."""
        stage = err.report.stage
        if stage not in STAGES_BEFORE_UPDATE or self._step_start_state is None:
            logger.error("stopped by the watchdog in stage %r; no checkpoint (the models "
                         "may be mid-update): resume from the last one", stage)
            return
        path = self.save_checkpoint(self._step_start_state)
        logger.error("stopped by the watchdog in stage %r; saved the last finished step "
                     "to %s", stage, path)

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """Finish tracking, stop the rollout and the workers (and Ray if we started it)."""
        self.watchdog.stop()
        self.tracking.finish()
        if self.group is not None:
            try:
                self.actor_rollout_wg.close()
            finally:
                self.group.shutdown()
                self.group = None
        if self._pool is not None:
            self._pool.remove()
            self._pool = None
        if self._ray_temp_dir is not None:
            import ray

            ray.shutdown()
            shutil.rmtree(self._ray_temp_dir, ignore_errors=True)
            self._ray_temp_dir = None

    def __enter__(self) -> PPOTrainer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

