"""The reasoning_gym quickstart task: reasoning-gym's rows and scorer, the calculator
teacher, disjoint pools."""

from __future__ import annotations

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
