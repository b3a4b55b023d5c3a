"""Setting up a run: its data loaders and step count, the workers' config, the worker group
(in-process or Ray, docs/workers.md) with its models, and their teardown.

    loaders = create_loaders(config, tokenizer)         # train, val, total_training_steps
    workers = start_workers(config, worker_config(config, loaders.total_training_steps))
    workers.models.actor_rollout.generate_sequences(...)
    workers.close()                                      # the group, its pool, Ray if started
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from agentrl.algos import estimator_needs
from agentrl.config import chat_template_kwargs
from agentrl.data import create_rl_dataset, create_train_dataloader, create_val_dataloader
from agentrl.distributed import InProcessWorkerGroup, RayWorkerGroup, ResourcePool, WorkerSpec
from agentrl.trainer.step_context import Models
from agentrl.workers import ActorRolloutRefWorker, CriticWorker
from agentrl.workers.reward_model import RewardModelWorker

logger = logging.getLogger(__name__)


@dataclass
class Loaders:
    train: Any
    val: Any  # None without data.val_files
    total_training_steps: int


def create_loaders(config: DictConfig, tokenizer: Any) -> Loaders:
    """The train (and validation) loaders; steps: batches per epoch x `total_epochs`,
    capped by `trainer.total_training_steps`."""
    data_cfg = config.data
    train = create_train_dataloader(create_rl_dataset(data_cfg.train_files, data_cfg, tokenizer),
                                    data_cfg)  # fmt: skip
    val = None
    if data_cfg.val_files:
        val = create_val_dataloader(create_rl_dataset(data_cfg.val_files, data_cfg, tokenizer),
                                    data_cfg)  # fmt: skip
    total = len(train) * int(config.trainer.total_epochs)
    if config.trainer.total_training_steps is not None:
        total = min(total, int(config.trainer.total_training_steps))
    logger.info("%d training steps (%d batches per epoch)", total, len(train))
    return Loaders(train, val, total)


def worker_config(config: DictConfig, total_training_steps: int,
                  canary_prompts: list[list[int]] | None = None) -> DictConfig:  # fmt: skip
    """A read-only copy of `config` with the optimizers' `total_training_steps` set (and
    the rollout's `canary_prompts`, when given)."""
    rollout = {} if canary_prompts is None else {"canary_prompts": canary_prompts}
    copy = OmegaConf.merge(
        OmegaConf.to_container(config, resolve=True),
        {
            "actor_rollout_ref": {
                "actor": {"optim": {"total_training_steps": total_training_steps}},
                "rollout": rollout,
            },
            "critic": {"optim": {"total_training_steps": total_training_steps}},
        },
    )
    OmegaConf.set_readonly(copy, True)
    return copy


def default_canary_prompts(config: DictConfig, loaders: Any) -> list[list[int]] | None:
    """The canary's prompts when ``rollout.canary_prompts`` is null: the first
    ``canary_count`` validation prompts (training prompts without a validation set) as the
    rollout's prompt ids (agentrl/workers/canary.py); None when the config gives them or
    the canary is off."""
    rollout = config.actor_rollout_ref.rollout
    if rollout.canary == "off" or rollout.canary_prompts is not None:
        return None
    loader = loaders.val if loaders.val is not None else loaders.train
    dataset = loader.dataset
    try:
        rows = [dataset[i] for i in range(min(int(rollout.canary_count), len(dataset)))]
    except TypeError:  # a dataset without len or indexing (a user's custom class)
        rows = []
    prompts = [[int(t) for t in row["raw_prompt_ids"]] for row in rows
               if isinstance(row, dict) and row.get("raw_prompt_ids") is not None]  # fmt: skip
    if not prompts:
        logger.warning("no canary prompts: the dataset gives no raw_prompt_ids; set "
                       "actor_rollout_ref.rollout.canary_prompts (or canary=off)")
    return prompts


def with_rollout(worker_cfg: DictConfig, rollout: dict[str, Any]) -> DictConfig:
    """`worker_cfg` with `actor_rollout_ref.rollout` replaced (read-only, like it)."""
    tree = OmegaConf.to_container(worker_cfg, resolve=True)
    tree["actor_rollout_ref"]["rollout"] = rollout
    copy = OmegaConf.create(tree)
    OmegaConf.set_readonly(copy, True)
    return copy


def n_workers(config: DictConfig) -> int:
    return int(config.trainer.nnodes * config.trainer.n_gpus_per_node)


def uses_reference_policy(config: DictConfig) -> bool:
    return bool(config.actor_rollout_ref.actor.use_kl_loss or config.algorithm.use_kl_in_reward)


def worker_group_kind(config: DictConfig) -> str:
    """`in_process` or `ray` from `trainer.worker_group` (auto: in-process for one worker
    and no `ray_init.address`)."""
    kind = config.trainer.worker_group
    if kind != "auto":
        return kind
    local = n_workers(config) == 1 and config.ray_init.address is None
    return "in_process" if local else "ray"


def init_ray(config: DictConfig) -> str | None:
    """Connect to `ray_init.address`, or start a local Ray; returns the temp dir of a Ray
    started here (`Workers.close` stops it), None otherwise."""
    import ray

    if ray.is_initialized():
        return None
    if config.ray_init.address is not None:
        ray.init(address=config.ray_init.address)
        return None
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short paths
    ray.init(num_cpus=config.ray_init.num_cpus, _temp_dir=temp_dir, include_dashboard=False)
    return temp_dir


