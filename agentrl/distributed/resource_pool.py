"""Resource pools: where the ranks of a worker group run, as Ray placement groups.

    pool = ResourcePool([8, 8], use_gpu=True)        # 2 nodes x 8 GPU processes
    pool = ResourcePool([2], use_gpu=False)          # 2 CPU processes on one node

Each node gets one placement group with one bundle per process, packed on a single node
(``STRICT_PACK``), so rank ``r`` is bundle ``r`` in node-major order and its local rank is
its bundle index. A bundle holds one GPU (or none on CPU) and ``cpus_per_process`` CPUs.
``max_colocate_count`` is how many worker groups may share the bundles (verl's name): each
group's actor then asks for that fraction of the bundle, so an actor group and a critic
group can both sit on the same GPUs when they are not colocated in one process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bundle:
    """Where one rank runs: a placement group, its bundle index, and the node-local rank."""

    placement_group: object
    bundle_index: int
    local_rank: int
    local_world_size: int


class ResourcePool:
    """Processes per node over Ray placement groups, created on first use."""

    def __init__(
        self,
        process_on_nodes: list[int],
        use_gpu: bool = False,
        cpus_per_process: float = 1.0,
        max_colocate_count: int = 1,
        name_prefix: str = "agentrl",
        ready_timeout_s: float = 300.0,
    ) -> None:
        if not process_on_nodes or any(n < 1 for n in process_on_nodes):
            raise ValueError(
                f"process_on_nodes must list >= 1 process per node, got {process_on_nodes}"
            )
        if max_colocate_count < 1:
            raise ValueError(f"max_colocate_count must be >= 1, got {max_colocate_count}")
        self.process_on_nodes = list(process_on_nodes)
        self.use_gpu = use_gpu
        self.cpus_per_process = cpus_per_process
        self.max_colocate_count = max_colocate_count
        self.name_prefix = name_prefix
        self.ready_timeout_s = ready_timeout_s
        self._placement_groups: list[object] = []

    @property
    def world_size(self) -> int:
        """Total number of processes (ranks)."""
        return sum(self.process_on_nodes)

    def actor_resources(self) -> dict[str, float]:
        """The Ray resources one rank's actor asks for (its share of a bundle)."""
        share = 1.0 / self.max_colocate_count
        return {
            "num_cpus": self.cpus_per_process * share,
            "num_gpus": share if self.use_gpu else 0.0,
        }

    def bundles(self) -> list[Bundle]:
        """One bundle per rank, in rank order; creates the placement groups if needed."""
        placement_groups = self._ensure_placement_groups()
        return [
            Bundle(pg, i, i, count)
            for pg, count in zip(placement_groups, self.process_on_nodes, strict=True)
            for i in range(count)
        ]

    def _ensure_placement_groups(self) -> list[object]:
        if self._placement_groups:
            return self._placement_groups
        import ray
        from ray.util.placement_group import placement_group

        bundle = {"CPU": self.cpus_per_process}
        if self.use_gpu:
            bundle["GPU"] = 1
        groups = [
            placement_group(
                [dict(bundle) for _ in range(count)],
                strategy="STRICT_PACK",
                name=f"{self.name_prefix}_node{node}",
            )
            for node, count in enumerate(self.process_on_nodes)
        ]
        try:
            ray.get([pg.ready() for pg in groups], timeout=self.ready_timeout_s)
        except ray.exceptions.GetTimeoutError:
            for pg in groups:
                ray.util.remove_placement_group(pg)
            raise TimeoutError(
                f"Ray could not reserve {self.process_on_nodes} processes with {bundle} each "
                f"within {self.ready_timeout_s:.0f} s; the cluster has "
                f"{ray.available_resources()} available"
            ) from None
        logger.info("reserved placement groups for %s processes per node", self.process_on_nodes)
        self._placement_groups = groups
        return groups

    def remove(self) -> None:
        """Release the placement groups (after the worker groups using them are shut down)."""
        if not self._placement_groups:
            return
        import ray

        for pg in self._placement_groups:
            ray.util.remove_placement_group(pg)
        self._placement_groups = []
