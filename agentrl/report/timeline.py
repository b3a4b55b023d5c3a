"""One step's timeline on the report page, drawn from the run's trace files.

    html_text = timeline_section(run.train_dir)     # "" when the run wrote no trace

`trainer.trace` writes ``trace/step_N.json`` in the run directory (a Chrome / Perfetto
trace: agentrl/trainer/tracing.py). The page shows the last step's as an inline SVG: one row
per track in the trace's order (the trainer's stages, each worker, then the rollout
requests; at most `MAX_ROWS`, the rest counted), one bar per span, a span inside another on
the same row drawn as a thinner bar inside its parent. Hovering a bar shows its name,
duration and arguments (an SVG ``<title>``). The file itself opens in ui.perfetto.dev for
everything else (zoom, search, the other steps).
"""

from __future__ import annotations

import html
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MAX_ROWS = 48
ROW_H, LABEL_W, PLOT_W, AXIS_H = 16, 260, 900, 22
NEST_INSET = 3  # pixels a nested span's bar is inset from its parent's, top and bottom
# bar colours of the names a trace holds; any other name gets one of PALETTE by its hash
COLOURS = {
    "step": "#d9d9d9", "gen": "#9ecae1", "reward": "#fdae6b", "old_log_prob": "#a1d99b",
    "ref": "#74c476", "values": "#c7e9c0", "adv": "#bcbddc", "update_actor": "#fb6a4a",
    "update_critic": "#fc9272", "weight_sync": "#e377c2", "wait_for_rollouts": "#c7c7c7",
    "testing": "#dadaeb", "save_checkpoint": "#969696", "request": "#eeeeee",
    "PENDING": "#fdd0a2", "RUNNING": "#c6dbef", "TOOL_CALLING": "#fee391",
    "INTERACTING": "#d9f0a3", "end_plugins": "#d9d9d9", "generate": "#3182bd",
    "tool": "#e6550d", "update_policy": "#fb6a4a",
}  # fmt: skip
PALETTE = ("#8c564b", "#17becf", "#bcbd22", "#7f7f7f", "#9467bd", "#2ca02c")


@dataclass
class TimelineSpan:
    name: str
    ts: float  # microseconds
    dur: float
    args: dict[str, Any]
    depth: int = 0


def trace_files(train_dir: Path) -> list[Path]:
    """The run's ``trace/step_N.json`` files, in step order."""
    def step(path: Path) -> int:
        match = re.fullmatch(r"step_(\d+)", path.stem)
        return int(match.group(1)) if match else -1

    files = [p for p in (train_dir / "trace").glob("step_*.json") if step(p) >= 0]
    return sorted(files, key=step)


def read_tracks(trace: dict[str, Any]) -> list[tuple[str, list[TimelineSpan]]]:
    """``(row label, its spans with their nesting depth)`` per track of a Chrome trace, in
    the trace's track order; the label is the process and the track names."""
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace: no traceEvents list")
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    rows: dict[tuple[Any, Any], list[TimelineSpan]] = {}
    for event in events:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event.get("pid")] = str(event.get("args", {}).get("name", ""))
        elif event.get("ph") == "M" and event.get("name") == "thread_name":
            threads[(event.get("pid"), event.get("tid"))] = str(event["args"].get("name", ""))
        elif event.get("ph") == "X":
            rows.setdefault((event.get("pid"), event.get("tid")), []).append(TimelineSpan(
                str(event.get("name", "")), float(event["ts"]), float(event.get("dur", 0)),
                dict(event.get("args") or {})))  # fmt: skip
    order = {key: i for i, key in enumerate(threads)}
    labelled = []
    for key in sorted(rows, key=lambda k: (order.get(k, len(order)), str(k))):
        spans = sorted(rows[key], key=lambda s: (s.ts, -s.dur))
        stack: list[TimelineSpan] = []
        for span in spans:
            while stack and span.ts >= stack[-1].ts + stack[-1].dur:
                stack.pop()
            span.depth = len(stack)
            stack.append(span)
        process = processes.get(key[0], f"pid {key[0]}").split(" (pid")[0]
        labelled.append((f"{process} / {threads.get(key, key[1])}", spans))
    return labelled


