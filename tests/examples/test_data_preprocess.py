"""Tests for examples/data_preprocess/*.py: each script is loaded from its file and its
main() run on small files written here; the parquet output is read back with `datasets`
and pandas and must equal the expected rows, tools_kwargs included."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path
from types import ModuleType

import datasets
import numpy as np
import pandas as pd
import pytest

from agentrl.tasks.arithmetic import make_arithmetic_rows

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "data_preprocess"
GSM8K_SUFFIX = ' Let\'s think step by step and output the final answer after "####".'


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"data_preprocess_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def to_python(value):
    """pandas reads parquet lists as numpy arrays; turn them back into lists."""
    if isinstance(value, np.ndarray):
        return [to_python(v) for v in value]
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_python(v) for v in value]
    return value


def read_back(path: Path, cache_dir: Path) -> list[dict]:
    """Rows of a parquet file via `datasets`, checked to agree with pandas."""
    rows = datasets.load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(cache_dir)
    ).to_list()
    assert to_python(pd.read_parquet(path).to_dict("records")) == rows
    return rows


def write_jsonl(path: Path, records: list) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- arithmetic ----------------------------------------------------------------------


def test_arithmetic_script_writes_train_and_test(tmp_path):
    script = load_script("arithmetic")
    out = tmp_path / "arith"
    argv = ["--local_dir", str(out), "--train_size", "30", "--test_size", "8", "--seed", "4"]
    assert script.main([*argv, "--difficulty", "medium"]) == 0
    train = read_back(out / "train.parquet", tmp_path / "hf")
    test = read_back(out / "test.parquet", tmp_path / "hf")
    assert train == make_arithmetic_rows(30, "train", seed=4, difficulty="medium")
    assert test == make_arithmetic_rows(8, "test", seed=4, difficulty="medium")
    assert train[0]["extra_info"]["tools_kwargs"] == {
        "calculator": {"create_kwargs": {"ground_truth": train[0]["reward_model"]["ground_truth"]}}
    }


def test_arithmetic_script_rejects_bad_sizes(tmp_path, capsys):
    script = load_script("arithmetic")
    with pytest.raises(SystemExit) as exc:
        script.main(["--local_dir", str(tmp_path), "--train_size", "0"])
    assert exc.value.code == 2
    assert "--train_size must be >= 1, got 0" in capsys.readouterr().err


# --- gsm8k ---------------------------------------------------------------------------

GSM8K_RECORDS = [
    {
        "question": "Tom has 3 boxes of 1,200 pens. How many pens?",
        "answer": "3 * 1200 = <<3*1200=3600>>3600\n#### 3,600",
    },
    {"question": "A bat costs 2.5 dollars. What do 2 cost?", "answer": "2 * 2.5 = 5\n#### 5"},
]


def gsm8k_row(index: int, split: str, with_tools: bool) -> dict:
    record = GSM8K_RECORDS[index]
    solution = ["3600", "5"][index]
    prompt = [{"role": "user", "content": record["question"] + GSM8K_SUFFIX}]
    extra_info = {"index": index, "split": split, **record}
    if with_tools:
        system = load_script("gsm8k").SYSTEM_PROMPT
        prompt.insert(0, {"role": "system", "content": system})
        extra_info["tools_kwargs"] = {"calculator": {"create_kwargs": {"ground_truth": solution}}}
    return {
        "data_source": "openai/gsm8k",
        "prompt": prompt,
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": solution},
        "extra_info": extra_info,
    }


@pytest.mark.parametrize("with_tools", [False, True])
def test_gsm8k_script_converts_rows(tmp_path, with_tools):
    script = load_script("gsm8k")
    train_file = write_jsonl(tmp_path / "train.jsonl", GSM8K_RECORDS)
    test_file = write_jsonl(tmp_path / "test.jsonl", GSM8K_RECORDS[1:])
    out = tmp_path / "gsm8k"
    argv = ["--train_file", str(train_file), "--test_file", str(test_file), "--local_dir", str(out)]
    assert script.main(argv + (["--with_tools"] if with_tools else [])) == 0
    train = read_back(out / "train.parquet", tmp_path / "hf")
    assert train == [gsm8k_row(0, "train", with_tools), gsm8k_row(1, "train", with_tools)]
    test = read_back(out / "test.parquet", tmp_path / "hf")
    expected_test = gsm8k_row(1, "test", with_tools)
    expected_test["extra_info"]["index"] = 0
    assert test == [expected_test]
    if with_tools:
        assert "`calculator`" in train[0]["prompt"][0]["content"]


def test_gsm8k_only_train_file(tmp_path):
    script = load_script("gsm8k")
    train_file = write_jsonl(tmp_path / "train.jsonl", GSM8K_RECORDS)
    out = tmp_path / "gsm8k"
    assert script.main(["--train_file", str(train_file), "--local_dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["train.parquet"]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"question": "q", "answer": "4"', "line 3: invalid JSON"),
        ('{"question": "q"}', "line 3: missing or empty string field 'answer'"),
        ('{"answer": "#### 4"}', "line 3: missing or empty string field 'question'"),
        ('{"question": "q", "answer": "so 4"}', "line 3: field 'answer' has no '#### <number>'"),
        ('{"question": "q", "answer": "#### four"}', "line 3: final answer after '####' is not"),
        ("[1, 2]", "line 3: expected a JSON object, got list"),
    ],
)
def test_gsm8k_malformed_line_names_the_line(tmp_path, caplog, bad_line, message):
    script = load_script("gsm8k")
    train_file = write_jsonl(tmp_path / "bad.jsonl", [*GSM8K_RECORDS, bad_line])
    out = tmp_path / "out"
    with caplog.at_level(logging.ERROR):
        assert script.main(["--train_file", str(train_file), "--local_dir", str(out)]) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith(f"{train_file}, {message}")
    assert "Traceback" not in caplog.text
    assert not out.exists()


def test_gsm8k_missing_file_and_no_args(tmp_path, caplog, capsys):
    script = load_script("gsm8k")
    missing = tmp_path / "nope.jsonl"
    with caplog.at_level(logging.ERROR):
        assert script.main(["--train_file", str(missing), "--local_dir", str(tmp_path)]) == 1
    assert f"{missing}: no such file" in caplog.text
    with pytest.raises(SystemExit):
        script.main(["--local_dir", str(tmp_path)])
    assert "give at least one of --train_file, --test_file" in capsys.readouterr().err


# --- search_r1 -------------------------------------------------------------------------


def search_row(index, split, question, answers, data_source) -> dict:
    instruction = load_script("search_r1").INSTRUCTION
    ground_truth = {"target": answers}
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{instruction}Question: {question}\n"}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": index,
            "split": split,
            "question": question,
            "need_tools_kwargs": True,
            "tools_kwargs": {
                "search": {
                    "create_kwargs": {
                        "ground_truth": ground_truth,
                        "question": question,
                        "data_source": data_source,
                    }
                }
            },
        },
    }


SEARCH_RECORDS = [
    {"id": "train_0", "question": "  who wrote hamlet ", "golden_answers": ["Shakespeare"]},
    {"id": "train_1", "question": "capital of china?", "answers": ["Beijing", "Peking"]},
    {"id": "train_2", "question": "how many legs has a spider", "answer": 8},
]


def test_search_r1_script_converts_rows_with_source_from_file_name(tmp_path):
    script = load_script("search_r1")
    train_file = write_jsonl(tmp_path / "nq_train.jsonl", SEARCH_RECORDS)
    test_file = write_jsonl(tmp_path / "hotpotqa_dev.jsonl", SEARCH_RECORDS[:1])
    out = tmp_path / "search"
    argv = ["--train_file", str(train_file), "--test_file", str(test_file), "--local_dir", str(out)]
    assert script.main(argv) == 0
    assert read_back(out / "train.parquet", tmp_path / "hf") == [
        search_row(0, "train", "who wrote hamlet?", ["Shakespeare"], "searchR1_nq"),
        search_row(1, "train", "capital of china?", ["Beijing", "Peking"], "searchR1_nq"),
        search_row(2, "train", "how many legs has a spider?", ["8"], "searchR1_nq"),
    ]
    assert read_back(out / "test.parquet", tmp_path / "hf") == [
        search_row(0, "test", "who wrote hamlet?", ["Shakespeare"], "searchR1_hotpotqa")
    ]


def test_search_r1_prompt_follows_search_r1():
    instruction = load_script("search_r1").INSTRUCTION
    for part in ("<think>", "</think>", "`search`", "<answer> Beijing </answer>"):
        assert part in instruction


def test_search_r1_explicit_data_source(tmp_path):
    script = load_script("search_r1")
    train_file = write_jsonl(tmp_path / "data.jsonl", SEARCH_RECORDS[:1])
    out = tmp_path / "search"
    argv = ["--train_file", str(train_file), "--local_dir", str(out), "--data_source", "my_qa"]
    assert script.main(argv) == 0
    (row,) = read_back(out / "train.parquet", tmp_path / "hf")
    assert row == search_row(0, "train", "who wrote hamlet?", ["Shakespeare"], "my_qa")


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("not json", "line 4: invalid JSON"),
        (
            '{"id": "x", "golden_answers": ["a"]}',
            "line 4: missing or empty string field 'question'",
        ),
        ('{"id": "x", "question": "q"}', "line 4: missing answer field (one of golden_answers"),
        ('{"question": "q", "golden_answers": []}', "line 4: field 'golden_answers' is an empty"),
        ('{"question": "q", "answers": [{"a": 1}]}', "line 4: field 'answers' holds a non-text"),
    ],
)
def test_search_r1_malformed_line_names_the_line(tmp_path, caplog, bad_line, message):
    script = load_script("search_r1")
    train_file = write_jsonl(tmp_path / "nq.jsonl", [*SEARCH_RECORDS, bad_line])
    with caplog.at_level(logging.ERROR):
        assert script.main(["--train_file", str(train_file), "--local_dir", str(tmp_path)]) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith(f"{train_file}, {message}")
    assert "Traceback" not in caplog.text


def test_search_r1_unknown_source_asks_for_data_source(tmp_path, caplog):
    script = load_script("search_r1")
    train_file = write_jsonl(tmp_path / "questions.jsonl", SEARCH_RECORDS)
    with caplog.at_level(logging.ERROR):
        assert script.main(["--train_file", str(train_file), "--local_dir", str(tmp_path)]) == 1
    assert "cannot tell the data source from the file name; pass --data_source" in caplog.text
