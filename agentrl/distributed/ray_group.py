"""RayWorkerGroup: one Ray actor per rank, forming one torch.distributed process group.

    ray.init(num_cpus=2)
    pool = ResourcePool([2])
    group = RayWorkerGroup(pool, WorkerSpec(ActorRolloutRefWorker, config, role="actor"))
    group.init_model()
    out = group.compute_log_prob(batch)      # each rank gets half the batch
    group.shutdown(); pool.remove()

Start-up: every rank's actor is created in its placement-group bundle with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` in its environment; each reports
its Ray node (``group.node_ids``, logged); rank 0 picks a free port on its node; then all
ranks set ``MASTER_ADDR``/``MASTER_PORT``, join the process group with ``dist_timeout_s``
and build their roles.

Failures: the driver waits for the ranks one by one. When a rank fails, the others get
``error_grace_s`` to finish (they may fail the same way); ranks still running then are
waiting for the failed one in a collective, so the group kills every actor rather than
leave them hanging, and the ``WorkerError`` says so. A rank whose process is gone (its
actor died or is unreachable: a segfault, an out-of-memory kill, a lost node) leaves the
group unusable at once: the others are stopped without waiting, and the error names the
rank, its node and whether the node was lost (``agentrl.distributed.nodes``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from agentrl.distributed.group import DEFAULT_DIST_TIMEOUT_S, WorkerGroup
from agentrl.distributed.nodes import describe_node, lost_node_state, node_table
from agentrl.distributed.resource_pool import ResourcePool
from agentrl.distributed.worker import RankFailure, WorkerError, WorkerHost, WorkerSpec

logger = logging.getLogger(__name__)


class RayWorkerGroup(WorkerGroup):
    """Ranks as Ray actors in a ResourcePool; see the module docstring."""

    def __init__(
        self,
        resource_pool: ResourcePool,
        workers: WorkerSpec | Mapping[str, WorkerSpec],
        *,
        dist_timeout_s: float = DEFAULT_DIST_TIMEOUT_S,
        error_grace_s: float = 10.0,
        setup_timeout_s: float = 300.0,
    ) -> None:
        import ray

        if not ray.is_initialized():
            raise RuntimeError("RayWorkerGroup needs Ray: call ray.init(...) first")
        self._world_size = resource_pool.world_size
        super().__init__(workers)
        self.resource_pool = resource_pool
        self.error_grace_s = error_grace_s
        self._broken: str | None = None
        self.node_ids: list[str | None] = []  # the Ray node of each rank, from setup on
        self._actors = self._create_actors()
        try:
            self._setup(dist_timeout_s, setup_timeout_s)
        except BaseException:
            self._kill_actors()
            raise

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def usable(self) -> bool:
        return self._broken is None

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, in rank order."""
        return list(self._actors)

    def _create_actors(self) -> list[Any]:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        host_cls = ray.remote(WorkerHost)
        world_size = self.resource_pool.world_size
        resources = self.resource_pool.actor_resources()
        actors = []
        for rank, bundle in enumerate(self.resource_pool.bundles()):
            env = {
                "RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_RANK": str(bundle.local_rank),
                "LOCAL_WORLD_SIZE": str(bundle.local_world_size),
            }
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=bundle.placement_group,
                placement_group_bundle_index=bundle.bundle_index,
            )
            actor = host_cls.options(scheduling_strategy=strategy, **resources).remote(
                self.specs, env
            )
            actors.append(actor)
        return actors

    def _setup(self, dist_timeout_s: float, setup_timeout_s: float) -> None:
        import ray

        address = self._actors[0].free_address.remote()
        node_ids = [actor.node_id.remote() for actor in self._actors]
        try:
            (addr, port), *self.node_ids = ray.get([address, *node_ids], timeout=setup_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"the ranks did not start within {setup_timeout_s:.0f} s") from None
        refs = [actor.setup.remote(addr, port, dist_timeout_s) for actor in self._actors]
        self._gather(refs, "worker group setup")  # raises WorkerError on a failed rank
        table = node_table()
        logger.info(
            "%d ranks up (%s), process group at %s:%s; %s",
            self.world_size,
            ", ".join(f"{r}: {s.cls.__qualname__}" for r, s in self.specs.items()),
            addr,
            port,
            ", ".join(
                f"rank {rank} on {describe_node(node, table)}"
                for rank, node in enumerate(self.node_ids)
            ),
        )

    def _run(self, role: str, name: str, calls: Any, what: str) -> list[Any]:
        if self._broken is not None:
            raise RuntimeError(
                f"cannot call {what}: the worker group is unusable since {self._broken}"
            )
        refs = [
            actor.execute.remote(role, name, args, kwargs)
            for actor, args, kwargs in zip(self._actors, calls.args, calls.kwargs, strict=True)
        ]
        return self._gather(refs, what)

    def _gather(self, refs: list[Any], what: str) -> list[Any]:
        """Wait for every rank; on a failure give the others ``error_grace_s`` (none when a
        rank is lost), then stop those still running and raise WorkerError."""
        import ray

        results: list[Any] = [None] * len(refs)
        failures: list[RankFailure] = []
        node_states: dict[str | None, str] = {}
        pending = {ref: rank for rank, ref in enumerate(refs)}
        deadline: float | None = None
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
            if not ready:
                break  # the grace period is over
            for ref in ready:
                rank = pending.pop(ref)
                value = self._get(ref, rank, node_states)
                if isinstance(value, RankFailure):
                    failures.append(value)
                    if value.lost:  # nothing can complete a collective with it any more
                        deadline = time.monotonic()
                    elif deadline is None:
                        deadline = time.monotonic() + self.error_grace_s
                else:
                    results[rank] = value
        if not failures:
            return results
        lost = [f for f in failures if f.lost]
        stopped = bool(pending) or bool(lost)
        if stopped:
            self._broken = (
                f"{what} lost rank {lost[0].rank} ({lost[0].lost})"
                if lost
                else f"{what} failed on rank {failures[0].rank} while ranks "
                f"{sorted(pending.values())} were still running"
            )
            self._kill_actors()
        raise WorkerError(what, sorted(failures, key=lambda f: f.rank), len(refs), stopped)

    def _get(self, ref: Any, rank: int, node_states: dict[str | None, str]) -> Any:
        """The value of a finished call; a Ray error (the rank's actor died or is
        unreachable) becomes a RankFailure that says what became of the rank's node (asked
        once per node and call: the ranks of a lost node fail together)."""
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            node = self.node_ids[rank] if rank < len(self.node_ids) else None
            if node not in node_states:
                node_states[node] = lost_node_state(node)
            return RankFailure(rank, type(exc).__name__, f"the worker process failed: {exc}",
                               lost=node_states[node])  # fmt: skip

    def _kill_actors(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor, no_restart=True)

    def shutdown(self) -> None:
        """Leave the process group and kill the actors (the pool stays reserved)."""
        import ray

        if self._broken is None and self._actors:
            refs = [actor.shutdown.remote() for actor in self._actors]
            try:
                ray.get(refs, timeout=30)
            except (ray.exceptions.RayError, TimeoutError) as exc:
                logger.warning("worker group shutdown: %s", exc)
        self._kill_actors()
        self._broken = self._broken or "it was shut down"
        self._actors = []
