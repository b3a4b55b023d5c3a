"""A batch of agent episodes of several rows (one per trained segment, docs/gateway.md)
made ready for the workers, and its ``actor.segment_weighting``.

With ``rollout.agent_segments: all`` a batch holds ``train_batch_size x n`` episodes but
more rows (an episode's earlier segments, side calls with ``agent_side_calls: train``), so
its row count need not be a multiple of the global mini-batch (``ppo_mini_batch_size x n``
rows, split over the ranks). ``fill_rows`` adds filler rows, copies of the first row that
train nothing (zero response and loss masks, zero scores, a group and an episode of their
own), up to the next multiple: the extra segments then cost extra optimizer steps, not a
refused batch. ``drop_fillers`` takes them out after the update, before the step's metrics
and dumps. A batch without ``episode_row`` (every mode but agent mode) is left alone.

``weight_episodes`` is ``segment_weighting: episode``: every row's advantages are scaled by
its episode's weight (agentrl/algos/segments.py ``episode_weights``), which scales that
row's policy-gradient term in the loss by the same factor for every built-in policy loss
(each is linear in the advantage for a fixed sign); the KL and entropy terms stay
token-weighted.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from agentrl.algos.segments import episode_rows, episode_weights
from agentrl.protocol import DataProto, to_object_array

FILLER_KEY = "segment_filler"  # non-tensor column: True on filler rows
_ZEROED = ("response_mask", "loss_mask", "token_level_scores", "rm_scores", "step_rewards")


def row_multiple(actor_mini_batch: int, n: int, critic_mini_batch: int | None = None) -> int:
    """The global mini-batch in rows (``ppo_mini_batch_size x n``), the least common
    multiple of the actor's and the critic's when there is a critic."""
    rows = int(actor_mini_batch) * int(n)
    if critic_mini_batch is not None:
        rows = math.lcm(rows, int(critic_mini_batch) * int(n))
    return rows


def fill_rows(data: DataProto, multiple: int) -> DataProto:
    """``data`` with filler rows up to a multiple of ``multiple`` rows (module docstring)."""
    if "episode_row" not in data.non_tensor_batch:
        return data
    missing = -len(data) % multiple
    flags = to_object_array([False] * len(data) + [True] * missing, FILLER_KEY)
    if missing == 0:
        data.non_tensor_batch[FILLER_KEY] = flags
        return data
    filler = data[np.zeros(missing, dtype=np.int64)]
    for key in _ZEROED:
        if key in filler.batch.keys():
            filler.batch[key] = torch.zeros_like(filler.batch[key])
    tags = [f"filler-{i}" for i in range(missing)]
    filler.non_tensor_batch["uid"] = to_object_array(tags, "uid")
    filler.non_tensor_batch["episode_id"] = to_object_array(tags, "episode_id")
    filler.non_tensor_batch["episode_row"] = to_object_array([0] * missing, "episode_row")
    out = DataProto.concat([data, filler])
    out.non_tensor_batch[FILLER_KEY] = flags
    return out


def drop_fillers(data: DataProto) -> DataProto:
    """``data`` without the rows ``fill_rows`` added."""
    flags = data.non_tensor_batch.pop(FILLER_KEY, None)
    if flags is None or not np.asarray(flags, dtype=bool).any():
        return data
    return data[~np.asarray(flags, dtype=bool)]


def weight_episodes(data: DataProto) -> None:
    """Scale ``advantages`` in place so each episode counts the same (module docstring);
    without ``episode_id`` every row is an episode."""
    ids = data.non_tensor_batch.get("episode_id")
    if ids is None:
        episodes = np.arange(len(data))
    else:
        _, episodes = episode_rows(ids, data.non_tensor_batch["episode_row"])
    weights = episode_weights(data.batch["response_mask"], episodes)  # (B,)
    advantages = data.batch["advantages"]
    data.batch["advantages"] = advantages * weights.to(advantages.dtype).unsqueeze(-1)


__all__ = ["FILLER_KEY", "drop_fillers", "fill_rows", "row_multiple", "weight_episodes"]
