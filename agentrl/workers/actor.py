"""ActorRolloutRefWorker: the policy, its rollout engine and the frozen reference, per rank.

    group = RayWorkerGroup(pool, WorkerSpec(ActorRolloutRefWorker, cfg.actor_rollout_ref,
                                            role="actor_rollout_ref", seed=cfg.trainer.seed))
    group.init_model()
    batch = batch.union(group.compute_log_prob(batch))        # old_log_probs
    batch = batch.union(group.compute_ref_log_prob(batch))    # ref_log_prob
    metrics = group.update_actor(batch).meta_info["metrics"]  # and syncs the rollout weights
    group.save_checkpoint("ckpt/global_step_10/actor", global_step=10)

``role`` is ``actor``, ``rollout``, ``ref``, ``actor_rollout`` or ``actor_rollout_ref``
(verl's names): which of the three parts this process holds. The actor is the HF model
sharded with FSDP2 (``agentrl.workers.fsdp``) with AdamW and its schedule
(``agentrl.workers.optim``); the reference is a second, frozen copy of the initial weights;
the rollout is the configured backend and the multi-turn engine
(``agentrl.workers.rollout``), whose weights follow the actor's after every update (the
hybrid engine). Every method is SPMD: all ranks run it, each on its data-parallel share.

Micro-batch keys: ``compute_log_prob`` reads ``rollout.log_prob_*``, ``compute_ref_log_prob``
``ref.log_prob_*``, ``update_actor`` ``actor.ppo_micro_batch_size_per_gpu`` /
``use_dynamic_bsz`` / ``ppo_max_token_len_per_gpu``; the deprecated global sizes are
divided by the world size. The mini-batch per rank is ``actor.ppo_mini_batch_size x
rollout.n / world size`` trajectories.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from agentrl.algos.batch_split import micro_batch_per_worker, mini_batch_per_worker
from agentrl.distributed import Dispatch, Worker, register
from agentrl.models.tokenizer import load_tokenizer
from agentrl.protocol import DataProto
from agentrl.utils.memory import peak_memory_metrics
from agentrl.utils.seeding import seed_everything
from agentrl.utils.threads import CPUThreads
from agentrl.utils.trace import TRACE_EVENTS, TraceRecorder, span
from agentrl.workers import checkpoint
from agentrl.workers.actor_settings import ActorSettings
from agentrl.workers.fsdp import build_sharded_model, device_mesh, full_state_dict
from agentrl.workers.micro_batch import MicroBatching
from agentrl.workers.offload import Residency
from agentrl.workers.optim import build_lr_scheduler, build_optimizer
from agentrl.workers.optim_settings import OptimSettings
from agentrl.workers.ppo_actor import PPOActor, micro_batching

logger = logging.getLogger(__name__)

ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")


class ActorRolloutRefWorker(Worker):
    """See the module docstring. ``config`` is the ``actor_rollout_ref`` sub-config;
    ``chat_template_kwargs`` is ``data.apply_chat_template_kwargs`` for the rollout."""

    def __init__(
        self,
        config: Any,
        role: str = "actor_rollout_ref",
        seed: int = 0,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; valid: {', '.join(ROLES)}")
        self.config = config
        self.role = role
        self.seed = seed
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self.is_rollout = role in ("rollout", "actor_rollout", "actor_rollout_ref")
        self.is_ref = role in ("ref", "actor_rollout_ref")
        self.actor: PPOActor | None = None
        self.ref: PPOActor | None = None
        # where the actor's / ref's weights live between uses (fsdp_config.*_offload)
        self.actor_residency: Residency | None = None
        self.ref_residency: Residency | None = None
        # on-policy distillation's frozen teacher (actor_rollout_ref.teacher), with the actor
        self.teacher: PPOActor | None = None
        self.teacher_residency: Residency | None = None
        self.rollout: Any = None
        self.lr_scheduler: Any = None
        self.tokenizer: Any = None
        self.global_step = 0
        self.cpu_threads = CPUThreads()  # intra-op threads that follow the free cores

    # ------------------------------------------------------------------ setup

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load and shard the models this role holds, build the optimizer and rollout."""
        cfg = self.config
        seed_everything(self.seed)  # the same initial weights on every rank
        self.tokenizer = load_tokenizer(
            cfg.model.path,
            trust_remote_code=bool(cfg.model.trust_remote_code),
            chat_template=cfg.model.custom_chat_template,
        )
        mesh = device_mesh(self.world_size, self.device, cfg.actor.fsdp_config.fsdp_size)
        actor_cfg = cfg.actor
        # the actor's typed settings, made once: the policy, the reference and the teacher
        self.actor_settings = ActorSettings.from_config(actor_cfg)
        if self.is_actor or self.is_rollout:
            module = build_sharded_model(
                cfg.model, actor_cfg.fsdp_config, AutoModelForCausalLM, mesh, self.device,
                lora=int(cfg.model.lora_rank) > 0,
            )
            optimizer = None
            if self.is_actor:  # with LoRA only the adapters train
                trainable = [p for p in module.parameters() if p.requires_grad]
                optim = OptimSettings.from_config(actor_cfg.optim, "actor_rollout_ref.actor.optim")
                optimizer = build_optimizer(trainable, optim)
                self.lr_scheduler = build_lr_scheduler(optimizer, optim)
            self.actor = PPOActor(
                module,
                optimizer,
                self.actor_settings,
                self._mini_batch_size(),
                self._update_micro_batch_size(),
                seed=self.seed,
            )
            fsdp = actor_cfg.fsdp_config
            self.actor_residency = Residency(
                module, optimizer, self.device, params=fsdp.param_offload,
                optimizer_state=fsdp.optimizer_offload, name="actor",
            )
        if self.is_ref:
            ref_module = build_sharded_model(
                cfg.model, cfg.ref.fsdp_config, AutoModelForCausalLM, mesh, self.device
            )
            ref_module.requires_grad_(False)
            self.ref = PPOActor(ref_module, None, self.actor_settings)
            self.ref_residency = Residency(
                ref_module, None, self.device, params=cfg.ref.fsdp_config.param_offload,
                name="ref",
            )
        teacher = cfg.get("teacher")
        if self.is_actor and teacher is not None and teacher.model.path and not teacher.get(
                "server_urls"):  # a teacher behind HTTP is asked by the driver
            self._build_teacher(mesh)
        if self.is_rollout:
            from agentrl.workers.rollout import HybridRollout
            from agentrl.workers.rollout_settings import RolloutSettings

            # the sampler's seed: the trainer's, one stream per rank
            self.rollout = HybridRollout(
                RolloutSettings.from_config(cfg), self.tokenizer, self.chat_template_kwargs,
                seed=self.seed + self.rank,
            )  # fmt: skip
        for residency in (self.actor_residency, self.ref_residency, self.teacher_residency):
            if residency is not None:
                residency.offload()  # the GPU is the rollout's until a method needs them
        seed_everything(self.seed + self.rank)  # dropout: one stream per rank
        logger.info("rank %d: %s ready on %s", self.rank, self.role, self.device)

    def _build_teacher(self, mesh: Any) -> None:
        """The frozen teacher, sharded like the reference model; it must tokenize as the
        student does (its log-probs score the student's token ids)."""
        from agentrl.models.tokenizer import check_same_tokenizer

        teacher_cfg = self.config.teacher
        check_same_tokenizer(self.tokenizer, str(teacher_cfg.model.path),
                             "actor_rollout_ref.teacher.model.path",
                             trust_remote_code=bool(teacher_cfg.model.trust_remote_code))
        module = build_sharded_model(teacher_cfg.model, teacher_cfg.fsdp_config,
                                     AutoModelForCausalLM, mesh, self.device)
        module.requires_grad_(False)
        self.teacher = PPOActor(module, None, self.actor_settings)
        self.teacher_residency = Residency(
            module, None, self.device, params=teacher_cfg.fsdp_config.param_offload,
            name="teacher",
        )

    def _mini_batch_size(self) -> int:
        return mini_batch_per_worker(
            self.config.actor.ppo_mini_batch_size, self.config.rollout.n, self.world_size,
            "actor_rollout_ref.actor.ppo_mini_batch_size",
        )

    def _update_micro_batch_size(self) -> int | None:
        actor = self.config.actor
        return micro_batch_per_worker(
            actor.ppo_micro_batch_size_per_gpu,
            actor.ppo_micro_batch_size,
            self.world_size,
            "actor_rollout_ref.actor.ppo_micro_batch_size",
        )

    def _log_prob_batching(self, section: str) -> MicroBatching:
        node = self.config[section]
        size = micro_batch_per_worker(
            node.log_prob_micro_batch_size_per_gpu,
            node.log_prob_micro_batch_size,
            self.world_size,
            f"actor_rollout_ref.{section}.log_prob_micro_batch_size",
        )
        return micro_batching(
            node.log_prob_use_dynamic_bsz, size, node.log_prob_max_token_len_per_gpu
        )

    def _temperature(self, data: DataProto) -> float:
        temperature = float(data.meta_info.get("temperature", self.config.rollout.temperature))
        return temperature if temperature > 0 else 1.0  # greedy rollouts: score at T = 1

    def _require(self, part: Any, what: str) -> Any:
        if part is None:
            raise RuntimeError(
                f"{what} is not available in role {self.role!r} (or init_model has not run)"
            )
        return part

    # ------------------------------------------------------------------ compute

    @register(Dispatch.DP_COMPUTE, pad=True)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` (B, R) of the responses under the actor, and ``entropys`` (B, R)
        only when ``data.meta_info["calculate_entropy"]`` is true (verl's flag: a
        full-vocabulary entropy the trainer does not need costs a large share of the pass;
        ``update_actor`` reports ``actor/entropy`` anyway). The output has no meta_info, so
        it unions into any batch."""
        self.cpu_threads.tick()
        actor = self._require(self.actor, "the actor")
        calc_entropy = bool(data.meta_info.get("calculate_entropy", False))
        with self.actor_residency.on_device():
            log_probs, entropys = actor.compute_log_prob(
                data, self._log_prob_batching("rollout"), self._temperature(data), calc_entropy
            )
        tensors = {"old_log_probs": log_probs}
        if calc_entropy:
            tensors["entropys"] = entropys
        return DataProto.from_dict(tensors=tensors)

    @register(Dispatch.DP_COMPUTE, pad=True)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` (B, R) of the responses under the frozen initial weights."""
        self.cpu_threads.tick()
        ref = self._require(self.ref, "the reference model")
        with self.ref_residency.on_device():
            log_probs, _ = ref.compute_log_prob(
                data, self._log_prob_batching("ref"), self._temperature(data), calc_entropy=False
            )
        return DataProto.from_dict(tensors={"ref_log_prob": log_probs})

    @register(Dispatch.DP_COMPUTE, pad=True)
    def compute_teacher_log_prob(self, data: DataProto) -> DataProto:
        """``teacher_log_prob`` (B, R): the teacher's log-probs of the sampled responses, at
        the rollout's temperature as the student's ``old_log_probs`` (on-policy
        distillation)."""
        self.cpu_threads.tick()
        teacher = self._require(self.teacher, "the teacher (actor_rollout_ref.teacher)")
        with self.teacher_residency.on_device():
            log_probs, _ = teacher.compute_log_prob(
                data, self._log_prob_batching("teacher"), self._temperature(data),
                calc_entropy=False,
            )
        return DataProto.from_dict(tensors={"teacher_log_prob": log_probs})

    @register(Dispatch.DP_COMPUTE)
    def update_actor(self, data: DataProto) -> DataProto:
        """PPO epochs on this rank's share; one scheduler step; then, in the hybrid engine,
        the rollout gets the new weights (unless ``meta_info["sync_weights"]`` is false: the
        off-policy modes call ``sync_rollout_weights`` when their producer allows). Returns
        ``meta_info["metrics"]`` (and, traced, this rank's `update_policy` and `weight_sync`
        spans in ``meta_info["trace_events"]``). With ``meta_info["fuse_old_log_prob"]`` and
        no ``old_log_probs`` in the batch, the update makes them (``PPOActor.update_policy``)
        and returns them as ``old_log_probs``."""
        self.cpu_threads.tick()
        actor = self._require(self.actor, "the actor")
        scheduler = self._require(self.lr_scheduler, "training (roles with the actor)")
        started = time.perf_counter()
        lr = scheduler.get_last_lr()[0]
        residency = self.actor_residency
        trace = TraceRecorder.for_call(data.meta_info, f"worker rank {self.rank}")
        track = None if trace is None else trace.track("update_actor")
        fused = bool(data.meta_info.get("fuse_old_log_prob"))
        batching = self._log_prob_batching("rollout") if fused else None
        with residency.on_device(optimizer=True):
            with span(track, "update_policy"):
                metrics = actor.update_policy(data, self._temperature(data), self.global_step,
                                              old_log_prob_batching=batching)  # fmt: skip
            scheduler.step()
            self.global_step += 1
            metrics["actor/lr"] = lr
            metrics["timing/update_actor_s"] = time.perf_counter() - started
            if self.rollout is not None and data.meta_info.get("sync_weights", True):
                residency.offload(params=False)  # optimizer state out before the engine wakes
                with span(track, "weight_sync"):
                    metrics.update(self._sync_rollout_weights())
        metrics.update(peak_memory_metrics(self.device))  # this process, since the last step
        out = DataProto(meta_info={"metrics": metrics})
        if fused:  # the old log-probs the update made (PPOActor.update_policy)
            out = DataProto.from_dict(tensors={"old_log_probs": data.batch["old_log_probs"]},
                                      meta_info={"metrics": metrics})  # fmt: skip
        if trace is not None:
            out.meta_info[TRACE_EVENTS] = trace.drain()
        return out

    @register(Dispatch.DP_COMPUTE, pad=True)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Roll out this rank's prompts with the multi-turn engine (``rollout.n`` each)."""
        rollout = self._require(self.rollout, "the rollout")
        return rollout.generate_sequences(prompts)

    # ------------------------------------------------------------------ weights

    @register(Dispatch.ONE_TO_ALL)
    def sync_rollout_weights(self) -> dict[str, float]:
        """Push the actor's current weights into the rollout backend."""
        self._require(self.rollout, "the rollout")
        return self._sync_rollout_weights()

    def _sync_rollout_weights(self) -> dict[str, float]:
        started = time.perf_counter()
        actor = self._require(self.actor, "the actor")
        with self.actor_residency.on_device():
            self.rollout.update_weights(actor.model, self.global_step)
        return {"timing/weight_sync_s": time.perf_counter() - started,
                "rollout/weights_verified": float(self.rollout.weights_verified),
                **self.rollout.canary_metrics}

    @register(Dispatch.ONE_TO_ALL)
    def drained_servers(self) -> dict[str, str]:
        """The rollout servers the canary has drained (url -> why): the off-policy producer
        drains them too."""
        return self._require(self.rollout, "the rollout").drained_servers()

    @register(Dispatch.ONE_TO_ALL)
    def full_state_dict(self, which: str = "actor") -> dict[str, torch.Tensor]:
        """The full weights of the ``actor`` or ``ref`` model on every rank (CPU tensors)."""
        part = self._require(self.actor if which == "actor" else self.ref, which)
        residency = self.actor_residency if which == "actor" else self.ref_residency
        with residency.on_device():
            return full_state_dict(part.model)

    # ------------------------------------------------------------------ checkpoints

    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self, local_path: str, global_step: int | None = None, hf_model: bool = False
    ) -> str:
        """Sharded model/optimizer, scheduler + RNG (+ an HF export with ``hf_model`` in
        ``save_contents``, or with ``hf_model=True``: the run's last checkpoint)."""
        actor = self._require(self.actor, "the actor")
        step = self.global_step if global_step is None else global_step
        contents = list(self.config.actor.checkpoint.save_contents)
        if hf_model and "hf_model" not in contents:
            contents.append("hf_model")
        with self.actor_residency.on_device(optimizer=True):
            path = checkpoint.save_checkpoint(
                local_path,
                actor.model,
                actor.optimizer,
                self.lr_scheduler,
                contents,
                self.tokenizer,
                extra_state={"global_step": step},
            )
        return str(path)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str) -> int:
        """Resume from ``save_checkpoint``'s directory; returns the saved global step and
        pushes the loaded weights to the rollout."""
        actor = self._require(self.actor, "the actor")
        with self.actor_residency.on_device(optimizer=True):
            extra = checkpoint.load_checkpoint(
                local_path,
                actor.model,
                actor.optimizer,
                self.lr_scheduler,
                self.config.actor.checkpoint.load_contents,
            )
        self.global_step = int(extra.get("global_step", self.global_step))
        if self.rollout is not None:
            self._sync_rollout_weights()
        return self.global_step

    @register(Dispatch.RANK_ZERO)
    def export_hf(self, local_path: str) -> str:
        """Write the actor's full weights and tokenizer as a Hugging Face directory."""
        actor = self._require(self.actor, "the actor")
        with self.actor_residency.on_device():
            return str(checkpoint.export_hf(Path(local_path), actor.model, self.tokenizer))

    def rollout_event_loop(self) -> Any:
        """The rollout's event loop (an in-process group's watchdog reports its tasks); None
        without a rollout. Not dispatched: the driver calls it on the worker object."""
        return None if self.rollout is None else self.rollout.event_loop()

    @register(Dispatch.ONE_TO_ALL)
    def close(self) -> None:
        """Stop the rollout engine and backend (servers it launched included)."""
        if self.rollout is not None:
            self.rollout.close()
            self.rollout = None
