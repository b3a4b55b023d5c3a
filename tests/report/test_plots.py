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


def test_the_canary_is_drawn_beside_the_train_inference_gap():
    rows = [{"step": s, "rollout/canary/logprob_gap_max": 1e-6 * s,
             "rollout/canary/threshold": 0.02} for s in (1, 2, 3)]  # fmt: skip
    [plot] = training_plots(rows, {})
    assert plot.name == "logprob_gap" and plot.points == {
        "canary after each weight sync: rollout/canary/logprob_gap_max": 3,
        "canary after each weight sync: rollout/canary/threshold": 3,
    }
    assert "threshold past which a server is drained" in plot.caption


def test_report_json_evaluations_alone_make_an_accuracy_plot_and_a_stage_plot(synthetic):
    report = synthetic.quickstart_report()
    assert [p.name for p in training_plots([], report)] == ["accuracy"]
    (stages,) = stage_plots(report)
    assert stages.name == "stages"
    assert _pixels(stages.png).shape[0] == int(round(100 * (0.6 + 0.35 * 6)))  # 6 stages
    assert stage_plots({}) == [] and stage_plots({"timing_s": {"total": 3.0}}) == []


def test_one_quantity_per_y_axis_two_quantities_are_two_panels(synthetic):
    import inspect

    import agentrl.report.plots as plots_module

    assert "twinx" not in inspect.getsource(plots_module)  # no second y axis anywhere
    plots = {p.name: p for p in training_plots(synthetic.metrics_rows(), {})}
    assert plots["tool_calls"].points == {
        "share with a tool call: rollout/tool_call_rate": 3,
        "tool calls per trajectory: calls per trajectory": 3,
    }
    assert plots["clip_kl"].points == {
        "clip fraction: actor/pg_clipfrac": 3, "KL: actor/ppo_kl": 3,
    }


def test_a_binary_reward_has_no_0_to_1_band_and_equal_lines_are_drawn_once(synthetic):
    rows = synthetic.metrics_rows()  # min 0, max 1 at every step; rewards == score
    (reward,) = [p for p in training_plots(rows, {}) if p.name == "reward"]
    assert reward.points == {
        "reward per trajectory (training batch): critic/score/mean (= critic/rewards/mean)": 3
    }
    assert "min..max is 0..1 at every step (not drawn)" in reward.caption
    rows[1]["critic/rewards/mean"] = 0.05  # a KL penalty: two lines
    rows[2]["critic/score/min"] = 0.5  # a band that says something
    (reward,) = [p for p in training_plots(rows, {}) if p.name == "reward"]
    assert len(reward.points) == 2 and "the band is its min..max" in reward.caption


def test_sft_loss_skill_check_and_phrasing_plots_come_from_report_json(synthetic):
    from agentrl.report.plots import report_plots, story_plots

    report = synthetic.quickstart_report()
    assert [p.name for p in story_plots(report)] == ["sft_loss", "sft_check", "phrasing"]
    assert [p.name for p in report_plots([], report)] == [
        "sft_loss", "sft_check", "accuracy", "phrasing", "stages"]
    check = story_plots(report)[1]
    assert check.points["SFT skill check (held-out): SFT stopped (300)"] == 2
    assert "passed at step 200" in check.caption
    assert story_plots({"sft": {"steps": 3}}) == []  # no curves recorded: no plots
