"""The report's plots: matplotlib figures (Agg, no display) as base64 PNGs.

    plots = training_plots(run.metrics, run.evaluation) + stage_plots(run.evaluation)

Each plot is drawn only when the metrics it needs were logged (rows of ``metrics.jsonl``,
``{"step": N, ...}``; the names are the trainer's, see agentrl/trainer/metrics.py, the
workers and agentrl/rollout/output.py):

    reward          critic/score/mean (band: min..max), critic/rewards/mean
    accuracy        val-core/*, val-aux/* (dashed); report.json's evaluations as points
    tool_calls      rollout/tool_call_rate; rollout/tool_calls / rollout/requests
    length_turns    response_length/mean; num_turns/mean, rollout/assistant_turns/mean
    entropy         actor/entropy
    clip_kl         actor/pg_clipfrac, actor/ppo_kl, actor/kl_loss
    timing          timing_s/* per step, stacked (timing_s/step, the step's total, as a line)
    stages          report.json's timing_s: seconds per quickstart stage
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

# report.json's evaluations (the quickstart's names): key -> label.
EVAL_LABELS = {"eval_sft": "after SFT", "eval_rl": "after GRPO", "control": "SFT-only control"}


@dataclass
class Plot:
    """One figure of the page: ``name`` is its id, ``png`` the base64 PNG."""

    name: str
    title: str
    png: str
    caption: str


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            steps.append(int(row["step"]))
            values.append(float(value))
    return steps, values


def _lines(ax: Axes, rows: list[dict[str, Any]], keys: list[str], **style: Any) -> list[str]:
    """Plot each key that has values; returns the keys drawn."""
    drawn = []
    for key in keys:
        steps, values = _series(rows, key)
        if steps:
            marker = "o" if len(steps) <= 40 else None
            ax.plot(steps, values, label=key, marker=marker, markersize=3, **style)
            drawn.append(key)
    return drawn


def _figure(title: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(6.4, 3.6), dpi=100)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    return fig, ax


def _encode(fig: Figure) -> str:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _legend(*axes: Axes) -> None:
    handles, labels = [], []
    for ax in axes:
        h, labels_ = ax.get_legend_handles_labels()
        handles += h
        labels += labels_
    if handles:
        axes[0].legend(handles, labels, fontsize=7, loc="best")


def _reward(rows: list[dict[str, Any]]) -> Plot | None:
    fig, ax = _figure("reward per trajectory")
    steps, low = _series(rows, "critic/score/min")
    high_steps, high = _series(rows, "critic/score/max")
    if steps and steps == high_steps:
        ax.fill_between(steps, low, high, alpha=0.15, label="critic/score min..max")
    drawn = _lines(ax, rows, ["critic/score/mean", "critic/rewards/mean"])
    if not drawn:
        return None
    _legend(ax)
    return Plot(
        "reward",
        "Reward",
        _encode(fig),
        "mean score (task reward) and reward after the KL penalty, over the training batch",
    )


def _evaluation_points(ax: Axes, evaluation: dict[str, Any], last_step: int) -> bool:
    drawn = False
    for key, x in (("eval_sft", 0), ("eval_rl", last_step)):
        result = evaluation.get(key)
        if isinstance(result, dict) and isinstance(result.get("accuracy"), int | float):
            err = result.get("accuracy_stderr")
            err = err if isinstance(err, int | float) and math.isfinite(err) else 0.0
            ax.errorbar(
                [x],
                [result["accuracy"]],
                yerr=[err],
                fmt="s",
                capsize=4,
                markersize=7,
                label=f"{EVAL_LABELS[key]} accuracy (report.json)",
            )
            drawn = True
    control = evaluation.get("control")
    if isinstance(control, dict) and isinstance(control.get("accuracy"), int | float):
        ax.axhline(
            control["accuracy"],
            linestyle=":",
            color="grey",
            label=f"{EVAL_LABELS['control']} accuracy (report.json)",
        )
        drawn = True
    return drawn


def _accuracy(rows: list[dict[str, Any]], evaluation: dict[str, Any]) -> Plot | None:
    fig, ax = _figure("held-out accuracy")
    keys = sorted({k for row in rows for k in row if k.startswith(("val-core/", "val-aux/"))})
    drawn = _lines(ax, rows, [k for k in keys if k.startswith("val-core/")])
    drawn += _lines(ax, rows, [k for k in keys if k.startswith("val-aux/")], linestyle="--")
    last_step = max((int(r["step"]) for r in rows), default=1)
    if not _evaluation_points(ax, evaluation, max(last_step, 1)) and not drawn:
        return None
    _legend(ax)
    return Plot(
        "accuracy",
        "Held-out accuracy",
        _encode(fig),
        "validation metrics (val-core, val-aux dashed) and the evaluations of "
        "report.json (± standard error)",
    )


def _tool_calls(rows: list[dict[str, Any]]) -> Plot | None:
    fig, ax = _figure("tool use")
    drawn = _lines(ax, rows, ["rollout/tool_call_rate"], color="tab:blue")
    ax.set_ylabel("share of trajectories with a call")
    ax.set_ylim(-0.03, 1.03)
    calls = dict(zip(*_series(rows, "rollout/tool_calls"), strict=True))  # step -> calls
    requests = dict(zip(*_series(rows, "rollout/requests"), strict=True))  # step -> trajectories
    steps = sorted(s for s in calls if requests.get(s))
    right = ax.twinx()
    if steps:
        per_trajectory = [calls[s] / requests[s] for s in steps]
        right.plot(
            steps,
            per_trajectory,
            color="tab:orange",
            marker="o",
            markersize=3,
            label="rollout/tool_calls / rollout/requests",
        )
        right.set_ylabel("calls per trajectory")
    if not drawn and not steps:
        return None
    _legend(ax, right)
    return Plot(
        "tool_calls",
        "Tool calls",
        _encode(fig),
        "share of trajectories with at least one tool call, and tool calls per trajectory",
    )


def _length_turns(rows: list[dict[str, Any]]) -> Plot | None:
    fig, ax = _figure("response length and turns")
    drawn = _lines(ax, rows, ["response_length/mean"], color="tab:blue")
    ax.set_ylabel("tokens")
    right = ax.twinx()
    turns = _lines(right, rows, ["num_turns/mean", "rollout/assistant_turns/mean"], linestyle="--")
    right.set_ylabel("turns")
    if not drawn and not turns:
        return None
    _legend(ax, right)
    return Plot(
        "length_turns",
        "Response length and turns",
        _encode(fig),
        "mean response tokens (model and tool tokens) and turns per trajectory",
    )


def _simple(
    rows: list[dict[str, Any]], name: str, title: str, keys: list[str], caption: str
) -> Plot | None:
    fig, ax = _figure(title.lower())
    if not _lines(ax, rows, keys):
        return None
    _legend(ax)
    return Plot(name, title, _encode(fig), caption)


def _timing(rows: list[dict[str, Any]]) -> Plot | None:
    rows = [row for row in rows if any(k.startswith("timing_s/") for k in row)]
    stages = sorted(
        {k for row in rows for k in row if k.startswith("timing_s/")} - {"timing_s/step"}
    )
    if not stages:
        return None
    fig, ax = _figure("time per stage")
    steps = [int(row["step"]) for row in rows]
    bottom = [0.0] * len(rows)
    for key in stages:
        values = [float(row.get(key) or 0.0) for row in rows]
        ax.bar(steps, values, bottom=bottom, label=key.removeprefix("timing_s/"), width=0.8)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    _lines(ax, rows, ["timing_s/step"], color="black", linewidth=1)
    ax.set_ylabel("seconds")
    _legend(ax)
    return Plot(
        "timing",
        "Time per stage",
        _encode(fig),
        "seconds per step in each stage (timing_s/*); the line is the whole step",
    )


def training_plots(rows: list[dict[str, Any]], evaluation: dict[str, Any]) -> list[Plot]:
    """The plots of the training metrics (and report.json's accuracies) that have data."""
    candidates = [
        _reward(rows),
        _accuracy(rows, evaluation),
        _tool_calls(rows),
        _length_turns(rows),
        _simple(
            rows,
            "entropy",
            "Entropy",
            ["actor/entropy"],
            "mean token entropy of the policy on the trained tokens",
        ),
        _simple(
            rows,
            "clip_kl",
            "Clip fraction and KL",
            ["actor/pg_clipfrac", "actor/ppo_kl", "actor/kl_loss"],
            "share of clipped ratios, KL(old || new) of the update, and the KL loss",
        ),
        _timing(rows),
    ]
    return [plot for plot in candidates if plot is not None]


def stage_plots(evaluation: dict[str, Any]) -> list[Plot]:
    """Seconds per stage of a quickstart run (report.json's ``timing_s``), if any."""
    timing = evaluation.get("timing_s")
    if not isinstance(timing, dict):
        return []
    stages = {k: float(v) for k, v in timing.items() if k != "total" and isinstance(v, int | float)}
    if not stages:
        return []
    fig = Figure(figsize=(6.4, 0.6 + 0.35 * len(stages)), dpi=100)
    ax = fig.add_subplot()
    names = list(stages)
    ax.barh(names, [stages[n] for n in names], color="tab:blue")
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    total = timing.get("total")
    suffix = f" (total {float(total):.0f} s)" if isinstance(total, int | float) else ""
    ax.set_title(f"time per stage{suffix}", fontsize=11)
    for y, name in enumerate(names):
        ax.text(stages[name], y, f" {stages[name]:.1f}", va="center", fontsize=8)
    return [
        Plot(
            "stages",
            "Time per stage (report.json)",
            _encode(fig),
            "wall time of each stage of the run",
        )
    ]
