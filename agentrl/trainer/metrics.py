"""Training and validation metrics with verl's names, computed on the driver from a batch.

    metrics = compute_data_metrics(batch, use_critic=True)   # critic/score/mean, ...
    with timer("gen", timing): ...                            # timing["gen"] += seconds
    metrics |= compute_timing_metrics(timing)                 # timing_s/gen, ...
    metrics |= compute_throughput_metrics(batch, timing, n_workers)  # perf/throughput
    val = process_validation_metrics(data_sources, uids, {"reward": scores, ...})

Data metrics (verl's `compute_data_metrics`): per trajectory, the score is the sum of
``token_level_scores``, the reward the sum of ``token_level_rewards`` (score minus the KL
penalty); advantages, returns and values are taken over valid (response-mask) tokens.
Trajectories whose rollout FAILED (non-tensor ``request_state == "failed"``) are left out of
the score, reward, advantage and length statistics and counted in ``training/failed``;
those the score function could not score (an LLM judge that failed) are counted again in
``training/score_failed``.

Failure metrics (``failure_metrics``, in every step's metrics, 0 when none): trajectories
with an infrastructure failure, ``rollout/infra_failed`` and ``rollout/infra_failed/<kind>``
(kind: the tool's name, ``interaction``, ``generation``, ``judge`` or ``scorer``), and those
whose score function raised, ``reward/score_failed`` and ``reward/score_failed/<data
source>``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from agentrl.protocol import DATA_SOURCE_KEY, INFRA_ERROR_KEY, SCORE_FAILED_KEY
from agentrl.reward import SCORE_ERROR_KEY
from agentrl.rollout.output import infra_error_metrics
from agentrl.utils.trace import Track

FAILED = "failed"


@contextmanager
def timer(name: str, timing: dict[str, float], trace: Track | None = None) -> Iterator[None]:
    """Add the wall time of the block to ``timing[name]`` (seconds); with ``trace``, the
    same interval is a span of that track of the step's timeline (trainer.trace)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        ended = time.perf_counter()
        timing[name] = timing.get(name, 0.0) + ended - started
        if trace is not None:
            trace.complete(name, started, ended)


def failed_rows(data: Any) -> np.ndarray:
    """(B,) bool: rows whose rollout request ended FAILED (False when the key is absent)."""
    states = data.non_tensor_batch.get("request_state")
    if states is None:
        return np.zeros(len(data), dtype=bool)
    return np.array([state == FAILED for state in states], dtype=bool)


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {}
    values = values.float()
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def compute_data_metrics(data: Any, use_critic: bool) -> dict[str, float]:
    """verl's data metrics of one training batch (see the module docstring)."""
    batch = data.batch
    response_length = batch["responses"].shape[-1]
    keep = torch.from_numpy(~failed_rows(data))  # (B,)
    mask = batch["response_mask"].bool()[keep]  # (b, R)
    attention = batch["attention_mask"][keep]  # (b, P + R)
    prompt_len = attention[:, :-response_length].sum(-1).float()  # (b,)
    resp_len = attention[:, -response_length:].sum(-1).float()  # (b,)
    max_prompt = attention.shape[-1] - response_length

    metrics: dict[str, float] = {"training/failed": float((~keep).sum().item()),
                                 "training/score_failed": float(_score_failed(data))}
    metrics |= _stats("critic/score", batch["token_level_scores"][keep].sum(-1))
    metrics |= _stats("critic/rewards", batch["token_level_rewards"][keep].sum(-1))
    metrics |= _stats("critic/advantages", batch["advantages"][keep][mask])
    metrics |= _stats("critic/returns", batch["returns"][keep][mask])
    if use_critic:
        values = batch["values"][keep][mask]
        returns = batch["returns"][keep][mask]
        metrics |= _stats("critic/values", values)
        if values.numel() > 1:
            residual_var = torch.var(returns - values)
            metrics["critic/vf_explained_var"] = (
                1.0 - residual_var / (torch.var(returns) + 1e-5)
            ).item()
    metrics |= _stats("response_length", resp_len)
    metrics |= _stats("prompt_length", prompt_len)
    if resp_len.numel():
        metrics["response_length/clip_ratio"] = (resp_len >= response_length).float().mean().item()
        metrics["prompt_length/clip_ratio"] = (prompt_len >= max_prompt).float().mean().item()
    if "num_turns" in data.non_tensor_batch:
        turns = np.asarray(data.non_tensor_batch["num_turns"], dtype=float)[keep.numpy()]
        if turns.size:
            metrics |= {
                "num_turns/mean": float(turns.mean()),
                "num_turns/max": float(turns.max()),
                "num_turns/min": float(turns.min()),
            }
    return metrics


