"""The rollout inside the hybrid worker, and weight sync from the trainer to the engine.

    rollout = HybridRollout(cfg.actor_rollout_ref, tokenizer)
    out = rollout.generate_sequences(prompts)       # the configured engine on this rank's share
    rollout.update_weights(fsdp_model, step)        # after every actor update

Every rank owns a rollout built by ``agentrl.workers.rollout_assembly.build_rollout``: a
backend and the engine kind the config asks for (the in-process engine or a user's
``engine_class``, the sharded engine, or agent mode) with the configured tools and
interactions; their coroutines run on one event-loop thread of this worker, so loop-bound
clients (the hf batching task, httpx) live in a single loop.

Weight sync, by backend:

- ``hf`` (embedded, its own unsharded copy): every rank gathers the full weights from FSDP
  one bucket at a time (``rollout.update_weights_bucket_megabytes``; a tensor larger than
  that is a bucket of its own) and the backend copies each bucket into its model in place
  (``update_weights(bucket)``), so no rank ever holds the whole model gathered.
- ``sglang``: the weights are written as a Hugging Face directory, one safetensors shard
  per bucket (gathered bucket by bucket like ``hf``), and the servers load it
  (``/update_weights_from_disk``); then every rank waits at a barrier. With ``server_urls``
  rank 0 writes and tells every server; with servers the ranks launched (``server_urls``
  empty: ``rollout_servers.launch_rank_servers``, on each rank's own GPUs) each rank that
  launched servers tells its own, reading the copy in ``rollout.weights_dir`` (a directory
  every node mounts, written once) or, when that is null, its node's (written by the node's
  first rank): ``rollout_servers.plan_disk_sync``. The colocated
  ``/update_weights_from_tensor`` and NCCL broadcast paths are designed in docs/workers.md.
- any other backend: gets the full state dict like ``hf``.

On a GPU the engine's memory is released after generation (``rollout.free_cache_engine``)
and resumed before the next weight sync, so training has the GPU to itself (sleep/wake).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from agentrl.protocol import DataProto
from agentrl.utils.aio import LoopThread
from agentrl.utils.plain_config import plain_config
from agentrl.workers.fsdp import full_state_dict, iter_full_weights
from agentrl.workers.rollout_assembly import build_rollout
from agentrl.workers.rollout_servers import DiskSync, launch_rank_servers, plan_disk_sync

logger = logging.getLogger(__name__)
T = TypeVar("T")


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


class HybridRollout:
    """A rank's rollout (``rollout_assembly.build_rollout``: backend and engine kind) and its
    weight sync; ``config`` is ``actor_rollout_ref``. ``weights_dir`` replaces
    ``rollout.weights_dir``. Building it is a collective with the sglang backend (the ranks
    agree on who launches servers and who writes the weights)."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        chat_template_kwargs: dict[str, Any] | None = None,
        weights_dir: str | Path | None = None,
        seed: int | None = None,
    ) -> None:
        self.config = config
        self.loop = LoopThread()
        rollout_cfg = plain_config(config.rollout)
        servers = None
        if rollout_cfg.name == "sglang" and not rollout_cfg.server_urls:
            servers = launch_rank_servers(rollout_cfg, config.model.path, tokenizer)
        self.disk_sync: DiskSync | None = None  # how weights reach sglang servers
        self.weights_dir: Path | None = None
        try:
            self.rollout = build_rollout(
                config, tokenizer, loop=self.loop, seed=seed,
                chat_template_kwargs=chat_template_kwargs,
                backend=servers.backend if servers is not None else None,
            )  # fmt: skip
            if servers is not None:
                self.rollout.own_backend = True  # made for this rollout: closed with it
            self.rollout_cfg = self.rollout.config  # resolved, read-only
            self.backend = self.rollout.backend
            self.engine = self.rollout.engine
            if self.kind == "sglang":
                self.disk_sync = plan_disk_sync(
                    weights_dir if weights_dir is not None else self.rollout_cfg.weights_dir,
                    launched=servers is not None, owner=servers is not None and servers.owner,
                )  # fmt: skip
                self.weights_dir = self.disk_sync.directory
        except BaseException:
            if servers is not None:  # no server outlives a start that failed
                self.loop.run(servers.backend.aclose(), timeout=60)
            self.loop.close()
            raise
        self.awake = True
        # sleep after generation only where there is device memory to give back
        self.release_after_generation = bool(
            self.rollout_cfg.free_cache_engine and torch.cuda.is_available()
        )

    @property
    def engine_kind(self) -> str:
        """``engine``, ``sharded`` or ``agent`` (``rollout_assembly.ENGINE_KINDS``)."""
        return self.rollout.kind

    @property
    def kind(self) -> str:
        """``hf``, ``sglang`` or ``other`` (a user's backend)."""
        from agentrl.rollout.backends.hf import HFBackend
        from agentrl.rollout.backends.sglang import SGLangBackend

        if isinstance(self.backend, HFBackend):
            return "hf"
        return "sglang" if isinstance(self.backend, SGLangBackend) else "other"

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Roll out ``prompts``; the engine is woken first and put to sleep after on GPU."""
        self._wake()
        try:
            return self.rollout.generate_sequences(prompts)
        finally:
            if self.release_after_generation:
                self.loop.run(self.backend.release_memory())
                self.awake = False

    def _wake(self) -> None:
        if not self.awake:
            self.loop.run(self.backend.resume_memory())
            self.awake = True

    def update_weights(self, model: torch.nn.Module, step: int) -> None:
        """Give the backend the current weights of the sharded ``model`` (a collective)."""
        self._wake()
        version = str(step)
        if self.kind == "sglang":
            self._update_from_disk(model, version)
            return
        if self.kind == "hf":
            # bucket by bucket: never the whole model gathered at once on a rank
            for bucket in iter_full_weights(model, self._bucket_bytes()):
                self.loop.run(self.backend.update_weights(bucket, weight_version=version))
                del bucket
        else:
            self.loop.run(self.backend.update_weights(full_state_dict(model)))
        logger.info(
            "rank %d: rollout weights synced (%s backend, step %s)", _rank(), self.kind, version
        )

    def _bucket_bytes(self) -> int:
        return int(self.rollout_cfg.update_weights_bucket_megabytes) << 20

    def _update_from_disk(self, model: torch.nn.Module, version: str) -> None:
        from agentrl.workers.checkpoint import export_hf

        sync = self.disk_sync
        target = sync.directory / f"step_{version}"
        # a collective; a writer writes one shard per bucket, never holding the whole model
        export_hf(target, model, bucket_bytes=self._bucket_bytes(), writer=sync.writes)
        if sync.sends:
            self.loop.run(self.backend.update_weights(str(target), weight_version=version))
        if sync.writes:
            for old in sync.directory.glob("step_*"):
                if old != target:
                    shutil.rmtree(old, ignore_errors=True)
        _barrier()  # no rank generates before every server has the new weights

    def close(self) -> None:
        """Stop the engine workers, the backend (and servers it launched), the loop thread."""
        self.rollout.close()
        self.loop.close()
        if self.disk_sync is not None:
            self.disk_sync.close()  # a temporary directory this rank made
