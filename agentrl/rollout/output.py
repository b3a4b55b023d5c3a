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
`request_state`, `infra_error` (None, or the first infrastructure failure as `{"kind",
"error"}`), `rollout_metrics` (per request), plus every non-tensor key of the input
batch repeated n times (`data_source`, `reward_model`, `extra_info`, `uid`, ...).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agentrl.protocol import INFRA_ERROR_KEY, DataProto, to_object_array
from agentrl.rollout.request import AsyncRolloutRequest, RequestState


class PaddedRows:
    """The output's padded tensors, written one finished request (row) at a time.

    A large batch's padding is big (at 2,048 requests x 5,120 positions, ~0.75 GB), and
    writing it is mostly first touches of fresh memory: ~0.7 s on the event loop at the
    end of the rollout. Here a thread fills every array with its padding value when the
    batch starts (numpy releases the interpreter lock while it fills, so it runs on another
    core while the requests generate), and ``add`` writes only a finished request's own
    tokens. The engine adds each request as it finishes; ``build_output`` adds them all at
    once. Rows are in (batch_data_id, rollout_offset) order.
    """

    def __init__(
        self,
        keys: Sequence[tuple[int, int]],
        prompt_length: int,
        response_length: int,
        pad_token_id: int,
        with_log_probs: bool,
    ) -> None:
        self.row = {key: i for i, key in enumerate(sorted(keys))}
        if len(self.row) != len(keys):
            raise ValueError("two requests share a (batch_data_id, rollout_offset)")
        self.P, self.R = prompt_length, response_length
        B, P, R = len(keys), prompt_length, response_length
        shapes = {  # name: (shape, dtype, padding)
            "prompts": ((B, P), np.int64, pad_token_id),
            "responses": ((B, R), np.int64, pad_token_id),
            "input_ids": ((B, P + R), np.int64, pad_token_id),
            "attention_mask": ((B, P + R), np.int64, 0),
            "position_ids": ((B, P + R), np.int64, 0),
            "loss_mask": ((B, P + R), np.int64, 0),
            "response_mask": ((B, R), np.int64, 0),
            "step_rewards": ((B, R), np.float32, 0.0),
            "rollout_log_probs": ((B, R), np.float32, 0.0),
            "rollout_versions": ((B, R), np.int64, -1),
        }
        if not with_log_probs:
            del shapes["rollout_log_probs"]
        self.arrays = {key: np.empty(shape, dtype) for key, (shape, dtype, _) in shapes.items()}
        self.filled = np.zeros(B, dtype=bool)
        self._waiting: list[tuple[int, AsyncRolloutRequest]] = []  # added during the fill
        self._padding = threading.Thread(
            target=_fill, args=([(self.arrays[k], v) for k, (_, _, v) in shapes.items()],),
            name="agentrl-output-padding", daemon=True,
        )  # fmt: skip
        self._padding.start()

    def add(self, r: AsyncRolloutRequest) -> None:
        """Write the row of a finished (finalized) request (or, while the padding is being
        filled, queue it: the event loop must not wait for the fill)."""
        i = self.row[(r.batch_data_id, r.rollout_offset)]
        if self.filled[i]:
            raise ValueError(f"row {(r.batch_data_id, r.rollout_offset)} was added twice")
        self.filled[i] = True
        if self._padding.is_alive():
            self._waiting.append((i, r))
            return
        for waiting in self._waiting:
            self._write(*waiting)
        self._waiting.clear()
        self._write(i, r)

    def _write(self, i: int, r: AsyncRolloutRequest) -> None:
        P, R, a = self.P, self.R, self.arrays
        start = r.prompt_length
        kept = min(start, P)  # a prompt longer than P keeps its end
        n = min(len(r.input_ids) - start, R)  # response tokens kept
        valid = kept + n  # the row's real tokens: positions [P - kept, P + n)
        prompt = np.asarray(r.input_ids[start - kept : start], dtype=np.int64)
        response = np.asarray(r.input_ids[start : start + n], dtype=np.int64)
        mask = np.asarray(r.loss_mask[start : start + n], dtype=np.int64)
        a["prompts"][i, P - kept :] = prompt
        a["responses"][i, :n] = response
        a["input_ids"][i, P - kept : P] = prompt
        a["input_ids"][i, P : P + n] = response
        a["attention_mask"][i, P - kept : P + n] = 1
        a["position_ids"][i, P - kept : P + n] = np.arange(valid)
        a["position_ids"][i, P + n :] = max(valid - 1, 0)  # cumsum(mask) - 1, clamped at 0
        a["response_mask"][i, :n] = mask
        a["loss_mask"][i, P : P + n] = mask
        for key, values in (("rollout_log_probs", r.rollout_log_probs),
                            ("rollout_versions", r.weight_versions)):
            if key in a:
                part = values[start : start + n]
                a[key][i, : len(part)] = part
        for position, reward in r.step_rewards:
            if position < R:
                a["step_rewards"][i, position] += reward

    def tensors(self) -> dict[str, torch.Tensor]:
        self._padding.join()
        for waiting in self._waiting:
            self._write(*waiting)
        self._waiting.clear()
        if not self.filled.all():
            raise RuntimeError(f"{int((~self.filled).sum())} rows of the output were never added")
        return {key: torch.from_numpy(array) for key, array in self.arrays.items()}