def _score_failed(data: Any) -> int:
    """Rows the score function could not score (among `training/failed`)."""
    extra = data.non_tensor_batch.get("reward_extra_info")
    return 0 if extra is None else sum(
        bool((row or {}).get(SCORE_FAILED_KEY)) for row in extra)


def failure_metrics(data: Any, reward_fn_key: str = DATA_SOURCE_KEY) -> dict[str, float]:
    """The batch's infrastructure and score-function failures (see the module docstring),
    from its ``infra_error`` column and ``reward_extra_info``; ``reward_fn_key`` names the
    data source column (``data.reward_fn_key``)."""
    column = data.non_tensor_batch.get(INFRA_ERROR_KEY)
    metrics = infra_error_metrics(list(column) if column is not None else [])
    extra = data.non_tensor_batch.get("reward_extra_info")
    rows = list(extra) if extra is not None else []
    sources = data.non_tensor_batch.get(reward_fn_key)
    failed: dict[str, int] = defaultdict(int)
    for i, row in enumerate(rows):
        row = row or {}
        if row.get(SCORE_ERROR_KEY) or isinstance(row.get(INFRA_ERROR_KEY), str):
            failed[str(sources[i]) if sources is not None else "unknown"] += 1
    metrics["reward/score_failed"] = float(sum(failed.values()))
    return metrics | {f"reward/score_failed/{k}": float(v) for k, v in sorted(failed.items())}


def rollout_logprob_gaps(data: Any) -> torch.Tensor | None:
    """|rollout log-prob - trainer log-prob| per response position (B, R), 0 where the loss
    mask is 0; None when the batch lacks either log-prob."""
    keys = data.batch.keys()
    if "rollout_log_probs" not in keys or "old_log_probs" not in keys:
        return None
    gap = (data.batch["rollout_log_probs"].float() - data.batch["old_log_probs"].float()).abs()
    return torch.where(data.batch["response_mask"].bool(), gap, torch.zeros_like(gap))


