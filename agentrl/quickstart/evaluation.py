"""Held-out evaluation of the quickstart's models: greedy and sampled rollouts of the test
problems with the real calculator, their metrics with standard errors, and the summary table.

    metrics = evaluate_model(model_dir, test_parquet, out_dir / "eval_sft", seed=0)
    metrics["accuracy"], metrics["accuracy_stderr"], metrics["sampled_accuracy"], ...

Accuracy is the mean score of the test problems (the reward: 1 for an exact answer, or a
game's share of hands won); its standard error is the mean's, sqrt(var / n) with the scores'
variance, which for scores of 0 and 1 is the binomial sqrt(p (1 - p) / n). Rollouts go through `agentrl generate` (the rollout
engine, the `hf` backend and the calculator of the recipe), one jsonl file per pass.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.config import load_config

# The rows of the final table: report key -> label.
TABLE_ROWS = {"eval_sft": "after SFT", "eval_rl": "after GRPO", "control": "SFT-only control"}


def stderr(p: float, n: int) -> float:
    """Binomial standard error of a share `p` measured on `n` items."""
    return math.sqrt(max(p * (1.0 - p), 0.0) / n) if n > 0 else float("nan")


def mean_stderr(scores: Sequence[float]) -> float:
    """Standard error of the mean of `scores`, sqrt(var / n) (the binomial one, `stderr`,
    when every score is 0 or 1; smaller for graded scores, whose variance is less)."""
    n = len(scores)
    if n == 0:
        return float("nan")
    mean = sum(scores) / n
    return math.sqrt(sum((x - mean) ** 2 for x in scores) / n / n)


def trajectory_metrics(
    rows: Sequence[dict[str, Any]], tool: str = "calculator", answer_tag: str = "<answer>"
) -> dict[str, float]:
    """Metrics of `agentrl generate` rows: `accuracy` (the mean score: the share scoring 1
    when scores are 0 or 1) and its `accuracy_stderr` (`mean_stderr`), `tool_call_rate` (share with at least one call of `tool`),
    `tool_calls_per_question`, `well_formed_call_rate` (a call and no parse or tool error),
    `answer_rate` (share whose last turn contains `answer_tag`), `turns/mean`,
    `trajectories`."""
    if not rows:
        raise ValueError("no trajectories to evaluate")
    n = len(rows)
    calls = [r["metrics"]["tool_calls"].get(tool, 0) for r in rows]
    clean = [
        c > 0 and not r["metrics"]["tool_errors"] and r["metrics"]["parse_errors"] == 0
        for c, r in zip(calls, rows, strict=True)
    ]
    answered = [answer_tag in _final_text(r) for r in rows]
    scores = [float(r.get("score") or 0.0) for r in rows]
    return {
        "trajectories": float(n),
        "accuracy": sum(scores) / n,
        "accuracy_stderr": mean_stderr(scores),
        "tool_call_rate": sum(c > 0 for c in calls) / n,
        "tool_calls_per_question": sum(calls) / n,
        "well_formed_call_rate": sum(clean) / n,
        "answer_rate": sum(answered) / n,
        "turns/mean": sum(float(r["num_turns"]) for r in rows) / n,
    }


def group_metrics(
    rows: Sequence[dict[str, Any]], labels: Sequence[str], tool: str = "calculator"
) -> dict[str, dict[str, float]]:
    """`accuracy`, its stderr and `tool_call_rate` per label; `labels[i]` is the group of
    dataset row i (a generate row's `index`)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(labels[row["index"]], []).append(row)
    keys = ("accuracy", "accuracy_stderr", "tool_call_rate")
    return {
        label: {k: trajectory_metrics(group, tool)[k] for k in keys}
        for label, group in sorted(groups.items())
    }


def _final_text(row: dict[str, Any]) -> str:
    assistant = [m for m in row["messages"] if m.get("role") == "assistant"]
    return str(assistant[-1].get("content") or "") if assistant else ""


def generate_rows(
    config_path: Path,
    model_dir: Path,
    test_path: Path,
    out_path: Path,
    overrides: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Roll out every test prompt once with the recipe's tools; the `generate` rows."""
    from agentrl.generate import generate

    cfg = load_config(
        config_path,
        [
            f"actor_rollout_ref.model.path={model_dir}",
            f"data.path={test_path}",
            f"data.output_path={out_path}",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.rollout.max_num_seqs=256",  # one wave for the whole test set
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",  # no training here
            *overrides,
        ],
    )
    generate(cfg)
    return [json.loads(line) for line in out_path.read_text().splitlines()]


def evaluate_model(
    config_path: Path,
    model_dir: Path,
    test_path: Path,
    out_prefix: Path,
    seed: int,
    tool: str = "calculator",
    groups: Mapping[str, Sequence[str]] | None = None,
    aliases: Mapping[str, str] | None = None,
    overrides: Sequence[str] = (),
    answer_tag: str = "<answer>",
    extra_metrics: Callable[[list[dict[str, Any]]], dict[str, float]] | None = None,
) -> dict[str, Any]:
    """Greedy and sampled (T=1) rollouts of the test set: the greedy pass's
    `trajectory_metrics`, `by_<grouping>` per grouping of `groups`, then
    `sampled_accuracy`, `sampled_accuracy_stderr`, `sampled_tool_call_rate`, `time_s`, and
    every `aliases` key (a task's name for a metric: `exact_match` for `accuracy`), and
    `extra_metrics(greedy rows)` (a task's own: the game's hit rates by hand).
    Trajectories go to `{out_prefix}.jsonl` and `{out_prefix}_sampled.jsonl`."""
    started = time.perf_counter()
    greedy = generate_rows(
        config_path,
        model_dir,
        test_path,
        out_prefix.with_suffix(".jsonl"),
        ["actor_rollout_ref.rollout.do_sample=false", *overrides],
    )
    sampled = generate_rows(
        config_path,
        model_dir,
        test_path,
        out_prefix.with_name(out_prefix.name + "_sampled.jsonl"),
        [
            "actor_rollout_ref.rollout.do_sample=true",
            "actor_rollout_ref.rollout.temperature=1.0",
            f"actor_rollout_ref.rollout.engine_kwargs.seed={seed}",
            *overrides,
        ],
    )
    metrics: dict[str, Any] = trajectory_metrics(greedy, tool, answer_tag)
    if extra_metrics is not None:
        metrics |= extra_metrics(greedy)
    for grouping, labels in (groups or {}).items():
        metrics[f"by_{grouping}"] = group_metrics(greedy, labels, tool)
    sampled_metrics = trajectory_metrics(sampled, tool, answer_tag)
    metrics |= {
        "sampled_accuracy": sampled_metrics["accuracy"],
        "sampled_accuracy_stderr": sampled_metrics["accuracy_stderr"],
        "sampled_tool_call_rate": sampled_metrics["tool_call_rate"],
        "time_s": time.perf_counter() - started,
    }
    metrics |= {alias: metrics[key] for alias, key in (aliases or {}).items()}
    return metrics


def summary_table(report: Mapping[str, Any], tool_column: bool = True) -> str:
    """The console table: accuracy (greedy and sampled, ± standard error) and, for a task
    with a tool (`tool_column`), tool-call rate per model, then the seconds of every
    stage."""
    tools = f"{'tool-call rate':>16}" if tool_column else ""
    lines = [f"{'':<18}{'greedy accuracy':>18}{'sampled (T=1)':>18}{tools}"]
    for key, label in TABLE_ROWS.items():
        if key not in report:
            continue
        m = report[key]
        lines.append(
            f"{label:<18}{_pm(m['accuracy'], m['accuracy_stderr']):>18}"
            f"{_pm(m['sampled_accuracy'], m['sampled_accuracy_stderr']):>18}"
            + (f"{m['tool_call_rate']:>16.2f}" if tool_column else "")
        )
    timing = report.get("timing_s", {})
    lines.append("seconds: " + " | ".join(f"{k} {v:.0f}" for k, v in timing.items()))
    return "\n".join(lines)


def _pm(value: float, error: float) -> str:
    return f"{value:.3f} ± {error:.3f}"
