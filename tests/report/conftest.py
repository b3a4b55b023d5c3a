"""Synthetic run directories for the report tests, in the trainer's file formats: a
metrics.jsonl of the file tracking backend, a saved config.yaml, and rollout dumps with the
row format of `PPOTrainer._dump` (a calculator call, its response, an answer).

The helpers reach the tests through the `synthetic` fixture (tests are not a package)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

# The tokens of one response: a calculator call (trained), the tool turn (not trained),
# the answer (trained).
TOKENS = [
    "<tool_call>", '\n{"name": "calculator", ', '"arguments": {"expression": "12*3"}}',
    "\n</tool_call>", "<|im_end|>", "\n<|im_start|>tool\n", "36",
    "<|im_end|>\n<|im_start|>assistant\n", "<answer>", "36", "</answer>", "<|im_end|>",
]  # fmt: skip
MASK = [1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1]
EXPECTED_PLOTS = [
    "accuracy",
    "reward",
    "tool_calls",
    "length_turns",
    "entropy",
    "clip_kl",
    "logprob_gap",
    "timing",
]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def dump_row(
    step: int, k: int, acc: float, expression: str = "12*3", answer: str = "36"
) -> dict[str, Any]:
    """One trajectory as `PPOTrainer._dump` writes it."""
    call = {
        "id": "call_1_0",
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": expression}},
    }
    messages = [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": f"What is {expression}?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "calculator", "content": "36", "tool_call_id": "call_1_0"},
        {"role": "assistant", "content": f"<answer>{answer}</answer>"},
    ]
    return {
        "acc": acc,
        "step": step,
        "uid": f"{step}-{k}",
        "input": f"Use the calculator. What is {expression}?",
        "output": f"<tool_call>{expression}</tool_call> 36 <answer>{answer}</answer>",
        "score": acc + 0.05,
        "request_state": "completed",
        "prompt_ids": [1, 2, 3],
        "response_ids": list(range(100, 100 + len(TOKENS))),
        "loss_mask": list(MASK),
        "response_tokens": list(TOKENS),
        "messages": messages,
        "num_turns": 4,
        "tool_calls": {"calculator": 1},
        "finish_reason": "stop",
        "logprob_gap_max": round(0.01 * (k + 1) * step, 4),
    }


def metrics_rows(steps: int = 3) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"step": 0, "val-core/agentrl/arithmetic/acc/mean@1": 0.25}]
    for step in range(1, steps + 1):
        rows.append({
            "step": step,
            "critic/score/mean": 0.1 * step, "critic/score/min": 0.0, "critic/score/max": 1.0,
            "critic/rewards/mean": 0.1 * step,
            "rollout/tool_call_rate": 0.5, "rollout/tool_calls": 6.0, "rollout/requests": 8.0,
            "response_length/mean": 30.0 + step, "num_turns/mean": 3.0,
            "rollout/assistant_turns/mean": 1.5,
            "actor/entropy": 2.0 - 0.1 * step, "actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.001,
            "timing_s/gen": 1.5, "timing_s/update_actor": 0.5, "timing_s/step": 2.1,
            "training/rollout_log_probs_diff_p50": 0.001 * step,
            "training/rollout_log_probs_diff_p99": 0.01 * step,
            "training/rollout_log_probs_diff_max": 0.04 * step,
        })  # fmt: skip
    rows[-1]["val-core/agentrl/arithmetic/acc/mean@1"] = 0.5
    return rows


@pytest.fixture
def train_run(tmp_path: Path) -> Path:
    """A 3-step training run: metrics, config.yaml naming a dump dir outside the run
    directory, and 4 trajectories per step (2 correct, 2 wrong)."""
    run = tmp_path / "run"
    dumps = tmp_path / "elsewhere" / "dumps"
    write_jsonl(run / "metrics.jsonl", metrics_rows())
    (run / "config.yaml").write_text(yaml.safe_dump({
        "trainer": {"rollout_data_dir": str(dumps), "validation_data_dir": None},
        "actor_rollout_ref": {"model": {"path": str(tmp_path / "no_model")}},
    }))  # fmt: skip
    for step in (1, 2, 3):
        rows = [dump_row(step, k, acc=float(k % 2)) for k in range(4)]
        write_jsonl(dumps / f"{step}.jsonl", rows)
    (run / "global_step_3").mkdir()
    return run


# The plots of a quickstart report (quickstart_dir): the story, then the RL curves.
QUICKSTART_PLOTS = ["sft_loss", "sft_check", "accuracy", "phrasing",
                    *EXPECTED_PLOTS[1:], "stages"]  # fmt: skip


def quickstart_report() -> dict[str, Any]:
    return {
        "settings": {"seed": 0, "steps": 2, "val_freq": 1, "val_rows": 64},
        "timing_s": {"model": 1.0, "data": 2.0, "sft": 60.0, "eval_sft": 10.0, "rl": 150.0,
                     "eval_rl": 10.0, "total": 233.0},
        "sft": {"steps": 300, "stop_reason": "skill",
                "loss_curve": [[100, 2.5], [200, 0.9], [300, 0.4]],
                "skill_check": {"threshold": 0.8, "reached_at": 200,
                                "curve": [[100, 0.1], [200, 0.85]], "last": 0.85}},
        "eval_sft": {"accuracy": 0.53125, "accuracy_stderr": 0.0623, "tool_call_rate": 0.97,
                     "sampled_accuracy": 0.41, "sampled_accuracy_stderr": 0.031,
                     "trajectories": 64.0,
                     "by_phrasing": {
                         "direct_phrasings": {"accuracy": 0.1, "accuracy_stderr": 0.05,
                                              "tool_call_rate": 0.2},
                         "tool_phrasings": {"accuracy": 0.8, "accuracy_stderr": 0.04,
                                            "tool_call_rate": 0.95}}},
        "eval_rl": {"accuracy": 0.625, "accuracy_stderr": 0.0605, "tool_call_rate": 1.0,
                    "by_phrasing": {
                        "direct_phrasings": {"accuracy": 0.7, "accuracy_stderr": 0.06,
                                             "tool_call_rate": 0.9},
                        "tool_phrasings": {"accuracy": 0.82, "accuracy_stderr": 0.04,
                                           "tool_call_rate": 1.0}}},
        "control": {"accuracy": 0.09375, "accuracy_stderr": 0.0364, "tool_call_rate": 0.0},
    }  # fmt: skip


@pytest.fixture
def quickstart_dir(tmp_path: Path) -> Path:
    """A quickstart output: report.json, eval_*.jsonl (agentrl generate rows), rl/ run."""
    out = tmp_path / "qs"
    out.mkdir()
    (out / "report.json").write_text(json.dumps(quickstart_report()))
    write_jsonl(out / "rl" / "metrics.jsonl", metrics_rows(2))
    write_jsonl(out / "rl" / "rollouts" / "1.jsonl", [dump_row(1, k, 1.0) for k in range(2)])
    generate_rows = []
    for index in range(3):
        row = dump_row(0, index, 1.0)
        generate_rows.append({
            "index": index, "sample": 0, "data_source": "agentrl/arithmetic",
            "messages": row["messages"], "input_ids": [1, 2, 3, *row["response_ids"]],
            "loss_mask": [0, 0, 0, *MASK], "rollout_log_probs": None, "prompt_length": 3,
            "finish_reason": "stop", "truncation": None, "state": "completed", "num_turns": 4,
            "reward_scores": {}, "metrics": {"tool_calls": {"calculator": 1}},
            "score": float(index > 0),
        })  # fmt: skip
    write_jsonl(out / "eval_sft.jsonl", generate_rows)
    return out


def agent_rows(step: int = 1) -> list[dict[str, Any]]:
    """Agent-mode dump rows of two sessions: ``e0`` a root segment 0, its child 1 (branched at
    message 1, token 2) and a side call 2; ``e1`` only its segment 2, a child of segment 1,
    which no row holds (``agent_segments: last``)."""
    def tree(index, parent=None, message=0, token=0, side=False, segments=2, sides=1):
        return {"index": index, "parent": parent, "branch_message": message,
                "branch_token": token, "side_call": side, "session_segments": segments,
                "session_side_calls": sides}

    rows = []
    for episode, row, segment, mask in [
        ("e0", 0, tree(1, 0, 1, 2), [1, 1, 0, 1]),
        ("e0", 1, tree(0), [1, 0, 0, 1, 1, 1]),
        ("e0", 2, tree(2, side=True), [1]),
        ("e1", 0, tree(2, 1, 3, 9, segments=3, sides=0), [1, 1]),
    ]:
        rows.append(dump_row(step, 0, acc=1.0) | {
            "uid": f"{step}-0", "episode_id": episode, "episode_row": row, "segment": segment,
            "response_ids": list(range(len(mask))), "loss_mask": mask,
            "response_tokens": [f"t{i}" for i in range(len(mask))]})
    return rows


@pytest.fixture
def synthetic() -> SimpleNamespace:
    """The helpers and constants of this file."""
    return SimpleNamespace(
        TOKENS=TOKENS,
        MASK=MASK,
        EXPECTED_PLOTS=EXPECTED_PLOTS,
        QUICKSTART_PLOTS=QUICKSTART_PLOTS,
        write_jsonl=write_jsonl,
        dump_row=dump_row,
        agent_rows=agent_rows,
        metrics_rows=metrics_rows,
        quickstart_report=quickstart_report,
    )