def compute_rollout_logprob_gap(data: Any) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's (``old_log_probs``), over the
    model's own tokens (``response_mask``): verl's ``training/rollout_probs_diff_*`` (in
    probability) and ``training/rollout_log_probs_diff_*`` (in log-probability), the latter
    also as its median and 99th percentile over the step's trained tokens (``_p50``,
    ``_p99``). Empty when the batch lacks either (the engine was not asked for log-probs)."""
    keys = data.batch.keys()
    if "rollout_log_probs" not in keys or "old_log_probs" not in keys:
        return {}
    mask = data.batch["response_mask"].bool()
    if not mask.any():
        return {}
    rollout = data.batch["rollout_log_probs"].float()[mask]
    trainer = data.batch["old_log_probs"].float()[mask]
    probs = (rollout.exp() - trainer.exp()).abs()
    logs = rollout_logprob_gaps(data)[mask]
    p50, p99 = np.quantile(logs.double().cpu().numpy(), [0.5, 0.99]).tolist()
    return {
        "training/rollout_probs_diff_max": probs.max().item(),
        "training/rollout_probs_diff_mean": probs.mean().item(),
        "training/rollout_probs_diff_std": probs.std(unbiased=False).item(),
        "training/rollout_log_probs_diff_max": logs.max().item(),
        "training/rollout_log_probs_diff_mean": logs.mean().item(),
        "training/rollout_log_probs_diff_p50": p50,
        "training/rollout_log_probs_diff_p99": p99,
    }


def compute_timing_metrics(timing: dict[str, float]) -> dict[str, float]:
    """``timing_s/{name}`` for every timed section."""
    return {f"timing_s/{name}": seconds for name, seconds in timing.items()}


def compute_throughput_metrics(data: Any, timing: dict[str, float], n_workers: int) -> dict:
    """verl's perf metrics: tokens of the batch (attention mask), step time, and tokens per
    second per worker."""
    total_tokens = int(data.batch["attention_mask"].sum().item())
    step_s = timing["step"]
    return {
        "perf/total_num_tokens": float(total_tokens),
        "perf/time_per_step": step_s,
        "perf/throughput": total_tokens / (step_s * n_workers) if step_s > 0 else 0.0,
    }


def merge_batch_metrics(batches: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One set of rollout metrics from several batches': maxima of ``*/max``, minima of
    ``*/min``, means of ``*/mean`` and rates, sums of the counts."""
    merged: dict[str, float] = {}
    for key in dict.fromkeys(k for batch in batches for k in batch):
        values = [float(batch[key]) for batch in batches if key in batch]
        if key.endswith("/max"):
            merged[key] = max(values)
        elif key.endswith("/min"):
            merged[key] = min(values)
        elif key.endswith(("/mean", "_rate", "_s")):
            merged[key] = float(np.mean(values))
        else:
            merged[key] = float(sum(values))
    return merged


BOOTSTRAP_SAMPLES = 1000


