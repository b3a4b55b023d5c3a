"""The report's plots: matplotlib figures (Agg, no display) as base64 PNGs.

    plots = report_plots(run.metrics, run.evaluation)   # all of them, in the page's order

Each plot is drawn only when the metrics it needs were logged (rows of ``metrics.jsonl``,
``{"step": N, ...}``; the names are the trainer's, see agentrl/trainer/metrics.py, the
workers and agentrl/rollout/output.py) or report.json holds them (a quickstart run). Each y
axis carries one quantity: two quantities are two panels side by side (small multiples),
never a second y axis.

    sft_loss        report.json's sft.loss_curve: SFT training loss per SFT step
    sft_check       report.json's sft.skill_check: held-out turn reproduction per SFT step
    accuracy        val-core/* per RL step | val-aux/rollout/tool_call_rate; report.json's
                    evaluations as marked points (after SFT at step 0, after GRPO at the last)
    phrasing        report.json's by_<grouping>: accuracy | tool-call rate per group, after
                    SFT and after GRPO (and the control)
    reward          critic/score/mean (band: min..max when it says something),
                    critic/rewards/mean (drawn only when it differs: the KL penalty)
    tool_calls      rollout/tool_call_rate | rollout/tool_calls / rollout/requests
    length_turns    response_length/mean | num_turns/mean, rollout/assistant_turns/mean
    entropy         actor/entropy
    clip_kl         actor/pg_clipfrac | actor/ppo_kl, actor/kl_loss
    timing          timing_s/* per step, stacked (timing_s/step, the step's total, as a line)
    stages          report.json's timing_s: seconds per quickstart stage
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from typing import Any

from matplotlib.axes import Axes
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

# report.json's evaluations (the quickstart's names): key -> label.
EVAL_LABELS = {"eval_sft": "after SFT", "eval_rl": "after GRPO", "control": "SFT-only control"}
EVAL_COLOURS = {"eval_sft": "tab:blue", "eval_rl": "tab:orange", "control": "tab:grey"}
VAL_TOOL_RATE = "val-aux/rollout/tool_call_rate"
GAP = "training/rollout_log_probs_diff"  # the train/inference gap metrics' prefix
CANARY = "rollout/canary/"  # the canary after each weight sync (agentrl/workers/canary.py)
# Stages the trainer times after a step, outside timing_s/step (ppo_trainer._after_step).
AFTER_STEP = ("timing_s/testing", "timing_s/save_checkpoint")


@dataclass
class Plot:
    """One figure of the page: ``name`` is its id, ``png`` the base64 PNG."""

    name: str
    title: str
    png: str
    caption: str
    points: dict[str, int] = field(default_factory=dict)  # "panel: line" -> points drawn


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if _number(value):
            steps.append(int(row["step"]))
            values.append(float(value))
    return steps, values


def _lines(
    ax: Axes, rows: list[dict[str, Any]], keys: list[str], labels: dict[str, str] | None = None,
    **style: Any,
) -> list[str]:
    """Plot each key that has values (labelled by `labels`, else the key); returns the
    keys drawn."""
    drawn = []
    for key in keys:
        steps, values = _series(rows, key)
        if steps:
            marker = "o" if len(steps) <= 40 else None
            label = (labels or {}).get(key, key)
            ax.plot(steps, values, label=label, marker=marker, markersize=3, **style)
            drawn.append(key)
    return drawn


def _figure(*titles: str) -> tuple[Figure, list[Axes]]:
    """A 6.4 x 3.6 in figure with one panel per title, side by side, x axis = step."""
    fig = Figure(figsize=(6.4, 3.6), dpi=100)
    axes = [fig.add_subplot(1, len(titles), i + 1) for i in range(len(titles))]
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=10 if len(titles) > 1 else 11)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    return fig, axes


def _encode(fig: Figure, rect: tuple[float, float, float, float] = (0, 0, 1, 1)) -> str:
    fig.tight_layout(rect=rect)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _points(fig: Figure) -> dict[str, int]:
    """The labelled lines of `fig` and how many points each has ("panel title: label")."""
    points = {}
    for ax in fig.axes:
        drawn = [(line.get_label(), line) for line in ax.get_lines()]
        drawn += [(c.get_label(), c.lines[0]) for c in ax.containers if isinstance(c, ErrorbarContainer)]
        for label, line in drawn:
            if not str(label).startswith("_"):
                points[f"{ax.get_title()}: {label}"] = len(line.get_xdata())
    return points


def _plot(
    name: str, title: str, fig: Figure, caption: str,
    rect: tuple[float, float, float, float] = (0, 0, 1, 1),
) -> Plot:
    return Plot(name, title, _encode(fig, rect), caption, _points(fig))


def _legend(ax: Axes) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")


def _share_axis(ax: Axes) -> None:
    ax.set_ylim(-0.03, 1.03)


def _same(a: tuple[list[int], list[float]], b: tuple[list[int], list[float]]) -> bool:
    return a[0] == b[0] and all(
        math.isclose(x, y, abs_tol=1e-9) for x, y in zip(a[1], b[1], strict=True)
    )


def _reward(rows: list[dict[str, Any]]) -> Plot | None:
    fig, (ax,) = _figure("reward per trajectory (training batch)")
    mean = _series(rows, "critic/score/mean")
    rewards = _series(rows, "critic/rewards/mean")
    low, high = _series(rows, "critic/score/min"), _series(rows, "critic/score/max")
    caption = "mean score (the task reward) over each step's training batch"
    constant = len(set(low[1])) == 1 and len(set(high[1])) == 1
    if low[0] and low[0] == high[0] and not constant:
        ax.fill_between(low[0], low[1], high[1], alpha=0.15, label="critic/score min..max")
        caption += "; the band is its min..max"
    elif low[0] and constant:
        caption += f"; min..max is {low[1][0]:g}..{high[1][0]:g} at every step (not drawn)"
    if mean[0] and _same(mean, rewards):
        labels = {"critic/score/mean": "critic/score/mean (= critic/rewards/mean)"}
        drawn = _lines(ax, rows, ["critic/score/mean"], labels)
        caption += "; the reward after the KL penalty (critic/rewards/mean) is the same"
    else:
        drawn = _lines(ax, rows, ["critic/score/mean", "critic/rewards/mean"])
        caption += ", and the reward after the KL penalty (critic/rewards/mean)"
    if not drawn:
        return None
    if all(0.0 <= v <= 1.0 for v in mean[1] + rewards[1] + low[1] + high[1]):
        _share_axis(ax)
    _legend(ax)
    return _plot("reward", "Reward", fig, caption)


def _evaluation_points(ax: Axes, evaluation: dict[str, Any], key: str, last_step: int) -> bool:
    """report.json's `key` (accuracy, tool_call_rate) of each evaluation as a marked point:
    after SFT at step 0, after GRPO at `last_step`, the control as a dotted line."""
    drawn = False
    for name, x in (("eval_sft", 0), ("eval_rl", last_step)):
        result = evaluation.get(name)
        if isinstance(result, dict) and _number(result.get(key)):
            err = result.get(f"{key}_stderr")
            ax.errorbar([x], [result[key]], yerr=[err if _number(err) else 0.0], fmt="s",
                        capsize=4, markersize=8, color=EVAL_COLOURS[name], zorder=3,
                        markerfacecolor="none", markeredgewidth=1.8,  # the curve shows through
                        label=f"{EVAL_LABELS[name]} (full test set)")  # fmt: skip
            drawn = True
    control = evaluation.get("control")
    if isinstance(control, dict) and _number(control.get(key)):
        ax.axhline(control[key], linestyle=":", color=EVAL_COLOURS["control"],
                   label=EVAL_LABELS["control"])  # fmt: skip
        drawn = True
    return drawn


def _validation_label(evaluation: dict[str, Any]) -> str:
    rows = (evaluation.get("settings") or {}).get("val_rows")
    return f"validation ({rows} test problems)" if _number(rows) and rows else "validation"


def _accuracy(rows: list[dict[str, Any]], evaluation: dict[str, Any]) -> Plot | None:
    keys = sorted({k for row in rows for k in row if k.startswith("val-core/")})
    has_rate = any(_number(row.get(VAL_TOOL_RATE)) for row in rows) or any(
        isinstance(evaluation.get(k), dict) and _number(evaluation[k].get("tool_call_rate"))
        for k in EVAL_LABELS
    )
    titles = ["held-out accuracy", "held-out tool-call rate"] if has_rate else ["held-out accuracy"]
    fig, axes = _figure(*titles)
    label = _validation_label(evaluation)
    labels = {k: label if len(keys) == 1 else f"{label}: {k}" for k in keys}
    drawn = _lines(axes[0], rows, keys, labels, color="tab:green" if len(keys) == 1 else None)
    last_step = max((int(r["step"]) for r in rows), default=1)
    points = _evaluation_points(axes[0], evaluation, "accuracy", max(last_step, 1))
    if not drawn and not points:
        return None
    if has_rate:
        _lines(axes[1], rows, [VAL_TOOL_RATE], {VAL_TOOL_RATE: label}, color="tab:green")
        _evaluation_points(axes[1], evaluation, "tool_call_rate", max(last_step, 1))
    for ax in axes:
        _share_axis(ax)
    _legend(axes[0])
    caption = (
        "the validation curve (trainer.test_freq: val-core/*, greedy) over RL steps; the "
        "squares are the full evaluations of report.json (± standard error)"
        if drawn else "the evaluations of report.json (± standard error); no validation "
        "during RL was logged (set data.val_files and trainer.test_freq for a curve)"
    )  # fmt: skip
    return _plot("accuracy", "Held-out accuracy", fig, caption)


def groupings(evaluation: dict[str, Any]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """report.json's per-group results: grouping -> evaluation -> group -> metrics (from the
    ``by_<grouping>`` keys of eval_sft, eval_rl and control)."""
    found: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for name in EVAL_LABELS:
        result = evaluation.get(name)
        if not isinstance(result, dict):
            continue
        for key, value in result.items():
            if key.startswith("by_") and isinstance(value, dict) and value:
                found.setdefault(key[3:], {})[name] = value
    return found


def _grouping(grouping: str, results: dict[str, dict[str, dict[str, float]]]) -> Plot:
    groups = list(dict.fromkeys(g for per_group in results.values() for g in per_group))
    fig = Figure(figsize=(6.4, 3.6), dpi=100)
    panels = (("accuracy", "held-out accuracy"), ("tool_call_rate", "tool-call rate"))
    width = 0.8 / len(results)
    for i, (key, title) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        for j, (name, per_group) in enumerate(results.items()):
            xs = [g + (j - (len(results) - 1) / 2) * width for g in range(len(groups))]
            values = [float(per_group.get(g, {}).get(key, math.nan)) for g in groups]
            errors = [float(per_group.get(g, {}).get(f"{key}_stderr", 0.0)) for g in groups]
            ax.bar(xs, values, width=width, color=EVAL_COLOURS[name], label=EVAL_LABELS[name],
                   yerr=errors if key == "accuracy" else None, capsize=3)  # fmt: skip
        ax.set_xticks(range(len(groups)), [g.replace("_", " ") for g in groups], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, 1.05)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3, axis="y")
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(labels), frameon=False)
    return _plot(
        grouping,
        f"By {grouping.replace('_', ' ')}",
        fig,
        f"held-out accuracy (± standard error) and tool-call rate per {grouping} group "
        "(report.json's by_" + grouping + "), before RL (after SFT) and after",
        rect=(0, 0.07, 1, 1),
    )


def _sft_loss(sft: dict[str, Any]) -> Plot | None:
    curve = [p for p in sft.get("loss_curve") or [] if len(p) == 2 and _number(p[1])]
    if not curve:
        return None
    fig, (ax,) = _figure("SFT training loss")
    ax.plot([p[0] for p in curve], [p[1] for p in curve], color="tab:purple", marker="o",
            markersize=3 if len(curve) <= 40 else 0, label="training loss")  # fmt: skip
    if all(p[1] > 0 for p in curve):
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("SFT step")
    reached = (sft.get("skill_check") or {}).get("reached_at")
    if _number(reached):
        ax.axvline(reached, color="tab:green", linestyle="--", label="skill check passed")
    _legend(ax)
    return _plot("sft_loss", "SFT loss", fig,
                f"mean training loss on the teacher's traces over {sft.get('steps', '?')} SFT "
                "steps (log scale)")  # fmt: skip


def _sft_check(sft: dict[str, Any]) -> Plot | None:
    check = sft.get("skill_check") or {}
    curve = [p for p in check.get("curve") or [] if len(p) == 2 and _number(p[1])]
    if not curve:
        return None
    fig, (ax,) = _figure("SFT skill check (held-out)")
    ax.plot([p[0] for p in curve], [p[1] for p in curve], color="tab:green", marker="o",
            markersize=3, label="turns reproduced")  # fmt: skip
    threshold, reached = check.get("threshold"), check.get("reached_at")
    if _number(threshold):
        ax.axhline(threshold, color="grey", linestyle=":", label=f"threshold {threshold:g}")
    if _number(sft.get("steps")):
        ax.axvline(sft["steps"], color="black", linewidth=1, label=f"SFT stopped ({sft['steps']})")
    ax.set_xlabel("SFT step")
    _share_axis(ax)
    _legend(ax)
    when = f"; passed at step {reached}" if _number(reached) else "; never passed"
    return _plot("sft_check", "SFT skill check", fig,
                "share of the turns of held-out tool-using traces the model reproduces "
                f"(agentrl.trainer.sft_check), the rule that ended SFT{when}")  # fmt: skip


def _panels(
    rows: list[dict[str, Any]], name: str, title: str,
    panels: list[tuple[str, list[str], str, bool]], caption: str,
) -> Plot | None:
    """One panel per (title, keys, y label, is a share) that has data; None when none has."""
    present = [p for p in panels if any(_series(rows, k)[0] for k in p[1])]
    if not present:
        return None
    fig, axes = _figure(*[p[0] for p in present])
    for ax, (_, keys, ylabel, share) in zip(axes, present, strict=True):
        _lines(ax, rows, keys)
        ax.set_ylabel(ylabel, fontsize=8)
        if share:
            _share_axis(ax)
        if len(keys) > 1:
            _legend(ax)
    return _plot(name, title, fig, caption)


def _tool_calls(rows: list[dict[str, Any]]) -> Plot | None:
    calls = dict(zip(*_series(rows, "rollout/tool_calls"), strict=True))  # step -> calls
    requests = dict(zip(*_series(rows, "rollout/requests"), strict=True))  # step -> trajectories
    per = [{"step": s, "calls per trajectory": calls[s] / requests[s]}
           for s in sorted(calls) if requests.get(s)]  # fmt: skip
    merged = [dict(r) for r in rows] + per
    return _panels(
        merged, "tool_calls", "Tool calls",
        [("share with a tool call", ["rollout/tool_call_rate"], "share of trajectories", True),
         ("tool calls per trajectory", ["calls per trajectory"], "calls", False)],
        "share of training trajectories with at least one tool call (rollout/tool_call_rate), "
        "and tool calls per trajectory (rollout/tool_calls / rollout/requests)",
    )  # fmt: skip


def _timing(rows: list[dict[str, Any]]) -> Plot | None:
    rows = [row for row in rows if any(k.startswith("timing_s/") for k in row)]
    stages = sorted(
        {k for row in rows for k in row if k.startswith("timing_s/")} - {"timing_s/step"}
    )
    if not stages:
        return None
    fig, (ax,) = _figure("time per stage")
    steps = [int(row["step"]) for row in rows]
    bottom = [0.0] * len(rows)
    for key in sorted(stages, key=lambda k: k in AFTER_STEP):  # the step's own stages first
        values = [float(row.get(key) or 0.0) for row in rows]
        label = key.removeprefix("timing_s/") + (" (after the step)" if key in AFTER_STEP else "")
        ax.bar(steps, values, bottom=bottom, label=label, width=0.8,
               hatch="//" if key in AFTER_STEP else None)  # fmt: skip
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    _lines(ax, rows, ["timing_s/step"], {"timing_s/step": "step (timing_s/step)"}, color="black",
           linewidth=1)  # fmt: skip
    ax.set_ylabel("seconds")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _plot(
        "timing",
        "Time per stage",
        fig,
        "seconds per step in each stage (timing_s/*); the line is the step itself "
        "(timing_s/step): validation (testing) and checkpoint saves come after it, hatched",
    )


def story_plots(evaluation: dict[str, Any]) -> list[Plot]:
    """The quickstart's story from report.json: the SFT loss and skill check, then the
    per-group split (the phrasings) before and after RL; [] for a plain training run."""
    sft = evaluation.get("sft") if isinstance(evaluation.get("sft"), dict) else {}
    plots = [_sft_loss(sft), _sft_check(sft)]
    plots += [_grouping(g, results) for g, results in groupings(evaluation).items()]
    return [plot for plot in plots if plot is not None]


def report_plots(rows: list[dict[str, Any]], evaluation: dict[str, Any]) -> list[Plot]:
    """Every plot of the page in the story's order: SFT, held-out accuracy, the per-group
    split, then the RL training curves and the seconds."""
    story = story_plots(evaluation)
    sft = [p for p in story if p.name.startswith("sft_")]
    split = [p for p in story if not p.name.startswith("sft_")]
    training = training_plots(rows, evaluation)
    accuracy = [p for p in training if p.name == "accuracy"]
    rest = [p for p in training if p.name != "accuracy"]
    return sft + accuracy + split + rest + stage_plots(evaluation)


def training_plots(rows: list[dict[str, Any]], evaluation: dict[str, Any]) -> list[Plot]:
    """The plots of the training metrics (and report.json's accuracies) that have data."""
    candidates = [
        _accuracy(rows, evaluation),
        _reward(rows),
        _tool_calls(rows),
        _panels(
            rows, "length_turns", "Response length and turns",
            [("response length", ["response_length/mean"], "tokens", False),
             ("turns", ["num_turns/mean", "rollout/assistant_turns/mean"], "turns", False)],
            "mean response tokens (model and tool tokens), and turns per trajectory",
        ),
        _panels(rows, "entropy", "Entropy", [("entropy", ["actor/entropy"], "nats", False)],
                "mean token entropy of the policy on the trained tokens"),
        _panels(
            rows, "clip_kl", "Clip fraction and KL",
            [("clip fraction", ["actor/pg_clipfrac"], "share of ratios", False),
             ("KL", ["actor/ppo_kl", "actor/kl_loss"], "KL", False)],
            "share of clipped ratios (actor/pg_clipfrac), and KL(old || new) of the update "
            "(actor/ppo_kl) and the KL loss (actor/kl_loss)",
        ),
        _panels(
            rows, "logprob_gap", "Train/inference gap",
            [("log-prob gap of the trained tokens", [f"{GAP}_p50", f"{GAP}_p99", f"{GAP}_max"],
              "|rollout - trainer| log-prob", False),
             ("canary after each weight sync", [f"{CANARY}logprob_gap_max",
                                                f"{CANARY}threshold"],
              "|server - trainer| log-prob", False)],
            "per step, the median, 99th percentile and largest |rollout log-prob - trainer "
            "log-prob| over the trained tokens (training/rollout_log_probs_diff_*): the gap the "
            "rollout correction works on; the viewer's order \"largest train/inference gap "
            "first\" lists the trajectories it comes from. Beside it, the canary after each "
            "weight sync: the worst server's largest log-prob gap on the fixed canary "
            "sequences and the threshold past which a server is drained (rollout/canary/*, "
            "docs/backends.md)",
        ),
        _timing(rows),
    ]  # fmt: skip
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
    ax.set_xlim(0, max(stages.values()) * 1.12 or 1.0)  # room for the longest bar's label
    return [
        Plot(
            "stages",
            "Time per stage (report.json)",
            _encode(fig),
            "wall time of each stage of the run",
        )
    ]
