"""The calling process's place in torch.distributed's default group, with one process as
the answer when no group is initialized (a run on one CPU, a test).

    rank(), world_size()        0 and 1 without a group
    barrier()                   a no-op for one process
    all_gather_object(value)    every rank's value, in rank order ([value] for one process)

Every worker that asks these questions asks them here.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def all_gather_object(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order (``[value]`` for one process)."""
    if world_size() == 1:
        return [value]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, value)
    return out


__all__ = ["all_gather_object", "barrier", "rank", "world_size"]
