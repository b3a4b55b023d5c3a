"""Small workers that exercise a worker group: dispatch modes, collectives, failures.

Used by the tests of ``agentrl.distributed`` and handy to check a new cluster before a
long run (they live in the package so that Ray workers can import them):

    group = RayWorkerGroup(ResourcePool([2]), WorkerSpec(EchoWorker))
    assert group.all_reduce_sum(1.0) == 2.0
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

from agentrl.distributed.dispatch import Dispatch, register
from agentrl.distributed.worker import Worker
from agentrl.protocol import DataProto

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class EchoWorker(Worker):
    """Answers with its rank and environment, transforms batches, and fails on request."""

    def __init__(self, scale: float = 2.0) -> None:
        self.scale = scale

    @register(Dispatch.ONE_TO_ALL)
    def info(self) -> dict:
        """This rank's view of the group, its torch.distributed environment and pid."""
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "pid": os.getpid(),
            "backend": dist.get_backend(),
            "env": {k: os.environ.get(k) for k in ENV_KEYS},
        }

    @register(Dispatch.DP_COMPUTE)
    def scale_batch(self, data: DataProto) -> DataProto:
        """``y = scale * x`` and the rank that computed each row."""
        x = data.batch["x"]
        rank = torch.full((len(data),), self.rank, dtype=torch.long)
        return DataProto.from_dict(
            tensors={"y": x * self.scale, "rank": rank},
            non_tensors={"tag": data.non_tensor_batch["tag"]},
            meta_info={"rank": self.rank},
        )

    @register(Dispatch.DP_COMPUTE, pad=True)
    def scale_batch_padded(self, data: DataProto) -> DataProto:
        """``scale_batch`` for batches that need not divide by the world size."""
        return self.scale_batch(data)

    @register(Dispatch.RANK_ZERO)
    def all_reduce_sum(self, value: float) -> float:
        """Sum ``value`` over the ranks with a collective; every rank contributes it."""
        tensor = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(tensor)
        return float(tensor.item())

    @register(Dispatch.ALL_TO_ALL)
    def add_rank(self, value: int) -> int:
        """Each rank gets its own ``value`` and returns ``value + rank``."""
        return value + self.rank

    @register(Dispatch.ONE_TO_ALL)
    def fail_on(self, rank: int, then_collective: bool = True) -> int:
        """Raise ValueError on ``rank``; the other ranks enter an all-reduce that the failed
        rank never joins when ``then_collective`` (they wait there until stopped)."""
        if self.rank == rank:
            raise ValueError(f"boom on rank {rank}")
        if then_collective:
            dist.all_reduce(torch.ones(1))
        return self.rank

    @register(Dispatch.ONE_TO_ALL)
    def crash(self, rank: int) -> int:
        """The process of ``rank`` exits at once (a segfault or OOM kill, as Ray sees it)."""
        if self.rank == rank:
            os._exit(1)
        return self.rank


class CounterWorker(Worker):
    """A second role to colocate with EchoWorker: keeps a count, reports its process."""

    def __init__(self, start: int = 0) -> None:
        self.count = start

    @register(Dispatch.ONE_TO_ALL)
    def increment(self, by: int = 1) -> int:
        self.count += by
        return self.count

    @register(Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()


@contextmanager
def ray_session(num_cpus: int = 2) -> Iterator[None]:
    """A local Ray instance in a temporary directory, shut down and removed on exit."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths
    ray.init(num_cpus=num_cpus, _temp_dir=temp_dir, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
