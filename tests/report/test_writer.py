"""write_report end to end on synthetic runs: plots, embedded trajectories, inert model
output, no dumps, a run with no metrics yet, and the quickstart layout."""

from __future__ import annotations

import html
import json
import logging
import re

import pytest

from agentrl.report import ReportError, write_report


def _data(page: str) -> dict:
    match = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S
    )
    return json.loads(match.group(1))


def _plot_names(page: str) -> list[str]:
    return re.findall(r'<figure class="plot" id="plot-(\w+)" data-points="[^"]*"><img ', page)


def _points(page: str, plot: str) -> dict[str, int]:
    match = re.search(f'id="plot-{plot}" data-points="([^"]*)"', page)
    return json.loads(html.unescape(match.group(1)))


def test_report_of_a_training_run(train_run, synthetic):
    path = write_report(train_run)
    assert path == train_run.resolve() / "report.html"
    page = path.read_text(encoding="utf-8")
    assert page.count("<img") == len(synthetic.EXPECTED_PLOTS)
    assert _plot_names(page) == synthetic.EXPECTED_PLOTS
    assert page.count('src="data:image/png;base64,') == len(synthetic.EXPECTED_PLOTS)
    assert "http://" not in page and "https://" not in page  # opens offline
    data = _data(page)
    assert data["order"] == ["rollouts"]
    records = data["sources"]["rollouts"]["records"]
    assert [(r["step"], r["id"]) for r in records] == [
        (step, f"{step}-{k}") for step in (1, 2, 3) for k in range(4)
    ]
    assert records[0]["tokens"] == synthetic.TOKENS and records[0]["mask"] == synthetic.MASK
    assert [r["correct"] for r in records[:4]] == [False, True, False, True]
    assert "3 logged steps" not in page and "4 logged steps (0..3)" in page
    assert "global_step_3" in page
    assert 'id="notes"' not in page  # nothing missing
    assert 'id="viewer-truncated"' not in page  # nothing cut


def test_model_output_with_markup_stays_inert(tmp_path, synthetic):
    row = synthetic.dump_row(1, 0, 1.0, answer="</script><script>alert('x')</script><b>")
    row["response_tokens"][0] = "<img src=x onerror=alert(1)>"
    synthetic.write_jsonl(tmp_path / "rollouts" / "1.jsonl", [row])
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the data and the viewer
    assert "alert" not in page.split('id="report-data">')[0]
    assert "<img" not in page  # no plots (no metrics), and the token's markup is data
    records = _data(page)["sources"]["rollouts"]["records"]
    assert (
        records[0]["messages"][-1]["content"]
        == "<answer></script><script>alert('x')</script><b></answer>"
    )
    assert records[0]["tokens"][0] == "<img src=x onerror=alert(1)>"


def test_a_run_without_dumps_still_gets_plots_and_says_how_to_get_trajectories(
    tmp_path, synthetic, caplog
):
    synthetic.write_jsonl(tmp_path / "metrics.jsonl", synthetic.metrics_rows())
    with caplog.at_level(logging.WARNING):
        page = write_report(tmp_path).read_text(encoding="utf-8")
    assert page.count("<img") == len(synthetic.EXPECTED_PLOTS)
    hint = "set trainer.rollout_data_dir to see trajectories"
    assert page.count(hint) == 2  # in the notes and in the viewer's place
    assert "no rollout dumps found in" in caplog.text and hint in caplog.text
    assert _data(page) == {"order": [], "sources": {}}
    assert 'id="f-source"' not in page


def test_a_run_stopped_before_its_first_log(tmp_path, synthetic):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "critic/sco')  # killed mid-write
    synthetic.write_jsonl(tmp_path / "rollouts" / "1.jsonl", [synthetic.dump_row(1, 0, 1.0)])
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "holds no complete step yet: no training curves" in page
    assert "nothing to plot: the run has no metrics yet" in page
    assert len(_data(page)["sources"]["rollouts"]["records"]) == 1


def test_quickstart_layout_shows_evaluations_stages_and_eval_rollouts(quickstart_dir, synthetic):
    page = write_report(quickstart_dir).read_text(encoding="utf-8")
    assert "0.531 ± 0.062" in page and "0.625 ± 0.060" in page and "0.094 ± 0.036" in page
    assert _plot_names(page) == synthetic.QUICKSTART_PLOTS
    # the phrasing split before (after SFT) and after RL, as a table too
    direct = re.search(r'<tr data-group="direct_phrasings">(.*?)</tr>', page).group(1)
    assert re.findall(r"<td>([^<]*)</td>", direct) == [
        "direct phrasings", "0.100 ± 0.050", "0.700 ± 0.060", "0.200", "0.900"]
    # the SFT stage: its loss over steps and the skill check with its threshold
    assert _points(page, "sft_loss")["SFT training loss: training loss"] == 3
    check = _points(page, "sft_check")
    assert check["SFT skill check (held-out): turns reproduced"] == 2
    assert "SFT skill check (held-out): threshold 0.8" in check
    assert 'id="settings"' in page and "<th>val_rows</th><td>64</td>" in page
    data = _data(page)
    assert data["order"] == ["rollouts", "eval_sft"]
    assert data["sources"]["eval_sft"]["label"] == "eval_sft.jsonl"
    assert [r["id"] for r in data["sources"]["eval_sft"]["records"]] == ["0/0", "1/0", "2/0"]
    assert f"training run: {quickstart_dir.resolve() / 'rl'}" in page


def test_the_viewer_cap_is_one_line_in_the_viewer(quickstart_dir, synthetic):
    synthetic.write_jsonl(quickstart_dir / "rl" / "rollouts" / "2.jsonl",
                          [synthetic.dump_row(2, k, 1.0) for k in range(3)])  # fmt: skip
    page = write_report(quickstart_dir, max_per_step=1).read_text(encoding="utf-8")
    assert len(_data(page)["sources"]["rollouts"]["records"]) == 2
    line = re.findall(r'<p class="truncated" id="viewer-truncated">([^<]*)</p>', page)
    assert line == ["The viewer shows the first 1 trajectories of each step and source "
                    "(rollouts 2 of 5, eval_sft 1 of 3); agentrl report RUN_DIR --max-per-step "
                    "N shows more."]  # fmt: skip
    assert page.count("--max-per-step") == 1 and 'id="notes"' not in page
    with pytest.raises(ValueError, match="max_per_step"):
        write_report(quickstart_dir, max_per_step=0)


def test_validation_during_rl_is_a_curve_between_the_full_evaluations(quickstart_dir, synthetic):
    rows = synthetic.metrics_rows(4)
    for row, value in zip(rows, (0.2, 0.3, 0.45, 0.5, 0.6), strict=True):
        row["val-core/agentrl/arithmetic/acc/mean@1"] = value
        row["val-aux/rollout/tool_call_rate"] = value + 0.2
    synthetic.write_jsonl(quickstart_dir / "rl" / "metrics.jsonl", rows)
    page = write_report(quickstart_dir).read_text(encoding="utf-8")
    points = _points(page, "accuracy")
    assert points["held-out accuracy: validation (64 test problems)"] == 5
    assert points["held-out tool-call rate: validation (64 test problems)"] == 5
    assert "held-out accuracy: after SFT (full test set)" in points
    assert "held-out accuracy: after GRPO (full test set)" in points


def test_not_a_run_is_a_report_error(tmp_path):
    with pytest.raises(ReportError, match="not an agentrl run directory"):
        write_report(tmp_path)
    assert not (tmp_path / "report.html").exists()
