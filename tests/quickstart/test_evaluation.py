"""Quickstart evaluation: metrics of generate rows with standard errors, the split by
phrasing, and the console table."""

from __future__ import annotations

import math

import pytest

from agentrl.quickstart.evaluation import (
    group_metrics,
    mean_stderr,
    stderr,
    summary_table,
    trajectory_metrics,
)


def row(calls: int, score: float, final: str, tool_errors=None, parse_errors=0, index=0) -> dict:
    return {
        "index": index,
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": final}],
        "metrics": {
            "tool_calls": {"calculator": calls} if calls else {},
            "tool_errors": tool_errors or {},
            "parse_errors": parse_errors,
        },
        "score": score,
        "num_turns": 2 + 2 * calls,
    }


def test_the_mean_stderr_is_the_binomial_one_for_0_1_scores_and_smaller_for_graded():
    assert mean_stderr([1.0, 0.0] * 50) == pytest.approx(stderr(0.5, 100))
    assert mean_stderr([1.0, 0.0, 0.0, 1.0, 1.0]) == pytest.approx(stderr(0.6, 5))
    graded = [0.4, 0.6] * 50  # mean 0.5, variance 0.01
    assert mean_stderr(graded) == pytest.approx(0.01) and stderr(0.5, 100) == 0.05
    assert mean_stderr([0.2] * 9) == pytest.approx(0.0, abs=1e-12) and math.isnan(mean_stderr([]))


def test_stderr_is_the_binomial_one():
    assert stderr(0.5, 100) == pytest.approx(0.05)
    assert stderr(0.0, 10) == 0.0 and stderr(1.0, 10) == 0.0
    assert math.isnan(stderr(0.5, 0))


def test_trajectory_metrics():
    rows = [
        row(1, 1.0, "<answer>12</answer>"),
        row(1, 0.0, "<answer>13</answer>", tool_errors={"syntax": 1}),
        row(0, 0.0, "I don't know", parse_errors=1),
        row(2, 0.0, "no tag"),
    ]
    assert trajectory_metrics(rows) == {
        "trajectories": 4.0,
        "accuracy": 0.25,
        "accuracy_stderr": pytest.approx(math.sqrt(0.25 * 0.75 / 4)),
        "tool_call_rate": 0.75,
        "tool_calls_per_question": 1.0,
        "well_formed_call_rate": 0.5,
        "answer_rate": 0.5,
        "turns/mean": (4 + 4 + 2 + 6) / 4,
    }
    with pytest.raises(ValueError, match="no trajectories"):
        trajectory_metrics([])


def test_group_metrics_per_label_of_the_dataset_rows():
    labels = ["direct", "tool", "direct", "tool"]
    rows = [
        row(0, 0.0, "<answer>1</answer>", index=0),
        row(1, 1.0, "<answer>2</answer>", index=1),
        row(1, 1.0, "<answer>3</answer>", index=2),
        row(1, 0.0, "<answer>4</answer>", index=3),
    ]
    half = pytest.approx(math.sqrt(0.25 / 2))
    assert group_metrics(rows, labels) == {
        "direct": {"accuracy": 0.5, "accuracy_stderr": half, "tool_call_rate": 0.5},
        "tool": {"accuracy": 0.5, "accuracy_stderr": half, "tool_call_rate": 1.0},
    }
    assert trajectory_metrics(rows, tool="search")["tool_call_rate"] == 0.0  # other tool


def test_summary_table_has_every_model_with_errors_and_every_stage():
    def evaluation(acc: float) -> dict:
        return {
            "accuracy": acc,
            "accuracy_stderr": 0.03,
            "sampled_accuracy": acc - 0.1,
            "sampled_accuracy_stderr": 0.02,
            "tool_call_rate": acc,
        }

    report = {
        "eval_sft": evaluation(0.3),
        "eval_rl": evaluation(0.9),
        "control": evaluation(0.35),
        "timing_s": {"sft": 80.4, "rl": 60.0, "total": 230.2},
    }
    lines = summary_table(report).splitlines()
    assert lines[1].split() == ["after", "SFT", "0.300", "±", "0.030", "0.200", "±", "0.020", "0.30"]
    assert lines[2].startswith("after GRPO") and "0.900 ± 0.030" in lines[2]
    assert lines[3].startswith("SFT-only control") and "0.350 ± 0.030" in lines[3]
    assert lines[4] == "seconds: sft 80 | rl 60 | total 230"
    del report["control"]  # a run without the control has no control row
    assert "control" not in summary_table(report)
    # a task without a tool (the game) has no tool-call rate column
    no_tool = summary_table(report, tool_column=False).splitlines()
    assert "tool-call" not in no_tool[0]
    assert no_tool[1].split() == ["after", "SFT", "0.300", "±", "0.030", "0.200", "±", "0.020"]
