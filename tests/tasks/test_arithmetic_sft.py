"""Synthetic calculator trajectories: the tool's real output, answers equal to the ground truth."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from agentrl.data.sft import read_sft_rows
from agentrl.reward.score.arithmetic import compute_score
from agentrl.tasks.arithmetic import SHORT_SYSTEM_PROMPT, SYSTEM_PROMPT, make_arithmetic_rows
from agentrl.tasks.arithmetic_sft import (
    answer_from_output,
    calculator_output,
    make_arithmetic_sft_rows,
    write_arithmetic_sft_dataset,
)
from tools.calculator import DEFAULT_SCHEMA, CalculatorTool


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_every_trajectory_answers_the_ground_truth(difficulty):
    rows = make_arithmetic_sft_rows(60, "train", seed=3, difficulty=difficulty)
    tool = CalculatorTool({"type": "native"})
    for row in rows:
        system, user, call, result, final = row["messages"]
        assert (system["role"], system["content"]) == ("system", SYSTEM_PROMPT)
        assert user["role"] == "user"
        assert call["role"] == "assistant" and call["content"] == ""
        (tool_call,) = call["tool_calls"]
        assert tool_call["function"] == {
            "name": "calculator",
            "arguments": {"expression": row["expression"]},
        }
        response, reward, _ = asyncio.run(tool.execute("i", {"expression": row["expression"]}))
        assert result == {"role": "tool", "content": response.text}
        assert final["role"] == "assistant" and "tool_calls" not in final
        assert compute_score(final["content"], row["ground_truth"]) == 1.0
        assert final["content"] == f"<answer>{row['ground_truth']}</answer>"
        assert row["tools"] == [DEFAULT_SCHEMA]


def test_quickstart_level_and_short_system_prompt():
    rows = make_arithmetic_sft_rows(
        300, "train", seed=2, difficulty="basic", system_prompt=SHORT_SYSTEM_PROMPT
    )
    test = make_arithmetic_rows(60, "test", seed=2, difficulty="basic")
    assert {r["expression"] for r in rows}.isdisjoint(r["extra_info"]["expression"] for r in test)
    assert {r["expression"][3] for r in rows} == {"+", "-", "*"}
    for row in rows:
        system, user, _, _, final = row["messages"]
        assert system == {"role": "system", "content": SHORT_SYSTEM_PROMPT}
        assert re.fullmatch(r"[1-9]\d [-+*] [1-9]", row["expression"])
        a, b = re.findall(r"\d+", user["content"])  # the operands, in expression order
        assert row["expression"] == f"{a} {row['expression'][3]} {b}"
        assert final["content"] == f"<answer>{int(eval(row['expression']))}</answer>"
        assert compute_score(final["content"], row["ground_truth"]) == 1.0


def test_rows_follow_the_arithmetic_rows():
    rows = make_arithmetic_sft_rows(5, "test", seed=1, difficulty="medium")
    source = make_arithmetic_rows(5, "test", seed=1, difficulty="medium")
    for row, src in zip(rows, source, strict=True):
        assert row["messages"][:2] == src["prompt"]
        assert row["expression"] == src["extra_info"]["expression"]
        assert row["ground_truth"] == src["reward_model"]["ground_truth"]
        assert row["index"] == src["extra_info"]["index"]


def test_answers_are_rounded_from_the_calculator_output():
    assert calculator_output("62042 / 83") == "747.493975904"
    assert answer_from_output("747.493975904") == "747.494"
    assert calculator_output("1 / 3") == "0.333333333333"
    assert answer_from_output("0.333333333333") == "0.3333"
    assert calculator_output("12.75 * 4") == "51"
    assert answer_from_output("51.0") == "51"
    assert answer_from_output("9716") == "9716"


def test_write_and_read_back(tmp_path):
    short = {
        "type": "function",
        "function": {"name": "calculator", "description": "calc", "parameters": {"type": "object"}},
    }
    path = write_arithmetic_sft_dataset(
        tmp_path / "sft" / "train.jsonl", 4, seed=0, tool_schema=short
    )
    lines = path.read_text().splitlines()
    assert len(lines) == 4
    assert read_sft_rows(path) == [json.loads(line) for line in lines]
    assert read_sft_rows(path)[0]["tools"] == [short]


def test_imperfect_teacher_answers_directly_on_the_direct_phrasings_only():
    rows = make_arithmetic_sft_rows(
        400, "sft", seed=1, difficulty="quickstart", direct_phrasings=("equals",), direct_rate=0.8
    )
    direct = [r for r in rows if not r["uses_tool"]]
    assert direct and all(r["phrasing"] == "equals" for r in direct)
    equals = [r for r in rows if r["phrasing"] == "equals"]
    assert 0.65 < len(direct) / len(equals) < 0.95
    for row in direct:  # the true number at once, no tool turn
        assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
        assert row["messages"][-1]["content"] == f"<answer>{row['ground_truth']}</answer>"
    tool_rows = [r for r in rows if r["uses_tool"]]
    assert all(r["messages"][2]["tool_calls"] for r in tool_rows)
    with pytest.raises(ValueError, match="direct_rate must be in"):
        make_arithmetic_sft_rows(1, "sft", seed=0, direct_rate=1.5)
