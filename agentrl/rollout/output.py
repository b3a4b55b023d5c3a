"""Finished requests -> the rollout's output DataProto and its batch metrics.

Tensor keys (B = prompts x n, in `repeat(n, interleave=True)` order; P = prompt_length,
R = response_length), as verl's rollout returns them:

    prompts            (B, P)      left-padded prompt ids
    responses          (B, R)      right-padded response ids (model and tool tokens)
    input_ids          (B, P + R)  prompts ++ responses
    attention_mask     (B, P + R)  1 on real tokens
    position_ids       (B, P + R)  cumsum(attention_mask) - 1, clamped at 0
    loss_mask          (B, P + R)  1 on model tokens (0 on prompt, tool/user turns, padding)
    response_mask      (B, R)      loss_mask of the response: what the policy loss averages
    rollout_log_probs  (B, R)      the backend's log-prob of each model token (0 elsewhere)
    rollout_versions   (B, R)      the policy (weight) version that produced each model token,
                                   as the backend reported it (-1 elsewhere, or unreported)
    step_rewards       (B, R)      tool step rewards at the last token of the turn that
                                   made the call (for turn-level credit assignment)

Non-tensor keys: `messages`, `reward_scores` ({tool: calc_reward, "user_turn_rewards":
[...]}), `num_turns` (and verl's `__num_turns__`), `finish_reason`, `truncation`,
`request_state`, `rollout_metrics` (per request), plus every non-tensor key of the input
batch repeated n times (`data_source`, `reward_model`, `extra_info`, `uid`, ...).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agentrl.protocol import DataProto, to_object_array
from agentrl.rollout.request import AsyncRolloutRequest, RequestState


def _pad(
    rows: Sequence[Sequence[float]], length: int, value: float, left: bool, dtype: torch.dtype
) -> torch.Tensor:
    """(B, length): each row cut to ``length`` (keeping its end when ``left``) and padded
    with ``value`` on the left or the right; filled in numpy, one tensor at the end."""
    out = np.full((len(rows), length), value, dtype=np.int64 if dtype == torch.long else np.float32)
    for i, row in enumerate(rows):
        n = min(len(row), length)
        if n == 0:
            continue
        if left:
            out[i, length - n :] = row[len(row) - n :]
        else:
            out[i, :n] = row[:n]
    return torch.from_numpy(out).to(dtype)


def _length_mask(lengths: Sequence[int], length: int, left: bool) -> torch.Tensor:
    """(B, length) long: 1 on the first (or, with ``left``, the last) ``lengths[i]`` places."""
    counts = torch.tensor(list(lengths), dtype=torch.long).clamp(max=length)[:, None]  # (B, 1)
    positions = torch.arange(length)[None, :]  # (1, length)
    return (positions >= length - counts if left else positions < counts).long()


def build_output(
    requests: Sequence[AsyncRolloutRequest],
    batch: DataProto,
    *,
    prompt_length: int,
    response_length: int,
    pad_token_id: int,
    with_log_probs: bool,
) -> DataProto:
    """The output DataProto of finished requests, sorted by (batch_data_id, rollout_offset)."""
    requests = sorted(requests, key=lambda r: (r.batch_data_id, r.rollout_offset))
    P, R = prompt_length, response_length
    prompts = _pad(
        [r.input_ids[: r.prompt_length] for r in requests], P, pad_token_id, True, torch.long
    )  # (B, P)
    prompt_mask = _length_mask([r.prompt_length for r in requests], P, left=True)  # (B, P)
    responses = _pad([r.response_ids for r in requests], R, pad_token_id, False, torch.long)
    response_attention = _length_mask([r.response_length for r in requests], R, left=False)
    response_mask = _pad(
        [r.loss_mask[r.prompt_length :] for r in requests], R, 0, False, torch.long
    )  # (B, R)
    attention_mask = torch.cat([prompt_mask, response_attention], dim=1)  # (B, P + R)
    step_rewards = torch.zeros((len(requests), R), dtype=torch.float32)  # (B, R)
    for i, r in enumerate(requests):
        for position, reward in r.step_rewards:
            if position < R:
                step_rewards[i, position] += reward
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),  # (B, P + R)
        "attention_mask": attention_mask,
        "position_ids": torch.clamp(attention_mask.cumsum(-1) - 1, min=0),  # (B, P + R)
        "loss_mask": torch.cat([torch.zeros_like(prompts), response_mask], dim=1),
        "response_mask": response_mask,
        "step_rewards": step_rewards,
    }
    if with_log_probs:
        tensors["rollout_log_probs"] = _pad(
            [r.rollout_log_probs[r.prompt_length :] for r in requests], R, 0.0, False, torch.float32
        )
    tensors["rollout_versions"] = _pad(
        [r.weight_versions[r.prompt_length :] for r in requests], R, -1, False, torch.long
    )
    rows = np.array([r.batch_data_id for r in requests], dtype=np.int64)
    non_tensors: dict[str, Any] = {
        key: to_object_array(list(values[rows]), key)
        for key, values in batch.non_tensor_batch.items()
    }
    num_turns = [r.num_turns() for r in requests]
    non_tensors.update(
        messages=[r.messages for r in requests],
        reward_scores=[r.reward_scores for r in requests],
        num_turns=num_turns,
        __num_turns__=num_turns,
        finish_reason=[r.finish_reason.value if r.finish_reason else None for r in requests],
        truncation=[r.truncation for r in requests],
        request_state=[r.state.value for r in requests],
        rollout_metrics=[r.metrics.as_dict() for r in requests],
    )
    return DataProto.from_dict(
        tensors=tensors, non_tensors=non_tensors, meta_info=dict(batch.meta_info)
    )


def model_token_versions(versions: torch.Tensor, response_mask: torch.Tensor) -> list[int]:
    """The distinct policy versions (sorted) that wrote one row's model tokens, from its
    ``rollout_versions`` (R,) and ``response_mask`` (R,); [] when none was reported."""
    return sorted({v for v in versions[response_mask.bool()].tolist() if v >= 0})


def batch_metrics(requests: Sequence[AsyncRolloutRequest]) -> dict[str, float]:
    """Counts and means over a batch's requests (`meta_info["metrics"]`)."""
    n = max(len(requests), 1)
    metrics: dict[str, float] = {
        "rollout/requests": float(len(requests)),
        "rollout/failed": float(
            sum(r.state == RequestState.FAILED and not r.aborted for r in requests)
        ),
        "rollout/aborted": float(sum(r.aborted for r in requests)),
        "rollout/truncated": float(sum(r.truncation is not None for r in requests)),
        "rollout/backend_retries": float(sum(r.metrics.backend_retries for r in requests)),
        "rollout/backend_errors": float(sum(r.metrics.backend_errors for r in requests)),
        "rollout/parse_errors": float(sum(r.metrics.parse_errors for r in requests)),
        "rollout/interaction_errors": float(sum(r.metrics.interaction_errors for r in requests)),
        "rollout/tool_responses_truncated": float(
            sum(r.metrics.tool_responses_truncated for r in requests)
        ),
        "rollout/assistant_turns/mean": sum(r.metrics.assistant_turns for r in requests) / n,
        "rollout/assistant_turns/max": float(
            max((r.metrics.assistant_turns for r in requests), default=0)
        ),
        "rollout/user_turns/mean": sum(r.metrics.user_turns for r in requests) / n,
        "rollout/response_length/mean": sum(r.response_length for r in requests) / n,
        "rollout/response_length/max": float(max((r.response_length for r in requests), default=0)),
    }
    tool_calls: Counter = Counter()
    tool_errors: Counter = Counter()
    finish: Counter = Counter()
    tokenization: Counter = Counter()
    for r in requests:
        tool_calls.update(r.metrics.tool_calls)
        tool_errors.update(r.metrics.tool_errors)
        finish[r.finish_reason.value if r.finish_reason else "none"] += 1
        tokenization[r.metrics.tokenization] += 1
    metrics["rollout/tool_calls"] = float(sum(tool_calls.values()))
    # share of trajectories with at least one tool call (executed or not)
    metrics["rollout/tool_call_rate"] = sum(bool(r.metrics.tool_calls) for r in requests) / n
    metrics["rollout/tool_errors"] = float(sum(tool_errors.values()))
    metrics.update({f"rollout/tool_calls/{k}": float(v) for k, v in sorted(tool_calls.items())})
    metrics.update({f"rollout/tool_errors/{k}": float(v) for k, v in sorted(tool_errors.items())})
    metrics.update({f"rollout/finish_reason/{k}": float(v) for k, v in sorted(finish.items())})
    metrics.update({f"rollout/tokenization/{k}": float(v) for k, v in sorted(tokenization.items())})
    return metrics


def batch_timing(requests: Sequence[AsyncRolloutRequest], wall_s: float) -> dict[str, float]:
    """Wall time of the batch and the summed per-request latencies (`meta_info["timing"]`)."""
    return {
        "rollout/wall_s": wall_s,
        "rollout/generation_s": sum(r.metrics.generation_s for r in requests),
        "rollout/tool_s": sum(r.metrics.tool_s for r in requests),
        "rollout/interaction_s": sum(r.metrics.interaction_s for r in requests),
    }