def ranks_use_gpus(config: DictConfig) -> bool:
    """Whether each rank's bundle holds a GPU: `trainer.device` cuda -> yes, cpu -> no, auto
    -> when this process or the Ray cluster has one. The cluster counts because the driver
    may run where there is none (a login node, a head pod without GPUs). The cluster's GPUs are
    those of the nodes joined so far: a driver without a GPU that may start before the GPU
    nodes join should say cuda. Call after `init_ray`."""
    device = config.trainer.device
    if device != "auto":
        return device == "cuda"
    if torch.cuda.is_available():
        return True
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0


@dataclass
class Workers:
    """A started worker group with its models loaded."""

    group: Any
    models: Models
    pool: ResourcePool | None = None
    ray_temp_dir: str | None = None

    def rollout_event_loop(self) -> asyncio.AbstractEventLoop | None:
        """The in-process actor's rollout event loop (its tasks go into a hang report);
        None for a Ray group (the loop lives in another process) or no rollout."""
        if not isinstance(self.group, InProcessWorkerGroup):
            return None
        return self.group.worker("actor_rollout").rollout_event_loop()

    def close(self) -> None:
        """Stop the rollout and the workers (and Ray if it was started here)."""
        try:
            if self.models.remote_teacher is not None:
                self.models.remote_teacher.close()
                self.models.remote_teacher = None
            if self.group is not None:
                try:  # a group broken by a lost rank cannot run close: keep its error
                    if self.models.actor_rollout is not None and self.group.usable:
                        self.models.actor_rollout.close()
                finally:
                    self.group.shutdown()
                    self.group = None
            if self.pool is not None:
                self.pool.remove()
                self.pool = None
        finally:
            stop_ray(self.ray_temp_dir)
            self.ray_temp_dir = None


def stop_ray(temp_dir: str | None) -> None:
    """Stop the Ray started with `temp_dir` (`init_ray`); nothing for None."""
    if temp_dir is None:
        return
    import ray

    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


def start_workers(config: DictConfig, worker_cfg: DictConfig) -> Workers:
    """Start the worker group (in-process or Ray) and load the models: the actor (role
    `actor_rollout_ref` when a reference policy is needed, else `actor_rollout`), the
    critic for GAE, the reward model with `reward_model.enable`. A start that fails half-way
    closes what it started (no process group or Ray outlives it) and raises."""
    use_ref = uses_reference_policy(config)
    seed = int(config.trainer.seed)
    chat_kwargs = chat_template_kwargs(config)
    specs = {
        "actor_rollout": WorkerSpec(
            ActorRolloutRefWorker,
            worker_cfg.actor_rollout_ref,
            role="actor_rollout_ref" if use_ref else "actor_rollout",
            seed=seed,
            chat_template_kwargs=chat_kwargs,
        )
    }
    use_critic = estimator_needs(config.algorithm.adv_estimator).critic
    if use_critic:
        specs["critic"] = WorkerSpec(CriticWorker, worker_cfg.critic, seed=seed)
    if config.reward_model.enable:
        specs["reward_model"] = WorkerSpec(RewardModelWorker, worker_cfg.reward_model, seed=seed)
    workers = Workers(group=None, models=Models(actor_rollout=None))
    try:
        _start(workers, config, specs, use_ref, use_critic)
    except BaseException:
        workers.close()
        raise
    return workers


def _start(workers: Workers, config: DictConfig, specs: dict[str, WorkerSpec], use_ref: bool,
           use_critic: bool) -> None:  # fmt: skip
    if worker_group_kind(config) == "in_process":
        workers.group = InProcessWorkerGroup(
            specs, dist_timeout_s=float(config.trainer.dist_timeout)
        )
    else:
        workers.ray_temp_dir = init_ray(config)
        workers.pool = ResourcePool(
            [int(config.trainer.n_gpus_per_node)] * int(config.trainer.nnodes),
            use_gpu=ranks_use_gpus(config),
        )
        workers.group = RayWorkerGroup(
            workers.pool,
            specs,
            dist_timeout_s=float(config.trainer.dist_timeout),
            error_grace_s=float(config.trainer.worker_error_grace),
            setup_timeout_s=float(config.trainer.ray_wait_register_center_timeout),
        )
    group = workers.group
    teacher = config.actor_rollout_ref.teacher
    models = Models(group.role("actor_rollout"), use_reference_policy=use_ref,
                    use_teacher=bool(teacher.model.path or teacher.server_urls))
    if teacher.server_urls:  # the teacher behind HTTP, asked from this process
        from agentrl.models.tokenizer import load_tokenizer
        from agentrl.trainer.teacher import RemoteTeacher
        from agentrl.trainer.trainer_settings import TeacherSettings

        model = config.actor_rollout_ref.model
        student = load_tokenizer(model.path, trust_remote_code=bool(model.trust_remote_code))
        models.remote_teacher = RemoteTeacher(TeacherSettings.from_config(teacher), student)
    workers.models = models
    models.actor_rollout.init_model()
    if use_critic:
        models.critic = group.role("critic")
        models.critic.init_model()
    if config.reward_model.enable:
        models.reward_model = group.role("reward_model")
        models.reward_model.init_model()
