"""DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476): train only on prompts whose
samples disagree.

A GRPO group whose n samples all got the same reward has zero advantage everywhere: it
costs a forward/backward and teaches nothing, and as a policy improves more groups end up
all right (or all wrong). With ``algorithm.filter_groups.enable`` the trainer drops those
groups, generates further batches until ``data.train_batch_size`` prompts with varied
rewards are collected, and trims to exactly that many (verl's ``filter_groups``):

    algorithm.filter_groups.metric               acc | score | seq_reward | seq_final_reward
                                                 | any key the score function returns
    algorithm.filter_groups.max_num_gen_batches  most generation batches per step (0: any)

The pure functions here pick the rows; ``collect_informative`` is the generation loop the
trainer's step runs, given a function that generates and scores one more batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agentrl.protocol import DataProto

logger = logging.getLogger(__name__)

FAILED_SUFFIX = "/failed-"  # what ``isolate_failed`` appends to a failed row's uid


def prompt_uid(uid: str) -> str:
    """The uid of the prompt a row was sampled from (failed rows carry a suffix)."""
    return str(uid).split(FAILED_SUFFIX, 1)[0]


def metric_values(data: DataProto, metric: str) -> np.ndarray:
    """(B,) the per-trajectory value whose spread within a group decides.

    ``seq_reward`` / ``seq_final_reward``: the summed token scores (the KL penalty, if any, is
    applied after filtering, so the two agree here); ``score``: the score function's
    ``score`` key, else the summed scores; ``acc``: its ``acc`` key, else as ``score``; any
    other name: that key of the score function's dict result, on every row.
    """
    summed = data.batch["token_level_scores"].sum(-1).double().numpy()
    if metric in ("seq_reward", "seq_final_reward"):
        return summed
    extra = data.non_tensor_batch.get("reward_extra_info")
    rows: Sequence[dict[str, Any]] = list(extra) if extra is not None else [{}] * len(data)
    for key in ((metric, "score") if metric == "acc" else (metric,)):
        if all(key in row and row[key] is not None for row in rows):
            return np.array([float(row[key]) for row in rows])
    if metric in ("acc", "score"):
        return summed
    known = sorted({k for row in rows for k in row})
    raise KeyError(
        f"algorithm.filter_groups.metric {metric!r} is not a key of every score result; the "
        f"score function returned {known or 'plain numbers'} (or use seq_reward)"
    )


def informative_rows(data: DataProto, metric: str) -> tuple[np.ndarray, int, int]:
    """``(keep (B,) bool, prompts kept, prompts seen)``: a prompt is kept, all its rows, when
    its finished samples' ``metric`` values are not all equal (failed rows are ignored for
    the spread and travel with their prompt)."""
    values = metric_values(data, metric)
    prompts = np.array([prompt_uid(u) for u in data.non_tensor_batch["uid"]], dtype=object)
    failed = np.array([FAILED_SUFFIX in str(u) for u in data.non_tensor_batch["uid"]])
    keep = np.zeros(len(data), dtype=bool)
    kept = 0
    unique = list(dict.fromkeys(prompts))  # first-seen order
    for prompt in unique:
        rows = prompts == prompt
        finished = values[rows & ~failed]
        if finished.size > 1 and np.std(finished) > 0:
            keep |= rows
            kept += 1
    return keep, kept, len(unique)


def first_prompts(data: DataProto, count: int) -> DataProto:
    """The rows of the first ``count`` prompts (in order of appearance)."""
    prompts = [prompt_uid(u) for u in data.non_tensor_batch["uid"]]
    wanted = set(list(dict.fromkeys(prompts))[:count])
    return data[np.array([p in wanted for p in prompts], dtype=bool)]


def collect_informative(
    data: DataProto,
    generate_more: Callable[[int], DataProto] | None,
    filter_groups: Any,
    target: int,
    step: int,
) -> tuple[DataProto, dict[str, float]]:
    """Keep the prompts of ``data`` whose samples disagree in ``filter_groups.metric``; call
    ``generate_more(round)`` (round 1, 2, ...: one more scored batch) until ``target`` such
    prompts are collected, then trim to exactly that many. Returns the batch and the step's
    ``train/num_gen_batches``, ``train/num_prompts_kept``, ``train/num_prompts_dropped`` (those
    whose samples all agreed) and ``train/kept_prompt_ratio``.
    Running out (``filter_groups.max_num_gen_batches``, or no ``generate_more``) is an error
    that says what was collected and what to change."""
    kept: list[DataProto] = []
    n_kept = n_seen = rounds = 0
    while True:
        rounds += 1
        keep, kept_now, seen_now = informative_rows(data, filter_groups.metric)
        kept.append(data[keep])
        n_kept, n_seen = n_kept + kept_now, n_seen + seen_now
        if n_kept >= target:
            break
        if 0 < filter_groups.max_num_gen_batches <= rounds or generate_more is None:
            raise RuntimeError(
                f"step {step}: {rounds} generation batches gave {n_kept} of the {target} "
                f"prompts whose samples differ in {filter_groups.metric!r} "
                f"(algorithm.filter_groups.max_num_gen_batches="
                f"{filter_groups.max_num_gen_batches}); raise it (0: no limit), or check that "
                "the task is neither solved nor hopeless for the policy"
            )
        logger.info("step %d: %d of %d prompts with varied %s after %d batches; "
                    "generating another", step, n_kept, target, filter_groups.metric, rounds)
        data = generate_more(rounds)
    return first_prompts(DataProto.concat(kept), target), {
        "train/num_gen_batches": float(rounds),
        "train/num_prompts_kept": float(n_kept),
        "train/num_prompts_dropped": float(n_seen - n_kept),
        "train/kept_prompt_ratio": n_kept / max(n_seen, 1),
    }


__all__ = [
    "collect_informative",
    "first_prompts",
    "informative_rows",
    "metric_values",
    "prompt_uid",
]
