"""ReTool math rows: jsonl and parquet (flat and verl/DAPO rows) in, verl rows out that the
recipe's tool config and the registered scorer accept; bad input names file, row, field."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentrl.data.retool import (
    DATA_SOURCE,
    PROMPT_TEMPLATE,
    RetoolDataError,
    convert_file,
    retool_row,
    strip_dapo_prompt,
)
from agentrl.data.rows import check_row
from agentrl.reward.score import default_compute_score
from agentrl.tools import load_tool_schemas

TOOL_CONFIG = Path(__file__).resolve().parents[2] / "recipes" / "retool" / "sandbox_tool.yaml"
DAPO = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem."
    "\n\n{q}\n\nRemember to put your answer on its own line after \"Answer:\"."
)


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def write_parquet(path: Path, records: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def test_jsonl_rows_fit_the_tool_config_and_the_scorer(tmp_path):
    path = write_jsonl(tmp_path / "math.jsonl", [
        {"question": "What is the sum of 1..100?", "answer": 5050},
        {"problem": " Compute 2**70. ", "Answer": "1180591620717411303424"},
        {"question": "Half of 1?", "answer": 0.5},
    ])
    rows = convert_file(path, "train")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["5050", "1180591620717411303424", "0.5"]
    assert rows[1] == retool_row("Compute 2**70.", "1180591620717411303424", 1, "train")
    row = rows[0]
    assert row["data_source"] == DATA_SOURCE and row["ability"] == "math"
    assert row["prompt"] == [{"role": "user", "content": PROMPT_TEMPLATE.format(
        question="What is the sum of 1..100?")}]
    assert "`code_interpreter`" in row["prompt"][0]["content"]
    assert row["extra_info"] == {
        "index": 0, "split": "train", "question": "What is the sum of 1..100?",
        "tools_kwargs": {"code_interpreter": {"create_kwargs": {"ground_truth": "5050"}}},
    }
    tool_names = {s["function"]["name"] for s in load_tool_schemas(TOOL_CONFIG)}
    for i, r in enumerate(rows):
        check_row(r, f"row {i}", "prompt", tool_names)
    assert default_compute_score(row["data_source"], r"... so \boxed{5050}", "5050") == 1.0
    assert default_compute_score(row["data_source"], r"\boxed{5051}", "5050") == 0.0


def test_dapo_parquet_rows_are_unwrapped_and_deduplicated(tmp_path):
    dapo = [{"data_source": "math_dapo", "ability": "MATH",
             "prompt": [{"role": "user", "content": DAPO.format(q=q)}],
             "reward_model": {"ground_truth": a, "style": "rule-lighteval/MATH_v2"},
             "extra_info": {"index": str(i)}}
            for i, (q, a) in enumerate([("Find x.", "3"), ("Find x.", "3"), ("Find y.", "4")])]
    path = write_parquet(tmp_path / "dapo.parquet", dapo)
    rows = convert_file(path, "train")
    assert [(r["extra_info"]["question"], r["reward_model"]["ground_truth"]) for r in rows] == [
        ("Find x.", "3"), ("Find y.", "4")]
    assert [r["extra_info"]["index"] for r in rows] == [0, 1]
    assert len(convert_file(path, "train", keep_duplicates=True)) == 3
    flat = write_parquet(tmp_path / "aime.parquet", [{"Problem": "P?", "Answer": 204}])
    assert convert_file(flat, "test")[0]["reward_model"]["ground_truth"] == "204"
    assert strip_dapo_prompt("  plain question ") == "plain question"


@pytest.mark.parametrize(
    "records, message",
    [
        ([{"question": "q", "answer": "1"}, {"question": "q2"}],
         r"math.jsonl, line 2: field 'answer': missing answer \(one of answer, Answer\); "
         r"the record has question"),
        ([{"question": "  ", "answer": "1"}], r"line 1: field 'question': expected a non-empty string"),
        ([{"answer": "1"}], r"line 1: field 'question': missing question"),
        ([{"question": "q", "answer": True}], r"line 1: field 'answer': expected a string or a number"),
        ([{"question": "q", "answer": ""}], r"line 1: field 'answer': is empty"),
        ([{"question": "q", "answer": [1]}], r"line 1: field 'answer': expected a string or a number, got list"),
        ([{"question": "q", "answer": "1"}, '{"question": "q"'], r"math.jsonl, line 2: invalid JSON"),
        ([], r"math.jsonl: no records"),
    ],
)
def test_bad_jsonl_names_file_line_and_field(tmp_path, records, message):
    path = write_jsonl(tmp_path / "math.jsonl", records) if records else tmp_path / "math.jsonl"
    if not records:
        path.write_text("\n")
    with pytest.raises(RetoolDataError, match=message):
        convert_file(path, "train")


@pytest.mark.parametrize(
    "record, message",
    [
        ({"prompt": [{"role": "user", "content": "q"}], "reward_model": {"style": "rule"}},
         r"data.parquet, row 1: field 'reward_model.ground_truth': missing"),
        ({"prompt": [{"role": "system", "content": "s"}], "reward_model": {"ground_truth": "1"}},
         r"row 1: field 'prompt': has no user message"),
    ],
)
def test_bad_parquet_names_file_row_and_field(tmp_path, record, message):
    good = {"prompt": [{"role": "user", "content": "ok"}], "reward_model": {"ground_truth": "1"}}
    path = write_parquet(tmp_path / "data.parquet", [good, record])
    with pytest.raises(RetoolDataError, match=message):
        convert_file(path, "train")


def test_missing_or_unreadable_file(tmp_path):
    with pytest.raises(RetoolDataError, match=r"nope.jsonl: no such file"):
        convert_file(tmp_path / "nope.jsonl", "train")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(RetoolDataError, match=r"bad.parquet: cannot read parquet"):
        convert_file(bad, "train")
