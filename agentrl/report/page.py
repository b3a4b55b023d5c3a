"""The report page: one self-contained HTML file (no server, no network, no library).

    html_text = render_page(run, plots, sources, notes)

Sections: the run (directory, steps, checkpoints, report.json's settings folded) and its
notes (what is missing), the stage targets of report.json (a quickstart's: each target, what
was measured, met or not), the evaluation table of report.json (before RL / after RL /
control, ± standard errors) and one table per grouping of the test set (the quickstart's
phrasings), the plots (base64 PNG ``<img>``, one ``<figure class="plot">`` each, its
``data-points`` the points of each line), one step's timeline (an inline SVG of the run's
trace: agentrl/report/timeline.py) and the trajectory viewer, under one line naming what
its cap left out, whose records are embedded as JSON in ``<script
type="application/json">`` and drawn by the script of agentrl/report/assets.py. Every text from the run is escaped here
(``html.escape``) or, in the viewer, set with ``textContent``; the JSON is written with
``<``, ``>`` and ``&`` as ``\\u`` escapes, so model output holding ``</script>`` stays data.
"""

from __future__ import annotations

import datetime
import html
import json
import math
from typing import Any

from agentrl.report.assets import CSS, JS
from agentrl.report.plots import EVAL_LABELS, Plot, groupings
from agentrl.report.run_dir import RunInputs