def bootstrap_metric(
    data: Sequence[Any], subset_size: int, reduce_fns: Sequence[Any], seed: int = 42,
    n_bootstrap: int = BOOTSTRAP_SAMPLES,
) -> list[tuple[float, float]]:
    """verl's bootstrap: ``n_bootstrap`` draws of ``subset_size`` items with replacement;
    ``(mean, std)`` of each reduce function over the draws."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(data), size=(n_bootstrap, subset_size))
    results = [[fn([data[i] for i in row]) for row in draws] for fn in reduce_fns]
    return [(float(np.mean(r)), float(np.std(r))) for r in results]


def majority_value(samples: Sequence[tuple[float, Any]]) -> float:
    """The value of the most common prediction (ties: the first seen), for maj@n."""
    counts: dict[Any, int] = {}
    for _, pred in samples:
        counts[pred] = counts.get(pred, 0) + 1
    winner = max(counts, key=counts.__getitem__)
    return next(value for value, pred in samples if pred == winner)


def _numeric(value: Any) -> bool:
    return isinstance(value, bool | int | float | np.number) and not isinstance(value, str)


def _sizes(n: int) -> list[int]:
    """2, 4, 8, ... below n, then n (verl's sample counts for best@ / worst@ / maj@)."""
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return [*sizes, n]


def process_validation_metrics(
    data_sources: Sequence[str],
    uids: Sequence[str],
    variables: dict[str, Sequence[Any]],
    seed: int = 42,
) -> dict[str, float]:
    """Validation metrics per data source and variable (one value per trajectory each), as
    verl computes them.

    Trajectories with the same uid answer the same prompt (n samples). Per prompt and
    numeric variable: ``mean@n``; with n > 1 also ``std@n`` and, for k = 2, 4, ... < n and
    k = n, bootstrap estimates (1000 draws of k samples with replacement) of
    ``best@k/{mean,std}`` and ``worst@k/{mean,std}``, and, when the score function returns
    a ``pred`` (the extracted answer), ``maj@k/{mean,std}``: the variable's value at the
    majority answer. Each is averaged over the prompts of the data source:
    ``{section}/{data_source}/{var}/{name}``. ``section`` is ``val-core`` for the core
    variable (``acc`` when the score function returns it, else ``reward``) at the largest
    n (``mean@n``, ``best@n/mean``, ``maj@n/mean``), else ``val-aux``.
    """
    groups: dict[tuple[str, str], dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for i, (source, uid) in enumerate(zip(data_sources, uids, strict=True)):
        for var, values in variables.items():
            groups[(source, uid)][var].append(values[i])
    per_source: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    numeric_vars: dict[str, set[str]] = defaultdict(set)
    for (source, _), per_var in groups.items():
        preds = per_var.get("pred")
        for var, values in per_var.items():
            if not values or not all(_numeric(v) for v in values):
                continue
            numeric_vars[source].add(var)
            values = [float(v) for v in values]
            n = len(values)
            per_source[(source, var, f"mean@{n}")].append(float(np.mean(values)))
            if n == 1:
                continue
            per_source[(source, var, f"std@{n}")].append(float(np.std(values)))
            for k in _sizes(n):
                (best, best_std), (worst, worst_std) = bootstrap_metric(
                    values, k, [np.max, np.min], seed)
                per_source[(source, var, f"best@{k}/mean")].append(best)
                per_source[(source, var, f"best@{k}/std")].append(best_std)
                per_source[(source, var, f"worst@{k}/mean")].append(worst)
                per_source[(source, var, f"worst@{k}/std")].append(worst_std)
                if preds is not None and var != "pred":
                    ((maj, maj_std),) = bootstrap_metric(
                        list(zip(values, preds, strict=True)), k, [majority_value], seed)
                    per_source[(source, var, f"maj@{k}/mean")].append(maj)
                    per_source[(source, var, f"maj@{k}/std")].append(maj_std)
    largest: dict[tuple[str, str], int] = defaultdict(int)
    for source, var, name in per_source:
        if name.startswith("mean@"):
            largest[(source, var)] = max(largest[(source, var)], int(name[len("mean@"):]))
    metrics: dict[str, float] = {}
    for (source, var, name), values in sorted(per_source.items()):
        n = largest[(source, var)]
        core_var = "acc" if "acc" in numeric_vars[source] else "reward"
        core = var == core_var and name in (
            f"mean@{n}", f"best@{n}/mean", f"maj@{n}/mean")
        section = "val-core" if core else "val-aux"
        metrics[f"{section}/{source}/{var}/{name}"] = float(np.mean(values))
    return metrics


# metric -> its short name in the progress bar
_PROGRESS_KEYS = {
    "critic/score/mean": "reward",
    "rollout/tool_call_rate": "tool_rate",
    "response_length/mean": "resp_len",
}


def progress_postfix(metrics: dict[str, float]) -> dict[str, str]:
    """The few numbers of a step the progress bar shows (those present)."""
    return {short: f"{metrics[k]:.3g}" for k, short in _PROGRESS_KEYS.items() if k in metrics}


def train_step_metrics(data: Any, timing: dict[str, float], n_workers: int, use_critic: bool,
                       reward_fn_key: str = DATA_SOURCE_KEY) -> dict[str, float]:  # fmt: skip
    """A training step's metrics over its trained batch: what the rollout and the workers put in its `meta_info`
    (`metrics`, `timing`), then the failure, data, timing and throughput metrics of the step
    (`rollout/infra_failed*` counted on the batch, with the scoring's failures, replace the
    rollout's own count)."""
    metrics: dict[str, float] = {}
    for key in ("metrics", "timing"):
        metrics |= {k: float(v) for k, v in data.meta_info.get(key, {}).items()
                    if not k.startswith("rollout/infra_failed")}  # fmt: skip
    metrics |= failure_metrics(data, reward_fn_key)
    metrics |= compute_data_metrics(data, use_critic=use_critic)
    metrics |= compute_timing_metrics(timing)
    return metrics | compute_throughput_metrics(data, timing, n_workers)
