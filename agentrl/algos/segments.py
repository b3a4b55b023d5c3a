"""Episodes of several rows: an agent session's segments (agent mode, docs/gateway.md).

An agent episode whose history was rewritten (a compaction, a dropped turn, a subagent)
is a tree of segments, and with ``rollout.agent_segments: all`` each segment is a row of
the batch. The rows of one episode share its ``episode_id``; its reward row, the one that
carries the reward on its last token, has ``episode_row`` 0, the others 1, 2, ...

Group statistics stay per episode: the estimator sees the reward rows alone (a GRPO group
is ``rollout.n`` episodes, whatever their segment counts), and each other row of an
episode gets the episode's advantage: the mean of its reward row's advantages over that
row's trained tokens, on every trained token of its own. For the outcome estimators (grpo,
rloo, opo, gpg, grpo_passk, remax) that is exactly the reward row's advantage; for the
token-level ones (gae, reinforce_plus_plus) it is the episode's mean advantage, a choice:
an earlier segment has no token-level credit of its own. Its ``returns`` are its advantages
plus its values when the batch has values (GAE's ``A = R - V``), else its advantages.

``episode_weights`` is ``actor.segment_weighting: episode``: each episode's trained tokens
weigh (mean trained tokens per episode) / (its trained tokens), so every episode counts the
same in a token-mean loss and equal episodes weigh 1 each.

    primary, episodes = episode_rows(episode_id, episode_row)     # (B,) bool, (B,) int
    adv, ret = broadcast_episode_advantages(adv_p, ret_p, mask, primary, episodes, values)
    advantages *= episode_weights(mask, episodes).unsqueeze(-1)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def episode_rows(episode_id: Sequence[object], episode_row: Sequence[object]
                 ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``(primary (B,) bool, episode (B,) int)``: which rows are their episode's reward row,
    and each row's episode as a dense index. Every episode must have exactly one."""
    ids: dict[object, int] = {}
    episodes = np.array([ids.setdefault(e, len(ids)) for e in episode_id], dtype=np.int64)
    primary = np.array([int(r) == 0 for r in episode_row], dtype=bool)
    counts = np.bincount(episodes[primary], minlength=len(ids))
    if (counts != 1).any():
        bad = [e for e, i in ids.items() if counts[i] != 1][:3]
        raise ValueError(f"each episode needs exactly one reward row (episode_row 0); "
                         f"episodes {bad} have {[int(counts[ids[e]]) for e in bad]}")
    return primary, episodes


def broadcast_episode_advantages(
    primary_advantages: torch.Tensor,
    primary_returns: torch.Tensor,
    response_mask: torch.Tensor,
    primary: np.ndarray,
    episodes: np.ndarray,
    values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch's ``(advantages, returns)`` (B, T) from those of its reward rows
    (P, T), in row order of ``primary``; every other row gets its episode's mean advantage
    on its trained tokens (module docstring), exactly 0 elsewhere."""
    mask = response_mask.to(primary_advantages.dtype)  # (B, T)
    rows = torch.as_tensor(np.flatnonzero(primary))
    advantages = torch.zeros_like(mask)
    returns = torch.zeros_like(mask)
    advantages[rows] = primary_advantages
    returns[rows] = primary_returns
    per_episode = torch.zeros(int(episodes.max()) + 1 if len(episodes) else 0,
                              dtype=mask.dtype)  # fmt: skip
    p_mask = mask[rows]
    means = (primary_advantages * p_mask).sum(-1) / p_mask.sum(-1).clamp(min=1)  # (P,)
    per_episode[torch.as_tensor(episodes[primary])] = means
    others = torch.as_tensor(np.flatnonzero(~primary))
    if len(others):
        scalar = per_episode[torch.as_tensor(episodes[~primary])].unsqueeze(-1)  # (O, 1)
        advantages[others] = scalar * mask[others]
        base = values[others] * mask[others] if values is not None else 0.0
        returns[others] = advantages[others] + base
    return advantages, returns


def episode_weights(response_mask: torch.Tensor, episodes: np.ndarray) -> torch.Tensor:
    """(B,) per-row weights of ``segment_weighting: episode``: (mean trained tokens per
    episode) / (the row's episode's trained tokens); 0 for an episode with none."""
    tokens = response_mask.sum(-1).double()  # (B,)
    index = torch.as_tensor(episodes)
    per_episode = torch.zeros(int(episodes.max()) + 1 if len(episodes) else 0,
                              dtype=torch.float64).index_add_(0, index, tokens)  # fmt: skip
    trained = per_episode > 0
    if not trained.any():
        return torch.zeros_like(tokens)
    mean = per_episode[trained].mean()
    weights = torch.where(trained, mean / per_episode.clamp(min=1), torch.zeros_like(per_episode))
    return weights[index]


__all__ = ["broadcast_episode_advantages", "episode_rows", "episode_weights"]
