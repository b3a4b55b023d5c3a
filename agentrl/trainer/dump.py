"""The trainer's trajectory dumps: one jsonl row per trajectory of a step's batch
(``trainer.rollout_data_dir``, ``trainer.validation_data_dir``), what ``agentrl report`` reads.

    dump_trajectories(Path("rollouts"), data, step=3, tokenizer=tokenizer)   # rollouts/3.jsonl

A row: ``step``, ``uid``, ``input`` and ``output`` (decoded), ``score`` (the total reward),
``request_state``, the reward manager's extra keys, and the trajectory: ``prompt_ids`` and
``response_ids`` (no padding), ``loss_mask`` (aligned with response_ids: 1 on model tokens,
0 on tool and user turns), ``response_tokens`` (each response id decoded on its own, so the
report needs no tokenizer), ``messages``, ``num_turns``, ``tool_calls`` ({tool: calls}),
``finish_reason``, ``policy_versions`` (the policy versions that wrote its model tokens;
[] when the rollout reported none) and ``logprob_gap_max``: the largest |rollout log-prob -
trainer log-prob| over its trained tokens (absent when the batch lacks either; the report's
viewer orders trajectories by it). Per response token, aligned with ``response_ids``:
``rollout_log_probs`` (the backend's log-prob of each model token, 0.0 elsewhere; absent when
the rollout returned none) and ``rollout_versions`` (the policy version that wrote each
token, -1 where none did). Agent mode adds each row's episode and place in its session tree:
``episode_id``, ``episode_row`` (0 on the row that carries the reward) and ``segment``
(agentrl/gateway/agent_rollout.py ``segment_tree``), what `agentrl trajectories export`
needs to rebuild the trees (docs/trajectories.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.protocol import DataProto
from agentrl.rollout.output import model_token_versions
from agentrl.trainer.metrics import rollout_logprob_gaps

# agent mode's non-tensor columns a row keeps: its episode and place in the session tree
SESSION_KEYS = ("episode_id", "episode_row", "segment")


def dump_trajectories(directory: Path, data: DataProto, step: int, tokenizer: Any) -> None:
    """Append ``data``'s rows to ``directory/{step}.jsonl`` (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    scores = data.batch["token_level_scores"].sum(-1).tolist()  # (B,)
    gaps = logprob_gap_max(data)
    columns = data.non_tensor_batch
    absent = [None] * len(data)
    with (directory / f"{step}.jsonl").open("a", encoding="utf-8") as f:
        for i in range(len(data)):
            prompt, response, loss_mask = trajectory_ids(data, i)
            metrics = columns.get("rollout_metrics", absent)[i] or {}
            row = {
                **(columns.get("reward_extra_info", absent)[i] or {}),  # the score's keys
                "step": step,
                "uid": columns["uid"][i],
                "input": tokenizer.decode(prompt, skip_special_tokens=True),
                "output": tokenizer.decode(response, skip_special_tokens=True),
                "score": scores[i],
                "request_state": columns.get("request_state", absent)[i],
                "prompt_ids": prompt,
                "response_ids": response,
                "loss_mask": loss_mask,
                "response_tokens": tokenizer.batch_decode(
                    [[t] for t in response], clean_up_tokenization_spaces=False
                ),
                "messages": columns.get("messages", absent)[i],
                "num_turns": columns.get("num_turns", absent)[i],
                "tool_calls": metrics.get("tool_calls"),
                "finish_reason": columns.get("finish_reason", absent)[i],
                "policy_versions": policy_versions(data, i),
                **token_columns(data, i, len(response)),
                **{key: columns[key][i] for key in SESSION_KEYS if key in columns},
            }
            if gaps is not None:
                row["logprob_gap_max"] = gaps[i]
            f.write(json.dumps(row, default=_json_default) + "\n")


def logprob_gap_max(data: DataProto) -> list[float] | None:
    """Per row, the largest |rollout log-prob - trainer log-prob| over its trained tokens
    (0.0 for a row with none); None when the batch lacks either log-prob."""
    gaps = rollout_logprob_gaps(data)
    return None if gaps is None else [round(v, 6) for v in gaps.max(dim=-1).values.tolist()]


def token_columns(data: DataProto, i: int, n_response: int) -> dict[str, list]:
    """Row ``i``'s per-token ``rollout_log_probs`` and ``rollout_versions``, aligned with its
    ``n_response`` response ids (each only when the batch has it)."""
    return {key: data.batch[key][i][:n_response].tolist()
            for key in ("rollout_log_probs", "rollout_versions") if key in data.batch.keys()}


def policy_versions(data: DataProto, i: int) -> list[int]:
    """The distinct policy versions of row ``i``'s model tokens (sorted; [] unknown)."""
    if "rollout_versions" not in data.batch.keys():
        return []
    return model_token_versions(data.batch["rollout_versions"][i], data.batch["response_mask"][i])


def trajectory_ids(data: DataProto, i: int) -> tuple[list[int], list[int], list[int]]:
    """Row ``i``'s prompt ids, response ids and response loss mask, padding removed."""
    response_length = data.batch["responses"].shape[-1]
    attention = data.batch["attention_mask"][i].bool()  # (P + R,)
    n_response = int(attention[-response_length:].sum())
    prompt = data.batch["prompts"][i][attention[:-response_length]]
    response = data.batch["responses"][i][:n_response]  # right-padded
    loss_mask = data.batch["response_mask"][i][:n_response]
    return prompt.tolist(), response.tolist(), [int(m) for m in loss_mask.tolist()]


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray | torch.Tensor):
        return value.tolist()
    return str(value)


__all__ = ["SESSION_KEYS", "dump_trajectories", "policy_versions", "token_columns",
           "trajectory_ids"]
