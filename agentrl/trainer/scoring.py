"""Scoring a step's trajectories: the prompt batch's uids, failed rollouts as groups of their
own, the reward (a reward model's score, then the reward function), infrastructure failures
per `rollout.on_infra_error` and ReMax's greedy baseline. The trainer's stages `gen`,
`gen_max` and `reward` call these.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from agentrl.algos import thin_group_rows
from agentrl.protocol import INFRA_ERROR_KEY, SCORE_FAILED_KEY, DataProto, to_object_array
from agentrl.reward import SCORER_KIND
from agentrl.trainer.dynamic_sampling import prompt_uid
from agentrl.trainer.metrics import FAILED, failed_rows

logger = logging.getLogger(__name__)


class InfraFailureError(RuntimeError):
    """Trajectories hit infrastructure failures and `rollout.on_infra_error` is `raise`."""


def prompt_batch(batch_dict: dict[str, Any], step: int, round_: int,
                 temperature: float) -> DataProto:  # fmt: skip
    """A loader batch as the rollout's input: uids `"{step}-{row}"` (`"{step}.{round}-{row}"`
    for dynamic sampling's further rounds; deterministic, so a resumed run sees the same
    batch), the sampling temperature and the step in `meta_info`."""
    batch = DataProto.from_single_dict(batch_dict)
    prefix = f"{step}" if round_ == 0 else f"{step}.{round_}"
    batch.non_tensor_batch["uid"] = to_object_array(
        [f"{prefix}-{i}" for i in range(len(batch))], "uid"
    )
    batch.meta_info.update(temperature=float(temperature), global_steps=step)
    return batch


def isolate_failed(data: DataProto) -> int:
    """Give every FAILED trajectory a uid of its own; returns how many there are.

    A failed rollout keeps a zero loss mask, so it never trains; but its reward (usually 0)
    would still enter its group's mean and std and shift the advantages of the samples that
    did finish. As a group of one it drops out of those statistics (and its advantage is 0).
    """
    failed = failed_rows(data)
    if failed.any():
        uids = list(data.non_tensor_batch["uid"])
        for i in np.flatnonzero(failed):
            uids[i] = f"{uids[i]}/failed-{i}"
        data.non_tensor_batch["uid"] = to_object_array(uids, "uid")
    return int(failed.sum())


def score(data: DataProto, reward_fn: Any, reward_model: Any = None) -> DataProto:
    """Add the reward model's score (when there is one), then score `data` with `reward_fn`:
    `token_level_scores`, and the score function's extra keys per row in
    `non_tensor_batch["reward_extra_info"]`. Rows the score function could not score
    (`SCORE_FAILED_KEY` in their extra keys: an LLM judge that failed) become failed rows
    (`fail_unscored`)."""
    if reward_model is not None:
        data = data.union(reward_model.compute_rm_score(data))
    scored = reward_fn(data, return_dict=True)
    data.batch["token_level_scores"] = scored["reward_tensor"]
    extra = scored["reward_extra_info"]
    rows = [{k: v[i] for k, v in extra.items()} for i in range(len(data))]
    data.non_tensor_batch["reward_extra_info"] = to_object_array(rows, "reward_extra_info")
    fail_unscored(data, [i for i, row in enumerate(rows) if row.get(SCORE_FAILED_KEY)])
    return data


def fail_unscored(data: DataProto, rows: list[int]) -> None:
    """Treat `rows` (scored by no one) as failed rollouts: state `failed`, no score, a zero
    response mask (they train nothing) and a group of their own (`isolate_failed`), so an
    unscored sample never enters its group's statistics as a 0."""
    if not rows:
        return
    states = data.non_tensor_batch.get("request_state")
    states = list(states) if states is not None else ["completed"] * len(data)
    for i in rows:
        states[i] = FAILED
    data.non_tensor_batch["request_state"] = to_object_array(states, "request_state")
    index = torch.as_tensor(rows)
    data.batch["token_level_scores"][index] = 0.0
    data.batch["response_mask"][index] = 0
    isolate_failed(data)


def infra_errors(data: DataProto) -> list[dict[str, str] | None]:
    """Each row's infrastructure failure, `{"kind", "error"}` or None: the rollout's (a tool,
    an interaction, the engine), else the score function's (`infra_error` in its extra info:
    kind `judge` from the LLM judge, `scorer` from a score function). Sets the batch's
    `infra_error` column to it."""
    column = data.non_tensor_batch.get(INFRA_ERROR_KEY)
    errors = list(column) if column is not None else [None] * len(data)
    extra = data.non_tensor_batch.get("reward_extra_info")
    for i, row in enumerate(extra if extra is not None else []):
        found = (row or {}).get(INFRA_ERROR_KEY)
        if errors[i] is None and found:
            errors[i] = (dict(found) if isinstance(found, dict)
                         else {"kind": SCORER_KIND, "error": str(found)})  # fmt: skip
    data.non_tensor_batch[INFRA_ERROR_KEY] = to_object_array(errors, INFRA_ERROR_KEY)
    return errors


def settle_infra_failures(data: DataProto, on_infra_error: str, step: int) -> int:
    """Apply `rollout.on_infra_error` to a scored batch; returns how many rows had an
    infrastructure failure (`infra_errors`).

    `mask`: each becomes a failed row (state `failed`, score 0, zero response mask, a group
    of its own: `fail_unscored`), so its group's statistics are those of its valid members;
    a group left with fewer than two valid members (`thin_group_rows`) trains nothing (zero
    response mask). `zero`: nothing changes (a tool's error reached the model, a score
    function's failure scored 0, the judge's left its row unscored as before). `raise`:
    `InfraFailureError` naming each kind and the first error.
    """
    errors = infra_errors(data)
    rows = [i for i, e in enumerate(errors) if e is not None]
    if not rows or on_infra_error == "zero":
        return len(rows)
    if on_infra_error == "raise":
        kinds = sorted({errors[i]["kind"] for i in rows})
        first = errors[rows[0]]
        raise InfraFailureError(
            f"step {step}: {len(rows)} trajectories hit infrastructure failures (kinds: "
            f"{', '.join(kinds)}); first, {first['kind']}: {first['error']} "
            "(actor_rollout_ref.rollout.on_infra_error=raise; mask keeps them out of training)")
    failed = failed_rows(data)
    fail_unscored(data, [i for i in rows if not failed[i]])
    prompts = [prompt_uid(u) for u in data.non_tensor_batch["uid"]]
    infra_prompts = {prompts[i] for i in rows}
    thin = thin_group_rows(prompts, ~failed_rows(data)) & np.array(
        [p in infra_prompts for p in prompts], dtype=bool)
    if thin.any():
        data.batch["response_mask"][torch.from_numpy(thin)] = 0
        logger.info("step %d: %d trajectories of groups left with fewer than 2 valid samples "
                    "by infrastructure failures train nothing", step, int(thin.sum()))
    return len(rows)


def greedy_baseline(actor_rollout: Any, reward_fn: Any, batch: DataProto,
                    n_rows: int) -> torch.Tensor:  # fmt: skip
    """ReMax's baseline: the reward of one greedy sample per prompt, repeated for each of
    the prompt's `n_rows / len(batch)` samples (B * n,). The greedy sample is drawn with
    `rollout.val_kwargs` (n = 1, no sampling: the config validator checks it)."""
    greedy = batch.select(deepcopy=True)
    greedy.meta_info["validate"] = True
    out = actor_rollout.generate_sequences(greedy)
    baseline = reward_fn(out, return_dict=True)["reward_tensor"].sum(-1)  # (B,)
    return baseline.repeat_interleave(n_rows // len(batch))  # (B * n,)
