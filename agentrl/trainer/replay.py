"""Rollout replay (verl's RolloutSkip): with `actor_rollout_ref.rollout.skip_rollout` a step
replays the batch an earlier run dumped for it to `rollout.skip_dump_dir` (dumping it the
first time), so training can be debugged without inference.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agentrl.protocol import DataProto

logger = logging.getLogger(__name__)


def dump_path(skip_dump_dir: str, step: int, round_: int) -> Path:
    """Where step `step`'s rollout (round `round_` of dynamic sampling) is dumped."""
    name = f"step_{step}.pt" if round_ == 0 else f"step_{step}_{round_}.pt"
    return Path(str(skip_dump_dir)) / name


def generate_or_replay(
    actor_rollout: Any, rollout_cfg: Any, batch: DataProto, step: int, round_: int
) -> DataProto:
    """Roll `batch` out with the actor's rollout, or replay (and first dump) it per
    `rollout.skip_rollout`. A dump of other prompts than `batch`'s is an error that says
    where it came from, not a silent replay."""
    if not rollout_cfg.skip_rollout:
        return actor_rollout.generate_sequences(batch)
    path = dump_path(rollout_cfg.skip_dump_dir, step, round_)
    if path.is_file():
        data = DataProto.load_from_disk(path)
        expected = len(batch) * int(rollout_cfg.n)
        same_rows = "index" not in batch.non_tensor_batch or sorted(
            set(map(str, data.non_tensor_batch.get("index", [])))
        ) == sorted(set(map(str, batch.non_tensor_batch["index"])))
        if len(data) != expected or not same_rows:
            raise RuntimeError(
                f"{path} holds {len(data)} trajectories of other prompts than step {step}'s "
                f"{len(batch)} x n={rollout_cfg.n}: it was dumped by a run with another data "
                "order or batch size; point rollout.skip_dump_dir elsewhere"
            )
        logger.info("step %d: replaying the rollout dumped in %s (rollout.skip_rollout)",
                    step, path)  # fmt: skip
        return data
    data = actor_rollout.generate_sequences(batch)
    path.parent.mkdir(parents=True, exist_ok=True)
    data.save_to_disk(path)
    return data
