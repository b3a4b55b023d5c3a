"""How a training batch splits across workers: one definition of each divisibility rule.

    per_worker = mini_batch_per_worker(mini, n, workers, "critic.ppo_mini_batch_size")
    micro = micro_batch_per_worker(per_gpu, global_size, workers, "critic.ppo_micro_batch_size")

The config validator (agentrl/config/validate.py) collects these functions' errors when a
config is loaded; the workers (agentrl/workers/actor.py, critic.py) call the same functions
for the sizes they train with. Each raises `BatchSplitError` (a ValueError) naming the keys
and the numbers.
"""

from __future__ import annotations

WORKERS_KEY = "trainer.nnodes x trainer.n_gpus_per_node"


class BatchSplitError(ValueError):
    """A batch size that does not split evenly (the message names the keys)."""


def trajectories_per_worker(batch: int, rollout_n: int, workers: int, key: str) -> int:
    """BATCH prompts x ROLLOUT_N samples each, split evenly across WORKERS (KEY names BATCH)."""
    trajectories = int(batch) * int(rollout_n)
    if trajectories % workers:
        raise BatchSplitError(
            f"{key} x actor_rollout_ref.rollout.n = {batch} x {rollout_n} trajectories cannot "
            f"be split evenly across {WORKERS_KEY} = {workers} workers"
        )
    return trajectories // workers


def mini_batch_per_worker(mini_batch_size: int, rollout_n: int, workers: int, key: str) -> int:
    """The trajectories of one mini-batch on each worker (KEY: the `ppo_mini_batch_size` key)."""
    return trajectories_per_worker(mini_batch_size, rollout_n, workers, key)


def micro_batch_per_worker(per_gpu: int | None, global_size: int | None, workers: int,
                           key: str) -> int | None:  # fmt: skip
    """A micro-batch size per worker from the per-GPU key (`KEY_per_gpu`), or the deprecated
    global one (KEY) divided by the workers; None when neither is set."""
    if per_gpu is not None and global_size is not None:
        raise BatchSplitError(f"set only one of {key} (deprecated) and {key}_per_gpu")
    if per_gpu is not None:
        return int(per_gpu)
    if global_size is None:
        return None
    if global_size % workers:
        raise BatchSplitError(f"{key} ({global_size}) must be divisible by the {workers} workers")
    return global_size // workers


__all__ = [
    "BatchSplitError",
    "micro_batch_per_worker",
    "mini_batch_per_worker",
    "trajectories_per_worker",
]
