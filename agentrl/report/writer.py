"""write_report: a run directory -> RUN_DIR/report.html.

    from agentrl.report import write_report
    path = write_report("outputs/smoke")     # RUN_DIR/report.html

Reads the run (agentrl/report/run_dir.py), draws the plots of what was logged
(plots.py) and the last traced step's timeline (timeline.py, with trainer.trace), turns the rollout dumps and evaluation rollouts into viewer records
(trajectories.py) and writes the page (page.py). A run stopped mid-way gets a report of
what it has; what is missing is said on the page and in the log.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agentrl.report.page import render_page
from agentrl.report.plots import report_plots
from agentrl.report.run_dir import NO_DUMPS_HINT, load_run
from agentrl.report.timeline import timeline_section
from agentrl.report.trajectories import (
    load_decoder,
    load_source,
    needs_decoder,
    truncation_line,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_PER_STEP = 16


def write_report(run_dir: str | Path, max_per_step: int = DEFAULT_MAX_PER_STEP) -> Path:
    """Write and return ``run_dir/report.html``; at most ``max_per_step`` trajectories of
    each step and source go into the viewer. Raises ReportError when ``run_dir`` is not a
    run directory (the message lists what was looked for)."""
    if max_per_step < 1:
        raise ValueError(f"max_per_step must be at least 1, got {max_per_step}")
    run = load_run(run_dir)
    notes = list(run.notes)
    plots = report_plots(run.metrics, run.evaluation)
    decode = None
    if any(needs_decoder(files) for files in run.sources.values()):
        decode = load_decoder(run.config)
    sources: dict[str, list[dict[str, Any]]] = {}
    counts: dict[str, tuple[int, int]] = {}
    for name, files in run.sources.items():
        records, total = load_source(name, files, max_per_step, decode)
        if records:
            sources[name] = records
        counts[name] = (len(records), total)
    truncated = truncation_line(counts, max_per_step)
    empty = f"no rollout dumps found in {run.train_dir}: {NO_DUMPS_HINT}"
    page = render_page(run, plots, sources, notes, empty_viewer_note=empty,
                       timeline=timeline_section(run.train_dir), truncated=truncated)  # fmt: skip
    path = run.root / "report.html"
    path.write_text(page, encoding="utf-8")
    logger.info(
        "wrote %s: %d plots, %d trajectories from %s",
        path, len(plots), sum(len(r) for r in sources.values()), ", ".join(sources) or "no dumps",
    )  # fmt: skip
    return path
