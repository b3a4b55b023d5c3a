"""Plots: each is drawn exactly when its metrics were logged, as a decodable PNG."""

from __future__ import annotations

import base64
import io

import matplotlib.image
import numpy as np

from agentrl.report.plots import stage_plots, training_plots


def _pixels(png: str) -> np.ndarray:
    return matplotlib.image.imread(io.BytesIO(base64.b64decode(png)), format="png")


def test_every_plot_of_the_logged_metrics_and_only_those(synthetic):
    rows = synthetic.metrics_rows()
    plots = training_plots(rows, {})
    assert [p.name for p in plots] == synthetic.EXPECTED_PLOTS
    image = _pixels(plots[0].png)
    assert image.shape[:2] == (360, 640)  # 6.4 x 3.6 in at 100 dpi
    assert (image[..., :3] < 0.9).any(axis=-1).mean() > 0.02  # lines and text, not blank

    reward_only = [{"step": s, "critic/score/mean": 0.5} for s in (1, 2)]
    assert [p.name for p in training_plots(reward_only, {})] == ["reward"]
    assert training_plots([], {}) == []
    # null (non-finite) values are skipped, not plotted
    assert training_plots([{"step": 1, "actor/entropy": None}], {}) == []


def test_kl_and_tool_calls_per_trajectory_plots_need_only_their_own_keys():
    rows = [{"step": 1, "actor/kl_loss": 0.01}, {"step": 2, "actor/kl_loss": 0.02}]
    assert [p.name for p in training_plots(rows, {})] == ["clip_kl"]
    rows = [{"step": 1, "rollout/tool_calls": 3.0, "rollout/requests": 4.0}]
    assert [p.name for p in training_plots(rows, {})] == ["tool_calls"]


def test_report_json_evaluations_alone_make_an_accuracy_plot_and_a_stage_plot(synthetic):
    report = synthetic.quickstart_report()
    assert [p.name for p in training_plots([], report)] == ["accuracy"]
    (stages,) = stage_plots(report)
    assert stages.name == "stages"
    assert _pixels(stages.png).shape[0] == int(round(100 * (0.6 + 0.35 * 6)))  # 6 stages
    assert stage_plots({}) == [] and stage_plots({"timing_s": {"total": 3.0}}) == []
