"""The reasoning_gym quickstart task: reasoning-gym's rows and scorer, the calculator
teacher, disjoint pools."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

pytest.importorskip("reasoning_gym")

from agentrl.environments.quickstart_task import write_reasoning_gym_data  # noqa: E402
from agentrl.reward.score import default_compute_score  # noqa: E402
from agentrl.tasks.quickstart import REASONING_GYM_DIRECT_PHRASINGS, TASKS  # noqa: E402
from agentrl.utils.jsonl import read_jsonl  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    settings = SimpleNamespace(n_test=40, n_train=30, sft_examples=120, seed=3, direct_rate=0.8)
    out = tmp_path_factory.mktemp("rg")
    return write_reasoning_gym_data(out, settings, REASONING_GYM_DIRECT_PHRASINGS)


def test_the_pools_are_disjoint_division_free_reasoning_gym_rows(data):
    test, train = pd.read_parquet(data.test), pd.read_parquet(data.train)
    sft = [record for _, record in read_jsonl(data.sft)]
    assert (len(test), len(train), len(sft)) == (40, 30, 120)
    questions = [
        set(test.extra_info.map(lambda e: e["question"])),
        set(train.extra_info.map(lambda e: e["question"])),
        {r["question"] for r in sft},
    ]
    assert all(not (a & b) for i, a in enumerate(questions) for b in questions[i + 1 :])
    assert set(test.data_source) == {"reasoning_gym/basic_arithmetic"}
    assert not any("/" in e["expression"] for e in test.extra_info)
    assert set(data.groups["phrasing"]) == {"direct_phrasings", "tool_phrasings"}
    assert len(data.groups["terms"]) == 40 and "2_terms" in data.groups["terms"]


def test_the_teacher_is_right_through_reasoning_gyms_scorer_and_direct_only_on_short(data):
    test = pd.read_parquet(data.test)
    extra = dict(test.extra_info.iloc[0])
    sft = [record for _, record in read_jsonl(data.sft)]
    direct = [r for r in sft if not r["uses_tool"]]
    assert direct and all(r["phrasing"] == "short" for r in direct)
    assert sum(r["uses_tool"] for r in sft if r["phrasing"] == "short") > 0  # 80%, not all
    for row in sft:
        if not row["uses_tool"]:
            continue
        call = row["messages"][-3]["tool_calls"][0]["function"]
        assert call["name"] == "calculator" and call["arguments"]["expression"]
        entry = {**extra, "reasoning_gym_entry": row["reasoning_gym_entry"]}
        answer = row["messages"][-1]["content"]
        score = default_compute_score(
            "reasoning_gym/basic_arithmetic", answer, row["ground_truth"], entry
        )
        assert score == 1.0, (row["question"], answer, row["ground_truth"])
    wrong = default_compute_score(
        "reasoning_gym/basic_arithmetic", "<answer>123456789</answer>", "5", extra
    )
    assert wrong == 0.0


def test_the_task_is_listed_with_its_recipe():
    task = TASKS["reasoning_gym"]
    assert task.tool_name == "calculator" and task.recipe_config.is_file()
    with task.tools(None) as config:
        assert config.name == "calculator_tool.yaml"


SMALL_BATCH = ("data.train_batch_size=4", "actor_rollout_ref.rollout.n=4",
               "actor_rollout_ref.actor.ppo_mini_batch_size=4")


@pytest.mark.slow
def test_a_short_run_is_scored_by_reasoning_gym(tmp_path):
    """SFT, two GRPO steps and the evaluations through the quickstart's stages: the rollouts
    are reasoning-gym rows, scored by reasoning-gym, with real calculator calls."""
    from agentrl.quickstart import run_quickstart, settings_for

    out = tmp_path / "rg"
    # SFT only has to make the model call the calculator: 80 steps of 8 at 2x the task's lr
    # (a 10% warm-up) gave 12-20 calls in these 32 rollouts on seeds 0-2; 100 for margin
    settings = settings_for("reasoning_gym", sft_steps=100, sft_batch_size=8, sft_lr=6e-3,
                            sft_warmup_steps=None, sft_check=0.0, sft_examples=400, steps=2,
                            n_train=32, n_test=12, control=False,
                            overrides=SMALL_BATCH)  # the recipe's batch is 16 x 8: plumbing only
    report = run_quickstart(out, settings)
    assert report == json.loads((out / "report.json").read_text())
    assert set(report["eval_rl"]["by_terms"]) <= {f"{n}_terms" for n in range(2, 7)}
    rows = [json.loads(line) for path in sorted((out / "rl" / "rollouts").glob("*.jsonl"))
            for line in path.read_text().splitlines()]  # fmt: skip
    assert len(rows) == 2 * 4 * 4
    assert sum((r["tool_calls"] or {}).get("calculator", 0) for r in rows) > 0
    tool_turns = [m["content"] for r in rows for m in r["messages"] if m["role"] == "tool"]
    assert tool_turns and all(t.strip() for t in tool_turns)
    # reasoning-gym's own scores: 1 for the exact answer, len(oracle) / len(answer) when the
    # answer holds the oracle (partial credit: 0.5 and 0.667 both seen), else 0
    assert all(0.0 <= r["score"] <= 1.0 for r in rows)
    # every held-out score is reasoning-gym's own for the final answer
    test = pd.read_parquet(out / "data" / "test.parquet")
    evaluated = [json.loads(line) for line in (out / "eval_rl.jsonl").read_text().splitlines()]
    assert len(evaluated) == 12
    for row in evaluated:
        item = test.iloc[int(row["index"])]
        final = [m for m in row["messages"] if m["role"] == "assistant"][-1]["content"]
        truth, extra = item.reward_model["ground_truth"], dict(item.extra_info)
        assert row["data_source"] == "reasoning_gym/basic_arithmetic"
        assert default_compute_score(row["data_source"], final, truth, extra) == row["score"]
        right = default_compute_score(row["data_source"], f"<answer>{truth}</answer>", truth, extra)
        assert right == 1.0