def _colour(name: str) -> str:
    if name in COLOURS:
        return COLOURS[name]
    return PALETTE[sum(map(ord, name)) % len(PALETTE)]


def _tooltip(span: TimelineSpan) -> str:
    args = ", ".join(f"{k}={v}" for k, v in span.args.items() if v is not None)
    return f"{span.name}: {span.dur / 1000:.1f} ms" + (f" ({args})" if args else "")


def _tick_step(total_s: float) -> float:
    """The smallest of 1, 2, 5 x 10^k seconds giving at most 10 ticks over ``total_s``."""
    for exponent in range(-3, 6):
        for mantissa in (1, 2, 5):
            step = mantissa * 10.0**exponent
            if total_s / step <= 10:
                return step
    return total_s


def timeline_svg(tracks: list[tuple[str, list[TimelineSpan]]]) -> str:
    """The SVG of `read_tracks`' rows (the first `MAX_ROWS`)."""
    shown = tracks[:MAX_ROWS]
    spans = [s for _, row in shown for s in row]
    start = min(s.ts for s in spans)
    total = max(max(s.ts + s.dur for s in spans) - start, 1.0)
    scale = PLOT_W / total
    height = AXIS_H + ROW_H * len(shown)
    parts = [f'<svg class="timeline" width="{LABEL_W + PLOT_W}" height="{height}"'
             ' font-family="sans-serif" font-size="10">']  # inline: no namespace needed
    tick = _tick_step(total / 1e6)
    for i in range(int(total / 1e6 / tick) + 1):
        x = LABEL_W + i * tick * 1e6 * scale
        parts.append(f'<line x1="{x:.1f}" y1="{AXIS_H - 4}" x2="{x:.1f}" y2="{height}" '
                     f'stroke="#eee"/><text x="{x + 2:.1f}" y="{AXIS_H - 8}" fill="#666">'
                     f"{i * tick:g} s</text>")  # fmt: skip
    for row, (label, row_spans) in enumerate(shown):
        y = AXIS_H + row * ROW_H
        parts.append(f'<text x="2" y="{y + ROW_H - 4}" fill="#333">'
                     f"{html.escape(label[:48])}<title>{html.escape(label)}</title></text>")
        for span in row_spans:
            inset = min(span.depth * NEST_INSET, ROW_H // 2 - 2)
            x = LABEL_W + (span.ts - start) * scale
            parts.append(
                f'<rect x="{x:.2f}" y="{y + inset + 1}" width="{max(span.dur * scale, 0.5):.2f}"'
                f' height="{ROW_H - 2 * inset - 2}" fill="{_colour(span.name)}"'
                f' data-name="{html.escape(span.name)}">'
                f"<title>{html.escape(_tooltip(span))}</title></rect>"
            )
    parts.append("</svg>")
    return "".join(parts)


def timeline_section(train_dir: Path) -> str:
    """The report's timeline section: the last traced step of the run in `train_dir`; ""
    when there is no trace file, a note when the last one cannot be read."""
    files = trace_files(train_dir)
    if not files:
        return ""
    path = files[-1]
    head = f'<section id="timeline"><h2>Timeline of one step ({html.escape(path.stem)})</h2>'
    try:
        tracks = read_tracks(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as err:
        logger.warning("%s: no timeline drawn (%s)", path, err)
        return f'{head}<p class="empty">{html.escape(f"{path} cannot be read: {err}")}</p></section>'
    if not any(spans for _, spans in tracks):
        return f'{head}<p class="empty">{html.escape(str(path))} holds no spans</p></section>'
    more = len(tracks) - MAX_ROWS
    note = f" The {more} further tracks are in the file." if more > 0 else ""
    return (
        f'{head}<div class="timeline">{timeline_svg(tracks)}</div>'
        f"<p>{html.escape(str(path))}: open it in ui.perfetto.dev to zoom and search.{note} "
        f"{len(files)} steps traced (trainer.trace).</p></section>"
    )
