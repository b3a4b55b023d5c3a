"""Rollout across worker processes (``actor_rollout_ref.rollout.engine_workers: N``).

One ``AsyncRolloutEngine`` spends its own CPU on every generation and tool event (rendering,
tokenizing, parsing, bookkeeping); with thousands of multi-turn requests in flight that, not
the inference servers, sets the step time. ``ShardedRolloutEngine`` runs N engines in N Ray
actors (``EngineWorker``), gives each a contiguous slice of the batch's prompts, and merges
their finished requests (unpadded token lists, far smaller than the padded tensors) back in
the original order, padded once by the driver, with exactly the metrics one engine reports
(they are computed over all the requests):

    engine = ShardedRolloutEngine(2, rollout_cfg, tokenizer_source, make_backend, make_tools)
    out = engine.generate_sequences(batch)     # as AsyncRolloutEngine.generate_sequences

Every worker builds its own backend client to the same inference endpoints (``make_backend``:
a picklable callable taking the tokenizer; the trainer passes an SGLang client of the servers
it launched) and its own tool and interaction instances (``make_tools``,
``make_interactions``): tools that keep shared state between requests must keep it outside
the process (a server, a file), as verl's agent-loop workers require too. N = 1 never
starts an actor: the trainer then uses the in-process engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agentrl.protocol import DataProto

logger = logging.getLogger(__name__)


class EngineWorker:
    """One process's engine (the body of a Ray actor; see the module docstring)."""

    def __init__(
        self,
        rollout_config: Any,
        tokenizer_source: Mapping[str, Any],
        make_backend: Callable[[Any], Any],
        make_tools: Callable[[], dict] | None = None,
        make_interactions: Callable[[], dict] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        from agentrl.models.tokenizer import load_tokenizer
        from agentrl.rollout.assembly import build_engine
        from agentrl.utils.aio import LoopThread

        tokenizer = load_tokenizer(**dict(tokenizer_source))
        self.loop = LoopThread("agentrl-engine-worker")
        self.backend = make_backend(tokenizer)
        # the trainer's in-process engine (or rollout.engine_class), with this process's tools
        self.engine = build_engine(
            rollout_config, tokenizer, self.backend,
            tools=make_tools() if make_tools else {},
            interactions=make_interactions() if make_interactions else {},
            chat_template_kwargs=chat_template_kwargs,
        )  # fmt: skip

    def ready(self) -> bool:
        """True once built (the constructor raised otherwise)."""
        return True

    def rollout(self, batch: DataProto, first_row: int) -> list[Any]:
        """The finished requests of a slice whose first row is ``first_row`` of the whole
        batch (their row ids made global), unpadded: the driver pads them all at once."""
        requests = self.loop.run(self.engine.arollout(batch))
        for request in requests:
            request.batch_data_id += first_row
        return requests

    def close(self) -> None:
        aclose = getattr(self.backend, "aclose", None)
        if aclose is not None:
            self.loop.run(aclose())
        close_engine = getattr(self.engine, "close", None)  # its tokenization check worker
        if close_engine is not None:
            close_engine()
        self.loop.close()


def shard_rows(n_rows: int, n_shards: int) -> list[np.ndarray]:
    """Contiguous, near-equal row slices (the first ones one row longer); empty ones dropped."""
    return [part for part in np.array_split(np.arange(n_rows), n_shards) if len(part)]


class ShardedRolloutEngine:
    """N ``EngineWorker`` Ray actors behind ``generate_sequences`` (see the module docstring)."""

    def __init__(
        self,
        n_workers: int,
        rollout_config: Any,
        tokenizer_source: Mapping[str, Any],
        make_backend: Callable[[Any], Any],
        make_tools: Callable[[], dict] | None = None,
        make_interactions: Callable[[], dict] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        import ray

        from agentrl.models.tokenizer import load_tokenizer
        from agentrl.rollout.collector import TrajectoryCollector
        from agentrl.rollout.engine_config import RolloutConfig

        if n_workers < 2:
            raise ValueError(f"engine_workers must be >= 2 to shard, got {n_workers}")
        if not ray.is_initialized():
            ray.init(include_dashboard=False)
        remote = ray.remote(num_cpus=0)(EngineWorker)  # event-loop processes, not compute
        self.workers = [
            remote.remote(rollout_config, dict(tokenizer_source), make_backend, make_tools,
                          make_interactions, dict(chat_template_kwargs or {}))
            for _ in range(n_workers)
        ]  # fmt: skip
        ray.get([worker.ready.remote() for worker in self.workers])  # a bad tool fails here
        # the padding and metrics of the workers' finished requests
        self.collector = TrajectoryCollector(RolloutConfig.from_config(rollout_config),
                                             load_tokenizer(**dict(tokenizer_source)),
                                             chat_template_kwargs)  # fmt: skip
        logger.info("rollout sharded over %d engine workers", n_workers)

    def generate_sequences(self, batch: DataProto) -> DataProto:
        """Each worker rolls out a slice of the prompts; outputs merged in input order."""
        import ray

        started = time.perf_counter()
        shards = shard_rows(len(batch), len(self.workers))
        futures = [worker.rollout.remote(batch[rows], int(rows[0]))
                   for worker, rows in zip(self.workers, shards, strict=False)]
        # the output's padding is filled (by a thread) while the workers roll out
        n, _ = self.collector.sampling_params(bool(batch.meta_info.get("validate", False)))
        padded = self.collector.padded_rows([(i, k) for i in range(len(batch)) for k in range(n)])
        requests = []
        while futures:
            done, futures = ray.wait(futures, num_returns=1)
            for request in ray.get(done[0]):
                padded.add(request)
                requests.append(request)
        # the same padding and metrics as one engine's collect, over all the requests
        return self.collector.collect(requests, batch, time.perf_counter() - started, padded)

    def close(self) -> None:
        import ray

        for worker in self.workers:
            try:
                ray.get(worker.close.remote(), timeout=30)
            except Exception as err:  # noqa: BLE001 - shutting down regardless
                logger.warning("closing an agent worker failed: %s", err)
            ray.kill(worker)
        self.workers = []


__all__ = ["EngineWorker", "ShardedRolloutEngine", "shard_rows"]