def _fill(arrays: list[tuple[np.ndarray, float]]) -> None:
    for array, value in arrays:
        array[...] = value


def build_output(
    requests: Sequence[AsyncRolloutRequest],
    batch: DataProto,
    *,
    prompt_length: int,
    response_length: int,
    pad_token_id: int,
    with_log_probs: bool,
    rows: PaddedRows | None = None,
) -> DataProto:
    """The output DataProto of finished requests, sorted by (batch_data_id, rollout_offset).
    ``rows``: their padded tensors, already added one by one (else they are added here)."""
    requests = sorted(requests, key=lambda r: (r.batch_data_id, r.rollout_offset))
    if rows is None:
        rows = PaddedRows([(r.batch_data_id, r.rollout_offset) for r in requests],
                          prompt_length, response_length, pad_token_id, with_log_probs)
        for r in requests:
            rows.add(r)
    tensors = rows.tensors()
    order = np.array([r.batch_data_id for r in requests], dtype=np.int64)
    non_tensors: dict[str, Any] = {
        key: to_object_array(list(values[order]), key)
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
        **{INFRA_ERROR_KEY: [r.infra_error for r in requests]},
        rollout_metrics=[r.metrics.as_dict() for r in requests],
    )
    return DataProto.from_dict(
        tensors=tensors, non_tensors=non_tensors, meta_info=dict(batch.meta_info)
    )


def model_token_versions(versions: torch.Tensor, response_mask: torch.Tensor) -> list[int]:
    """The distinct policy versions (sorted) that wrote one row's model tokens, from its
    ``rollout_versions`` (R,) and ``response_mask`` (R,); [] when none was reported."""
    return sorted({v for v in versions[response_mask.bool()].tolist() if v >= 0})


def request_metrics(requests: Sequence[AsyncRolloutRequest]) -> dict[str, float]:
    """The `rollout/*` counts and means over a batch's finished requests (the rollout's
    `meta_info["metrics"]`; the trainer's whole step is `trainer.metrics.train_step_metrics`)."""
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
    metrics |= infra_error_metrics([r.infra_error for r in requests])
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


def infra_error_metrics(errors: Sequence[Mapping[str, str] | None]) -> dict[str, float]:
    """`rollout/infra_failed` (trajectories with an infrastructure failure, 0 when none) and
    `rollout/infra_failed/<kind>` per kind, from each row's `infra_error` (or None)."""
    kinds = Counter(str(e["kind"]) for e in errors if e)
    return {"rollout/infra_failed": float(sum(kinds.values()))} | {
        f"rollout/infra_failed/{k}": float(v) for k, v in sorted(kinds.items())}


def batch_timing(requests: Sequence[AsyncRolloutRequest], wall_s: float) -> dict[str, float]:
    """Wall time of the batch and the summed per-request latencies (`meta_info["timing"]`)."""
    return {
        "rollout/wall_s": wall_s,
        "rollout/generation_s": sum(r.metrics.generation_s for r in requests),
        "rollout/tool_s": sum(r.metrics.tool_s for r in requests),
        "rollout/interaction_s": sum(r.metrics.interaction_s for r in requests),
    }
