"""Problems solved by a one-line program (the CPU ReTool run's task): the programs compute
the ground truth, the rows are ReTool rows, pools are disjoint, the teacher is imperfect."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest

from agentrl.data.retool import DATA_SOURCE, TOOL_NAME
from agentrl.reward.score import default_compute_score
from agentrl.tasks.arithmetic import expression_pool
from agentrl.tasks.code_arithmetic import (
    KINDS,
    PHRASINGS,
    SYSTEM_PROMPT,
    make_code_rows,
    make_code_sft_rows,
    program_output,
)

SCHEMA = {"type": "function", "function": {"name": TOOL_NAME, "parameters": {}}}


def test_programs_print_the_ground_truth_and_the_numbers_are_the_questions():
    rows = make_code_rows(120, "train", seed=4)
    programs = [r["extra_info"]["program"] for r in rows]
    printed = subprocess.run(  # every program, run by a real Python
        [sys.executable, "-c", "\n".join(programs)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert printed == [r["reward_model"]["ground_truth"] for r in rows]
    for row in rows:
        extra, (system, user) = row["extra_info"], row["prompt"]
        assert row["data_source"] == DATA_SOURCE and system["content"] == SYSTEM_PROMPT
        assert user == {"role": "user", "content": extra["question"]}
        assert PHRASINGS[extra["phrasing"]][0] == extra["kind"]
        # the program holds the question's numbers, in order
        assert re.findall(r"\d+", extra["question"]) == re.findall(
            r"\d+", extra["program"].replace(" + 1)", ")")
        )
        truth = row["reward_model"]["ground_truth"]
        assert extra["tools_kwargs"] == {TOOL_NAME: {"create_kwargs": {"ground_truth": truth}}}
        assert default_compute_score(DATA_SOURCE, f"\\boxed{{{truth}}}", truth) == 1.0
        assert default_compute_score(DATA_SOURCE, f"\\boxed{{{int(truth) + 1}}}", truth) == 0.0
    assert set(Counter(r["extra_info"]["kind"] for r in rows)) == set(KINDS)
    assert min(len(r["reward_model"]["ground_truth"]) for r in rows) >= 2


def test_splits_are_disjoint_pools_and_deterministic():
    sft, train = make_code_rows(400, "sft", 0), make_code_rows(400, "train", 0)
    test = make_code_rows(200, "test", 0)
    for split, rows in (("sft", sft), ("train", train), ("test", test)):
        assert {expression_pool(r["extra_info"]["program"]) for r in rows} == {split}
        assert len({r["extra_info"]["program"] for r in rows}) == len(rows)
    assert make_code_rows(50, "test", 0) == test[:50]
    assert make_code_rows(50, "test", 1) != test[:50]
    with pytest.raises(ValueError, match="n must be >= 0"):
        make_code_rows(-1, "test", 0)


def test_teacher_runs_the_program_or_answers_directly_on_its_phrasings():
    direct = ("add_up", "multiply", "add_range")
    rows = make_code_sft_rows(600, "sft", 0, SCHEMA, direct, direct_rate=0.8)
    on_direct = [r for r in rows if r["phrasing"] in direct]
    share = sum(not r["uses_tool"] for r in on_direct) / len(on_direct)
    assert 0.7 < share < 0.9
    assert all(r["uses_tool"] for r in rows if r["phrasing"] not in direct)
    for row in rows:
        messages, truth = row["messages"], row["messages"][-1]["content"]
        assert row["tools"] == [SCHEMA] and re.fullmatch(r"\\boxed\{\d+\}", truth)
        if row["uses_tool"]:
            _, _, call, output, _ = messages
            assert call["tool_calls"][0]["function"] == {
                "name": TOOL_NAME, "arguments": {"code": row["program"]}
            }
            assert truth == f"\\boxed{{{output['content']}}}"
        else:
            assert len(messages) == 3
    assert program_output(1234) == "1234"
    with pytest.raises(ValueError, match="unknown phrasings"):
        make_code_sft_rows(2, "sft", 0, SCHEMA, ("nope",), 0.5)
    with pytest.raises(ValueError, match="direct_rate"):
        make_code_sft_rows(2, "sft", 0, SCHEMA, direct, 1.5)
