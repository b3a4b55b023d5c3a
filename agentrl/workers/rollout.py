"""The rollout inside the hybrid worker, and weight sync from the trainer to the engine.

    rollout = HybridRollout(RolloutSettings.from_config(cfg.actor_rollout_ref), tokenizer)
    out = rollout.generate_sequences(prompts)       # the configured engine on this rank's share
    rollout.update_weights(fsdp_model, step)        # after every actor update

Every rank owns a rollout built by ``agentrl.workers.rollout_assembly.build_rollout``: a
backend and the engine kind the config asks for (the in-process engine or a user's
``engine_class``, the sharded engine, or agent mode) with the configured tools and
interactions; their coroutines run on one event-loop thread of this worker, so loop-bound
clients (the hf batching task, httpx) live in a single loop.

Weight sync, by how the backend takes weights (its ``weight_sync``, asked of it, never
of its name; agentrl/rollout/backends/registry.py):

- ``tensors`` (an engine in this process with its own unsharded copy, e.g. ``hf``): every
  rank gathers the full weights from FSDP one bucket at a time
  (``rollout.update_weights_bucket_megabytes``; a tensor larger than that is a bucket of its
  own) and the backend copies each bucket into its model in place
  (``update_weights(bucket)``), so no rank ever holds the whole model gathered.
- ``disk`` (servers: ``sglang``, ``vllm``, ``agentrl serve``): the weights are written as a
  Hugging Face directory, one safetensors shard per bucket (gathered bucket by bucket), and
  the servers load it; then every rank waits at a barrier. With ``server_urls`` rank 0
  writes and tells every server; with servers the ranks launched (``server_urls`` empty and
  a backend that ``launches_servers``: ``rollout_servers.launch_rank_servers``, on each
  rank's own GPUs) each rank that launched servers tells its own, reading the copy in
  ``rollout.weights_dir`` (a directory every node mounts, written once) or, when that is
  null, its node's (written by the node's first rank): ``rollout_servers.plan_disk_sync``.
  For servers that cannot update a tied output layer in place (the plugin's
  ``updates_tied_output``: vLLM's CPU build), a tied model is written untied, its
  ``lm_head.weight`` a copy of the updated embeddings (agentrl/rollout/backends/untie.py).
- ``transfer`` (``vllm`` with ``rollout.weight_transfer`` ``nccl`` or ``ipc``, GPUs only):
  the backend's own collective (``backend.weight_transfer``,
  agentrl/rollout/backends/vllm_transfer.py): every rank gathers each weight once, in the
  same order, and rank 0 sends it to every server (NCCL broadcast, or CUDA IPC handles);
  then every rank waits at a barrier. It needs one sender for all servers: ``server_urls``,
  or servers launched by a single rank.
- ``state_dict`` (a user's backend that does not say): the full state dict at once.

After every sync (``rollout.verify_weights``: ``every_sync``, ``first_sync`` or ``off``) the
backend checks that what it holds is what was sent (``verify_weights``: the hf engine compares
its tensors; servers answer per-tensor checksums and score a probe sequence whose log-probs
must equal the trainer's, agentrl/rollout/backends/verify.py); a mismatch raises
``WeightMismatchError`` naming the server and the first tensor that differs, and
``weights_verified`` (read by the trainer as ``rollout/weights_verified``) counts the servers
verified by the last sync. Then the canary (``rollout.canary``, agentrl/workers/canary.py):
every server scores fixed sequences against the trainer's log-probs on the weights it sent,
and a server that diverges (or, with several servers, fails the weight check) is drained,
sent the weights again and re-admitted once it passes; its metrics are ``canary_metrics``.

On a GPU the engine's memory is released after generation (``rollout.free_cache_engine``)
and resumed before the next weight sync, so training has the GPU to itself (sleep/wake).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import Any, TypeVar

import torch

from agentrl.distributed.process_group import barrier, rank, world_size
from agentrl.protocol import DataProto
from agentrl.rollout.backends.registry import backend_plugin, weight_sync_of
from agentrl.rollout.backends.verify import verify_after_sync
from agentrl.utils.aio import LoopThread
from agentrl.workers.canary import CanaryWatch
from agentrl.workers.fsdp import full_state_dict, iter_full_weights, named_full_weights
from agentrl.workers.rollout_assembly import build_rollout
from agentrl.workers.rollout_servers import DiskSync, launch_rank_servers, plan_disk_sync
from agentrl.workers.rollout_settings import RolloutSettings

logger = logging.getLogger(__name__)
T = TypeVar("T")


class HybridRollout:
    """A rank's rollout (``rollout_assembly.build_rollout``: backend and engine kind) and its
    weight sync; ``settings`` is ``RolloutSettings.from_config(actor_rollout_ref)``
    (rollout_settings.py), built once by the actor worker. ``weights_dir`` replaces
    ``rollout.weights_dir``. Building it is a collective with the sglang backend (the ranks
    agree on who launches servers and who writes the weights)."""

    def __init__(
        self,
        settings: RolloutSettings,
        tokenizer: Any,
        chat_template_kwargs: dict[str, Any] | None = None,
        weights_dir: str | Path | None = None,
        seed: int | None = None,
    ) -> None:
        self.settings = settings
        self.loop = LoopThread()
        section = settings.section
        servers = None
        if backend_plugin(section["name"]).launches_servers and not section["server_urls"]:
            servers = launch_rank_servers(section, settings.model.path, tokenizer)
        # servers that keep a stale tied output layer are sent an untied one (untie.py)
        self.untie_output = not backend_plugin(section["name"]).updates_tied_output(section)
        self.disk_sync: DiskSync | None = None  # how weights reach servers by disk
        self.weights_dir: Path | None = None
        try:
            self.rollout = build_rollout(
                settings, tokenizer, loop=self.loop, seed=seed,
                chat_template_kwargs=chat_template_kwargs,
                backend=servers.backend if servers is not None else None,
            )  # fmt: skip
            if servers is not None:
                self.rollout.own_backend = True  # made for this rollout: closed with it
            self.backend = self.rollout.backend
            self.engine = self.rollout.engine
            self.weight_sync = weight_sync_of(self.backend)
            if self.weight_sync == "disk":
                self.disk_sync = plan_disk_sync(
                    weights_dir if weights_dir is not None else settings.weights_dir,
                    launched=servers is not None, owner=servers is not None and servers.owner,
                )  # fmt: skip
                self.weights_dir = self.disk_sync.directory
            if self.weight_sync == "transfer" and servers is not None and world_size() > 1:
                raise ValueError(
                    "actor_rollout_ref.rollout.weight_transfer sends from rank 0 to every "
                    "server, and each of the trainer's ranks launched its own: give the servers "
                    "in rollout.server_urls, or set weight_transfer=null (the disk path)")
        except BaseException:
            if servers is not None:  # no server outlives a start that failed
                self.loop.run(servers.backend.aclose(), timeout=60)
            self.loop.close()
            raise
        self.awake = True
        self.weights_verified = 0  # servers the last sync verified (rollout/weights_verified)
        self.transfer: Any = None  # the backend's weight transfer, made at the first sync
        self._syncs = 0
        self.canary = CanaryWatch(settings.canary, self.backend, self.loop,
                                  tokenizer)  # fmt: skip
        self.canary_metrics: dict[str, float] = {}  # the last sync's rollout/canary/*
        # sleep after generation only where there is device memory to give back
        self.release_after_generation = bool(
            settings.free_cache_engine and torch.cuda.is_available()
        )

    @property
    def engine_kind(self) -> str:
        """``engine``, ``sharded`` or ``agent`` (``rollout_assembly.ENGINE_KINDS``)."""
        return self.rollout.engine_kind

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Roll out ``prompts``; the engine is woken first and put to sleep after on GPU. A
        server whose weights changed since the sync is drained first (the canary's
        ``before_rollout``)."""
        self._wake()
        self.canary.before_rollout()
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
        self._syncs += 1
        verify = verify_after_sync(self.settings.verify_weights, self._syncs)
        self.canary_metrics = {}
        if self.weight_sync == "disk":
            self.weights_verified = self._update_from_disk(model, version, verify)
        elif self.weight_sync == "transfer":
            if self.transfer is None:  # every rank: NCCL's group forms here
                self.transfer = self.backend.weight_transfer(
                    lambda: named_full_weights(model), rank=rank())
            self.weights_verified = self.transfer.send(version, verify=verify)
            self.canary_metrics = self.canary.after_sync(model, self._syncs, rank() == 0)
            barrier()  # no rank generates before every server has the new weights
        elif self.weight_sync == "tensors":
            verified = True
            # bucket by bucket: never the whole model gathered at once on a rank
            for bucket in iter_full_weights(model, self._bucket_bytes()):
                self.loop.run(self.backend.update_weights(bucket, weight_version=version))
                if verify:
                    verified = self.loop.run(self.backend.verify_weights(bucket)) and verified
                del bucket
            self.weights_verified = int(verify and verified)
            self.canary_metrics = self.canary.after_sync(model, self._syncs)
        else:
            state = full_state_dict(model)
            self.loop.run(self.backend.update_weights(state))
            verifier = getattr(self.backend, "verify_weights", None)
            self.weights_verified = int(self.loop.run(verifier(state))) if (
                verify and verifier is not None) else 0
            self.canary_metrics = self.canary.after_sync(model, self._syncs)
        logger.info("rank %d: rollout weights synced (%s sync, step %s, %d verified)", rank(),
                    self.weight_sync, version, self.weights_verified)  # fmt: skip

    def drained_servers(self) -> dict[str, str]:
        """The servers the canary drained now, with why (a backend that cannot drain: none)."""
        pool = getattr(self.backend, "pool", None)
        if pool is None:
            return {}
        return {url: pool.states[url].drained_reason for url in pool.drained()}

    def canary_servers(self) -> list[str]:
        servers = getattr(self.backend, "canary_servers", None)
        return list(servers()) if servers is not None else []

    def _bucket_bytes(self) -> int:
        return self.settings.update_weights_bucket_megabytes << 20

    def _update_from_disk(self, model: torch.nn.Module, version: str, verify: bool) -> int:
        """Write the weights, have this rank's servers load them (and verify them); returns
        the servers verified."""
        from agentrl.workers.checkpoint import export_hf

        sync = self.disk_sync
        target = sync.directory / f"step_{version}"
        # a collective; a writer writes one shard per bucket, never holding the whole model
        export_hf(target, model, bucket_bytes=self._bucket_bytes(), writer=sync.writes,
                  untie=self.untie_output)  # fmt: skip
        verified = 0
        probe = self._probe(model) if verify else None  # a collective forward
        # with a canary and several servers, a server failing the check is drained, not fatal
        mismatches: list[Exception] | None = (
            [] if self.canary.due(self._syncs) and len(self.canary_servers()) > 1 else None)
        if sync.sends:
            self.loop.run(self.backend.update_weights(str(target), weight_version=version))
            if verify:
                verified = self.loop.run(self.backend.verify_weights(
                    str(target), probe, mismatches=mismatches))  # fmt: skip
        self.canary_metrics = self.canary.after_sync(model, self._syncs, sync.sends,
                                                     mismatches or ())  # a collective forward
        if sync.writes:
            for old in sync.directory.glob("step_*"):
                if old != target:
                    shutil.rmtree(old, ignore_errors=True)
        barrier()  # no rank generates before every server has the new weights
        return verified

    def _probe(self, model: torch.nn.Module) -> Any:
        """The trainer's log-probs of the probe sequence under the weights it sends (every
        rank runs the forward: the sharded model gathers its layers), in eval mode. None when
        the servers hold weights in another dtype than fp32 (a GPU's bf16: rounding hides a
        small difference there, and there every tensor has its checksum)."""
        from agentrl.rollout.backends.verify import Probe, probe_ids, probe_tolerance

        dtype = getattr(self.backend, "weights_dtype", None)
        if dtype not in (None, "float32"):
            return None
        ids = probe_ids(int(model.config.vocab_size))
        device = next(model.parameters()).device
        training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids], device=device),
                               use_cache=False).logits  # fmt: skip
        finally:
            model.train(training)
        log_probs = torch.log_softmax(logits[0, :-1].float(), -1)  # (T - 1, V)
        chosen = log_probs.gather(1, torch.tensor(ids[1:], device=device)[:, None])[:, 0]
        return Probe(ids, chosen.cpu().tolist(), probe_tolerance(dtype))

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the rollout runs on (its thread's; a watchdog reports its tasks)."""
        return self.loop.loop

    def close(self) -> None:
        """Stop the weight transfer, the engine workers, the backend (and servers it
        launched), the loop thread."""
        if self.transfer is not None:
            self.transfer.close()
            self.transfer = None
        self.rollout.close()
        self.loop.close()
        if self.disk_sync is not None:
            self.disk_sync.close()  # a temporary directory this rank made
