"""`trainer.balance_batch`: reorder a batch so every data-parallel rank gets about the same
number of tokens (verl's `_balance_batch`).

The worker group hands rank r the r-th of `world_size` equal, contiguous parts of the batch
(agentrl/distributed/dispatch.py). Trajectory lengths vary a lot in multi-turn RL, so
without reordering one rank can hold most of the long trajectories and the others wait for
it at every collective. `balanced_order` assigns rows, longest first, to the part with the
fewest tokens that still has room (equal part sizes), then lays the parts out contiguously.
Rows keep their `uid`, so advantage groups are unchanged; what changes is which rank, and
so which micro-batch, a row lands in. The metrics are verl's `global_seqlen/*`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentrl.protocol import DataProto


def balanced_order(seqlens: Sequence[int], world_size: int) -> list[int]:
    """A permutation of the rows whose `world_size` equal contiguous parts have nearly equal
    sums of `seqlens` (greedy, longest first; rows keep their relative order in a part)."""
    n = len(seqlens)
    if world_size < 1 or n % world_size:
        raise ValueError(f"cannot split {n} rows into {world_size} equal parts")
    size = n // world_size
    sums = [0] * world_size
    parts: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(n), key=lambda i: (-int(seqlens[i]), i)):
        part = min((p for p in range(world_size) if len(parts[p]) < size),
                   key=lambda p: (sums[p], p))
        parts[part].append(i)
        sums[part] += int(seqlens[i])
    return [i for part in parts for i in sorted(part)]


def part_sums(seqlens: Sequence[int], world_size: int) -> list[int]:
    """Token sums of the `world_size` equal contiguous parts, as the ranks receive them."""
    return [int(part.sum()) for part in np.split(np.asarray(seqlens), world_size)]


def balance_batch(data: DataProto, world_size: int) -> tuple[DataProto, dict[str, float]]:
    """The batch reordered for `world_size` ranks and verl's `global_seqlen/*` metrics
    (before: min, max, minmax_diff, mean; after: balanced_min, balanced_max)."""
    seqlens = data.batch["attention_mask"].sum(-1).tolist()
    before = part_sums(seqlens, world_size)
    order = balanced_order(seqlens, world_size)
    after = part_sums([seqlens[i] for i in order], world_size)
    metrics = {
        "global_seqlen/min": float(min(before)),
        "global_seqlen/max": float(max(before)),
        "global_seqlen/minmax_diff": float(max(before) - min(before)),
        "global_seqlen/balanced_min": float(min(after)),
        "global_seqlen/balanced_max": float(max(after)),
        "global_seqlen/mean": float(np.mean(before)),
    }
    if world_size == 1:
        return data, metrics
    return data[np.asarray(order)], metrics


__all__ = ["balance_batch", "balanced_order", "part_sums"]
