"""CriticWorker: the value model of PPO, sharded with FSDP2, per rank.

    group = RayWorkerGroup(pool, WorkerSpec(CriticWorker, cfg.critic, seed=cfg.trainer.seed))
    group.init_model()
    batch = batch.union(group.compute_values(batch))           # values (B, R)
    metrics = group.update_critic(batch).meta_info["metrics"]  # needs values and returns

The value model is ``AutoModelForTokenClassification`` with one label loaded from
``critic.model.path`` (default: the policy's path): the pretrained transformer plus a fresh
linear head giving one scalar per position (classifier dropout off, so values are
deterministic). The value of response token j is the head's output at the position before
it. ``update_critic`` minimises PPO's clipped value loss (``agentrl.algos.
compute_value_loss``: ``0.5 * agg(max((v - R)^2, (clip(v, v_old +- cliprange_value) -
R)^2))``) over ``critic.ppo_epochs`` x mini-batches x micro-batches, with the same loss
weighting as the actor (``agentrl.workers.update``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from transformers import AutoModelForTokenClassification

from agentrl.algos import compute_value_loss, masked_mean
from agentrl.algos.batch_split import micro_batch_per_worker, mini_batch_per_worker
from agentrl.distributed import Dispatch, Worker, register
from agentrl.protocol import DataProto
from agentrl.utils.seeding import seed_everything
from agentrl.workers import checkpoint
from agentrl.workers.forward import response_values
from agentrl.workers.fsdp import build_sharded_model, device_mesh
from agentrl.workers.offload import Residency
from agentrl.workers.optim import build_lr_scheduler, build_optimizer
from agentrl.workers.optim_settings import OptimSettings
from agentrl.workers.ppo_actor import (
    micro_batched_forward,
    micro_batching,
    model_inputs,
    require_keys,
)
from agentrl.workers.update import MicroResult, UpdateSettings, run_update

logger = logging.getLogger(__name__)


class CriticWorker(Worker):
    """See the module docstring; ``config`` is the ``critic`` sub-config."""

    def __init__(self, config: Any, seed: int = 0) -> None:
        self.config = config
        self.seed = seed
        self.model: torch.nn.Module | None = None
        self.residency: Residency | None = None  # fsdp_config.param_offload / optimizer_offload
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: Any = None
        self.tokenizer: Any = None
        self.global_step = 0

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load and shard the value model; build AdamW and its schedule."""
        from transformers import AutoTokenizer

        cfg = self.config
        seed_everything(self.seed)  # the value head is freshly initialised
        model_cfg = cfg.model
        if model_cfg.path is None:
            model_cfg = _with_path(model_cfg, model_cfg.tokenizer_path)
        mesh = device_mesh(self.world_size, self.device, model_cfg.fsdp_config.fsdp_size)
        self.model = build_sharded_model(
            model_cfg,
            model_cfg.fsdp_config,
            AutoModelForTokenClassification,
            mesh,
            self.device,
            config_fields={"num_labels": 1, "classifier_dropout": 0.0},
        )
        optim = OptimSettings.from_config(cfg.optim, "critic.optim")
        self.optimizer = build_optimizer(self.model.parameters(), optim)
        self.lr_scheduler = build_lr_scheduler(self.optimizer, optim)
        fsdp = model_cfg.fsdp_config
        self.residency = Residency(
            self.model,
            self.optimizer,
            self.device,
            params=fsdp.param_offload,
            optimizer_state=fsdp.optimizer_offload,
            name="critic",
        )
        self.residency.offload()
        self.tokenizer = AutoTokenizer.from_pretrained(
            model_cfg.tokenizer_path or model_cfg.path,
            trust_remote_code=bool(model_cfg.trust_remote_code),
        )
        logger.info("rank %d: critic ready on %s", self.rank, self.device)

    def _model(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError("CriticWorker.init_model has not run")
        return self.model

    def _settings(self) -> UpdateSettings:
        cfg = self.config
        mini = mini_batch_per_worker(cfg.ppo_mini_batch_size, cfg.rollout_n, self.world_size,
                                     "critic.ppo_mini_batch_size")  # fmt: skip
        micro = micro_batch_per_worker(
            cfg.ppo_micro_batch_size_per_gpu,
            cfg.ppo_micro_batch_size,
            self.world_size,
            "critic.ppo_micro_batch_size",
        )
        return UpdateSettings(
            mini_batch_size=mini,
            epochs=int(cfg.ppo_epochs),
            shuffle=bool(cfg.shuffle),
            batching=micro_batching(cfg.use_dynamic_bsz, micro, cfg.ppo_max_token_len_per_gpu,
                                    cfg.shared_prefix),  # fmt: skip
            grad_clip=float(cfg.grad_clip),
            loss_agg_mode=cfg.loss_agg_mode,
            seed=self.seed,
        )

    @register(Dispatch.DP_COMPUTE, pad=True)
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` (B, R): the critic's estimate for each response token (0 off-mask)."""
        model = self._model()
        require_keys(data, ("input_ids", "attention_mask", "responses"), "compute_values")
        cfg = self.config
        batching = micro_batching(
            cfg.use_dynamic_bsz,
            cfg.forward_micro_batch_size_per_gpu,
            cfg.forward_max_token_len_per_gpu,
            cfg.shared_prefix,
        )
        model.eval()
        with self.residency.on_device():
            (values,) = micro_batched_forward(
                model, model_inputs(data), batching,
                lambda m, batch: (response_values(m, batch, bool(cfg.shared_prefix)),),
            )
        if "response_mask" in data.batch.keys():
            values = values * data.batch["response_mask"]
        return DataProto.from_dict(tensors={"values": values})

    @register(Dispatch.DP_COMPUTE)
    def update_critic(self, data: DataProto) -> DataProto:
        """Clipped value-loss epochs on this rank's share; returns ``critic/*`` metrics."""
        model = self._model()
        needed = ("response_mask", "values", "returns")
        require_keys(data, ("input_ids", "attention_mask", "responses", *needed), "update_critic")
        started = time.perf_counter()
        lr = self.lr_scheduler.get_last_lr()[0]
        model.train()
        with self.residency.on_device(optimizer=True):
            metrics = run_update(
                model,
                self.optimizer,
                model_inputs(data, needed),
                self._settings(),
                self._micro_loss,
                prefix="critic",
                step=int(self.lr_scheduler.last_epoch),
            )
        self.lr_scheduler.step()
        self.global_step += 1
        metrics["critic/lr"] = lr
        metrics["timing/update_critic_s"] = time.perf_counter() - started
        return DataProto(meta_info={"metrics": metrics})

    def _micro_loss(self, micro: DataProto) -> MicroResult:
        batch = micro.batch
        mask = batch["response_mask"]  # (b, R)
        vpreds = response_values(self._model(), batch, bool(self.config.shared_prefix))  # (b, R)
        loss, clipfrac = compute_value_loss(
            vpreds,
            batch["returns"],
            batch["values"],
            mask,
            float(self.config.cliprange_value),
            self.config.loss_agg_mode,
        )
        return MicroResult(
            loss=loss,
            losses={"critic/vf_loss": loss.detach()},
            stats={
                "critic/vf_clipfrac": clipfrac.detach(),
                "critic/vpred_mean": masked_mean(vpreds.detach(), mask),
            },
        )

    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int | None = None) -> str:
        """Sharded model/optimizer, scheduler + RNG (+ an HF export with ``hf_model``)."""
        step = self.global_step if global_step is None else global_step
        with self.residency.on_device(optimizer=True):
            path = checkpoint.save_checkpoint(
                local_path,
                self._model(),
                self.optimizer,
                self.lr_scheduler,
                self.config.checkpoint.save_contents,
                self.tokenizer,
                extra_state={"global_step": step},
            )
        return str(path)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str) -> int:
        """Resume from ``save_checkpoint``'s directory; returns the saved global step."""
        with self.residency.on_device(optimizer=True):
            extra = checkpoint.load_checkpoint(
                local_path,
                self._model(),
                self.optimizer,
                self.lr_scheduler,
                self.config.checkpoint.load_contents,
            )
        self.global_step = int(extra.get("global_step", self.global_step))
        return self.global_step


def _with_path(model_cfg: Any, path: str) -> Any:
    """A copy of the critic's model config with ``path`` set (it defaults to the policy's)."""
    from omegaconf import OmegaConf

    copy = OmegaConf.create(OmegaConf.to_container(model_cfg, resolve=True))
    copy.path = path
    return copy