# report.json's evaluation columns shown first (any other numeric key follows).
EVAL_COLUMNS = ("accuracy", "sampled_accuracy", "tool_call_rate")
# Header of a report.json key (the key itself is the header cell's tooltip); other keys
# are shown with their underscores and slashes as spaces.
COLUMN_LABELS = {
    "accuracy": "greedy accuracy",
    "sampled_accuracy": "sampled accuracy (T=1)",
    "tool_call_rate": "tool-call rate",
    "sampled_tool_call_rate": "sampled tool-call rate",
    "trajectories": "test problems",
    "tool_calls_per_question": "tool calls per question",
    "well_formed_call_rate": "well-formed calls",
    "answer_rate": "answered",
    "turns/mean": "turns (mean)",
    "time_s": "seconds",
}
SOURCE_LABELS = {
    "rollouts": "training rollouts (trainer.rollout_data_dir)",
    "validation": "validation (trainer.validation_data_dir)",
}


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (JSON.parse rejects them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def embed_json(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``<``, ``>`` or ``&``)."""
    text = json.dumps(_finite(value), ensure_ascii=False, allow_nan=False, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _fmt(value: Any) -> str:
    """Shares and means with 3 decimals; counts and seconds (10 or more) shorter."""
    if not isinstance(value, float):
        return str(value)
    if abs(value) >= 10:
        return str(int(value)) if value.is_integer() else f"{value:.1f}"
    return f"{value:.3f}"


# What a grouping's groups mean, said under its table (the quickstart's phrasing split).
GROUPING_NOTES = {
    "phrasing": "In the quickstart, the direct phrasings are those on which the imperfect "
    "teacher mostly answered at once, without the tool (the model cannot know these answers); "
    "on the tool phrasings it called the tool. RL has to discover the tool on the first.",
}


def column_label(key: str) -> str:
    """The header of a report.json key (`COLUMN_LABELS`, else the key made readable)."""
    return COLUMN_LABELS.get(key, key.replace("_", " ").replace("/", " "))


def _th(key: str) -> str:
    return f'<th title="{html.escape(key)}">{html.escape(column_label(key))}</th>'


def _with_stderr(result: dict[str, Any], column: str) -> str:
    value = result.get(column)
    text = "-" if value is None else _fmt(value)
    stderr = result.get(f"{column}_stderr")
    if isinstance(stderr, int | float) and value is not None:
        text += f" ± {_fmt(float(stderr))}"
    return text


def evaluation_table(evaluation: dict[str, Any]) -> str:
    """report.json's evaluations as a table, then one table per grouping of the test set
    (`grouping_table`); empty when it holds none."""
    rows = {k: evaluation[k] for k in EVAL_LABELS if isinstance(evaluation.get(k), dict)}
    if not rows:
        return ""
    numeric = [
        key
        for result in rows.values()
        for key, value in result.items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and not key.endswith("_stderr")
    ]
    columns = [c for c in EVAL_COLUMNS if c in numeric]
    columns += [c for c in dict.fromkeys(numeric) if c not in columns]
    head = "".join(_th(c) for c in columns)
    body = []
    for key, result in rows.items():
        cells = "".join(f"<td>{html.escape(_with_stderr(result, c))}</td>" for c in columns)
        body.append(f'<tr data-eval="{html.escape(key)}"><td title="{html.escape(key)}">'
                    f"{html.escape(EVAL_LABELS[key])}</td>{cells}</tr>")  # fmt: skip
    split = "".join(grouping_table(g, r) for g, r in groupings(evaluation).items())
    return (
        '<section id="evaluation"><h2>Evaluation (held-out, report.json)</h2>'
        f'<div class="table-wrap"><table class="eval"><thead><tr><th>model</th>{head}</tr>'
        f"</thead><tbody>{''.join(body)}</tbody></table></div>"
        "<p>± is one standard error of the mean over the test problems.</p>"
        f"{split}</section>"
    )


def grouping_table(grouping: str, results: dict[str, dict[str, dict[str, float]]]) -> str:
    """Accuracy and tool-call rate per group of `grouping` (report.json's by_<grouping>),
    one column per evaluation (after SFT, after GRPO, control): the quickstart's phrasing
    split, before RL and after."""
    groups = list(dict.fromkeys(g for per_group in results.values() for g in per_group))
    metrics = [m for m in ("accuracy", "tool_call_rate")
               if any(m in r for per_group in results.values() for r in per_group.values())]
    top = "".join(f'<th colspan="{len(results)}">{html.escape(column_label(m))}</th>'
                  for m in metrics)  # fmt: skip
    sub = "".join(f"<th>{html.escape(EVAL_LABELS[name])}</th>" for _ in metrics for name in results)
    body = []
    for group in groups:
        cells = "".join(
            f"<td>{html.escape(_with_stderr(results[name].get(group, {}), m))}</td>"
            for m in metrics for name in results
        )
        body.append(f'<tr data-group="{html.escape(group)}"><td>'
                    f"{html.escape(group.replace('_', ' '))}</td>{cells}</tr>")  # fmt: skip
    return (
        f'<h3 id="by-{html.escape(grouping)}">By {html.escape(grouping.replace("_", " "))}</h3>'
        f'<div class="table-wrap"><table class="eval grouping" data-grouping="'
        f'{html.escape(grouping)}"><thead><tr><th rowspan="2">{html.escape(grouping)}</th>'
        f"{top}</tr><tr>{sub}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        + (f"<p>{html.escape(GROUPING_NOTES[grouping])}</p>" if grouping in GROUPING_NOTES else "")
    )


def targets_table(evaluation: dict[str, Any]) -> str:
    """report.json's stage targets (a quickstart's `targets`: agentrl/quickstart/targets.py),
    one row per stage: the target, what was measured, whether it was met and whether the
    miss stopped the run; empty without any."""
    targets = evaluation.get("targets")
    if not isinstance(targets, dict) or not targets:
        return ""
    body = []
    for stage, t in targets.items():
        if not isinstance(t, dict):
            continue
        met = t.get("target_met")
        verdict = "met" if met else ("missed: the run stopped here" if t.get("stopped_run")
                                     else "missed: went on as asked")  # fmt: skip
        body.append(
            f'<tr data-stage="{html.escape(str(stage))}" data-met="{str(bool(met)).lower()}">'
            f"<td>{html.escape(str(stage))}</td><td>{html.escape(str(t.get('target', '')))}</td>"
            f"<td>{html.escape(str(t.get('measured', '')))}</td>"
            f'<td class="{"met" if met else "missed"}">{html.escape(verdict)}</td></tr>'
        )
    return ('<section id="targets"><h2>Stage targets (report.json)</h2><div class="table-wrap">'
            '<table class="eval targets"><thead><tr><th>stage</th><th>target</th>'
            "<th>measured</th><th>met</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div></section>")


def settings_section(evaluation: dict[str, Any]) -> str:
    """report.json's settings (a quickstart's), folded; empty without any."""
    settings = evaluation.get("settings")
    if not isinstance(settings, dict) or not settings:
        return ""
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v))}</td></tr>"
        for k, v in settings.items()
    )
    return ('<details id="settings"><summary>Settings (report.json)</summary>'
            f'<div class="table-wrap"><table class="kv">{rows}</table></div></details>')


def _plots_section(plots: list[Plot], has_metrics: bool) -> str:
    figures = "".join(
        f'<figure class="plot" id="plot-{html.escape(p.name)}" '
        f'data-points="{html.escape(json.dumps(p.points))}">'
        f'<img alt="{html.escape(p.title)}" src="data:image/png;base64,{p.png}">'
        f"<figcaption><b>{html.escape(p.title)}</b>: {html.escape(p.caption)}</figcaption>"
        "</figure>"
        for p in plots
    )
    if not plots:
        reason = "" if has_metrics else ": the run has no metrics yet"
        figures = f'<p class="empty">nothing to plot{reason}</p>'
    return f'<section id="plots"><h2>Training</h2><div class="plots">{figures}</div></section>'


def _viewer_section(
    sources: dict[str, list[dict[str, Any]]], empty_note: str, truncated: str | None
) -> str:
    if not sources:
        return (
            '<section id="viewer"><h2>Trajectories</h2>'
            f'<p class="empty">{html.escape(empty_note)}</p></section>'
        )
    return (
        '<section id="viewer"><h2>Trajectories</h2>'
        + (f'<p class="truncated" id="viewer-truncated">{html.escape(truncated)}</p>'
           if truncated else "")
        + '<div class="filters">'
        '<label>source <select id="f-source"></select></label>'
        '<label>step <select id="f-step"></select></label>'
        '<label>outcome <select id="f-outcome"><option value="all">all</option>'
        '<option value="correct">correct</option><option value="wrong">wrong</option>'
        "</select></label>"
        '<label>reward from <input id="f-min" type="number" step="any"></label>'
        '<label>to <input id="f-max" type="number" step="any"></label>'
        '<label>order <select id="f-order"><option value="dumped">as dumped</option>'
        '<option value="gap">largest train/inference gap first</option></select></label>'
        '<span id="f-count"></span></div>'
        '<div class="viewer"><ol id="traj-list"></ol><div id="traj-detail"></div></div>'
        "</section>"
    )


def alerts_section(metrics: list[dict[str, Any]]) -> str:
    """The steps where behaviour alerts fired (``alerts/<rule>`` = 1 in metrics.jsonl), as a
    table of rule -> steps; empty when none fired."""
    fired: dict[str, list[int]] = {}
    for row in metrics:
        for key, value in row.items():
            if key.startswith("alerts/") and key != "alerts/active" and value == 1.0:
                fired.setdefault(key[len("alerts/"):], []).append(int(row["step"]))
    if not fired:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(rule)}</td><td>{len(steps)}</td>"
        f"<td>{html.escape(', '.join(map(str, steps)))}</td></tr>"
        for rule, steps in sorted(fired.items())
    )
    return ('<section id="alerts"><h2>Behaviour alerts</h2><div class="table-wrap"><table '
            f'class="eval"><tr><th>rule</th><th>steps</th><th>at</th></tr>{rows}</table></div>'
            "<p>See trainer.alerts in docs/trainer.md for what each rule watches.</p></section>")


def _summary(run: RunInputs) -> str:
    steps = [row["step"] for row in run.metrics]
    parts = [f"{len(steps)} logged steps" + (f" ({steps[0]}..{steps[-1]})" if steps else "")]
    if run.checkpoints:
        parts.append("checkpoints: " + ", ".join(f"global_step_{s}" for s in run.checkpoints))
    if run.train_dir != run.root:
        parts.append(f"training run: {run.train_dir}")
    return html.escape("; ".join(parts))


def render_page(
    run: RunInputs,
    plots: list[Plot],
    sources: dict[str, list[dict[str, Any]]],
    notes: list[str],
    empty_viewer_note: str = "",
    timeline: str = "",
    truncated: str | None = None,
) -> str:
    """The whole report.html (see the module docstring); `timeline` is the timeline
    section's HTML (`timeline.timeline_section`), none when empty; `truncated` the one
    line saying what the viewer left out (`trajectories.truncation_line`)."""
    data = {
        "order": list(sources),
        "sources": {
            name: {"label": SOURCE_LABELS.get(name, f"{name}.jsonl"), "records": records}
            for name, records in sources.items()
        },
    }
    notes_html = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    generated = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>agentrl report: {html.escape(run.root.name)}</title>"
        f"<style>{CSS}</style></head><body>"
        f'<header><h1>agentrl report</h1><p class="run">{html.escape(str(run.root))}</p>'
        f"<p>{_summary(run)}; generated {generated}</p>{settings_section(run.evaluation)}"
        "</header>"
        + (f'<ul class="notes" id="notes">{notes_html}</ul>' if notes else "")
        + targets_table(run.evaluation)
        + evaluation_table(run.evaluation)
        + alerts_section(run.metrics)
        + _plots_section(plots, bool(run.metrics))
        + timeline
        + _viewer_section(sources, empty_viewer_note, truncated)
        + f'<script type="application/json" id="report-data">{embed_json(data)}</script>'
        + f"<script>{JS}</script></body></html>\n"
    )
