"""Tests for the arithmetic word-problem generator: exact rows, determinism, disjoint splits,
exact ground truth, and parquet round trips through pandas and `datasets`."""

from __future__ import annotations

from fractions import Fraction

import datasets
import numpy as np
import pandas as pd
import pytest

from agentrl.tasks.arithmetic import (
    DIFFICULTIES,
    SYSTEM_PROMPT,
    evaluate_expression,
    format_number,
    make_arithmetic_rows,
    write_arithmetic_dataset,
)


def to_python(value):
    """pandas reads parquet lists as numpy arrays; turn them back into lists."""
    if isinstance(value, np.ndarray):
        return [to_python(v) for v in value]
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_python(v) for v in value]
    return value


def test_fixed_seed_rows_are_exact():
    rows = make_arithmetic_rows(2, "train", seed=7, difficulty="easy")
    q = "A warehouse has 292 shelves and each shelf holds 43 boxes. How many boxes are there in total?"
    assert rows[0] == {
        "data_source": "agentrl/arithmetic",
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": q},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "12556"},
        "extra_info": {
            "index": 0,
            "split": "train",
            "question": q,
            "expression": "292 * 43",
            "tools_kwargs": {"calculator": {"create_kwargs": {"ground_truth": "12556"}}},
        },
    }
    assert rows[1]["extra_info"]["index"] == 1
    assert rows[1]["extra_info"]["expression"] == "258 * 75"
    assert rows[1]["reward_model"]["ground_truth"] == "19350"

    medium = make_arithmetic_rows(2, "train", seed=7, difficulty="medium")[1]
    assert medium["extra_info"]["question"] == (
        "Three runners trained for 5596, 4390 and 3798 meters this week. "
        "What is the average distance in meters?"
    )
    assert medium["extra_info"]["expression"] == "(5596 + 4390 + 3798) / 3"
    assert medium["reward_model"]["ground_truth"] == "4594.6667"

    hard = make_arithmetic_rows(1, "train", seed=7, difficulty="hard")[0]
    assert hard["extra_info"]["expression"] == "(3697 + 105 * 44 - 14 * 52) / 7"
    assert hard["reward_model"]["ground_truth"] == "1084.1429"

    test_row = make_arithmetic_rows(1, "test", seed=7, difficulty="easy")[0]
    assert test_row["extra_info"]["split"] == "test"
    assert test_row["extra_info"]["expression"] == "88911 / 14"
    assert test_row["reward_model"]["ground_truth"] == "6350.7857"


def test_system_prompt_names_tool_and_answer_format():
    assert "`calculator`" in SYSTEM_PROMPT
    assert "<answer>NUMBER</answer>" in SYSTEM_PROMPT


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_deterministic_from_seed(difficulty):
    first = make_arithmetic_rows(50, "train", seed=3, difficulty=difficulty)
    assert first == make_arithmetic_rows(50, "train", seed=3, difficulty=difficulty)
    other = make_arithmetic_rows(50, "train", seed=4, difficulty=difficulty)
    assert [r["extra_info"]["expression"] for r in first] != [
        r["extra_info"]["expression"] for r in other
    ]


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_ground_truth_is_the_value_of_the_expression(difficulty):
    rows = make_arithmetic_rows(200, "train", seed=11, difficulty=difficulty)
    assert [r["extra_info"]["index"] for r in rows] == list(range(200))
    for row in rows:
        expression = row["extra_info"]["expression"]
        gt = row["reward_model"]["ground_truth"]
        assert row["extra_info"]["tools_kwargs"]["calculator"]["create_kwargs"] == {
            "ground_truth": gt
        }
        assert row["prompt"][1]["content"] == row["extra_info"]["question"]
        # independent check with floats: the string is the value rounded to 4 decimals
        value = eval(expression, {"__builtins__": {}})  # expressions are digits and + - * / ( )
        assert value > 0
        assert abs(float(gt) - value) <= 0.00005 + 1e-9 * abs(value)
        if "." in gt:
            assert len(gt.split(".")[1]) <= 4 and not gt.endswith("0")
        else:
            assert Fraction(gt) == evaluate_expression(expression)


def test_every_difficulty_uses_several_templates():
    for difficulty in DIFFICULTIES:
        rows = make_arithmetic_rows(60, "train", seed=0, difficulty=difficulty)
        openings = {r["extra_info"]["question"].split()[1] for r in rows}
        assert len(openings) == 3, (difficulty, openings)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_train_and_test_never_share_an_expression(difficulty):
    train = make_arithmetic_rows(1000, "train", seed=1, difficulty=difficulty)
    test = make_arithmetic_rows(300, "test", seed=1, difficulty=difficulty)
    test_other_seed = make_arithmetic_rows(300, "test", seed=99, difficulty=difficulty)
    train_expr = {r["extra_info"]["expression"] for r in train}
    test_expr = [r["extra_info"]["expression"] for r in test + test_other_seed]
    assert len(train_expr) == 1000
    assert len(set(r["extra_info"]["question"] for r in test)) == 300
    assert train_expr.isdisjoint(test_expr)


def test_evaluate_expression_is_exact():
    assert evaluate_expression("0.1 + 0.2") == Fraction(3, 10)
    assert evaluate_expression("(3697 + 105 * 44 - 14 * 52) / 7") == Fraction(7589, 7)
    assert evaluate_expression("-2 * (3 - 5.5)") == 5


@pytest.mark.parametrize("bad", ["2 ** 10", "__import__('os')", "abs(-1)", "1 +", "'a'"])
def test_evaluate_expression_rejects_non_arithmetic(bad):
    with pytest.raises(ValueError, match="arithmetic expression"):
        evaluate_expression(bad)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(1722), "1722"),
        (Fraction(25, 2), "12.5"),
        (Fraction(1, 3), "0.3333"),
        (Fraction(2, 3), "0.6667"),
        (Fraction(200001, 100000), "2"),  # rounds to an integer: no ".0"
        (Fraction(123455, 10**5), "1.2346"),  # exact half rounds up
        (Fraction(-7, 4), "-1.75"),
        (Fraction(-1, 10**6), "0"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown difficulty 'extreme'.*easy"):
        make_arithmetic_rows(1, "train", seed=0, difficulty="extreme")
    with pytest.raises(ValueError, match="n must be >= 0"):
        make_arithmetic_rows(-1, "train", seed=0)
    assert make_arithmetic_rows(0, "train", seed=0) == []


def test_parquet_round_trip_with_datasets_and_pandas(tmp_path):
    train_path, test_path = write_arithmetic_dataset(tmp_path / "out", 40, 10, seed=5)
    assert (train_path.name, test_path.name) == ("train.parquet", "test.parquet")
    expected = {
        "train": make_arithmetic_rows(40, "train", seed=5),
        "test": make_arithmetic_rows(10, "test", seed=5),
    }
    for split, path in (("train", train_path), ("test", test_path)):
        loaded = datasets.load_dataset(
            "parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf")
        )
        assert loaded.to_list() == expected[split]
        assert to_python(pd.read_parquet(path).to_dict("records")) == expected[split]
        tools_kwargs = loaded[3]["extra_info"]["tools_kwargs"]
        assert tools_kwargs == expected[split][3]["extra_info"]["tools_kwargs"]
        assert isinstance(tools_kwargs["calculator"]["create_kwargs"], dict)


def test_quickstart_level_three_disjoint_pools_and_phrasings():
    from agentrl.tasks.arithmetic import QUICKSTART_PHRASINGS, expression_pool

    pools = {s: make_arithmetic_rows(300, s, seed=4, difficulty="quickstart") for s in
             ("sft", "train", "test")}  # fmt: skip
    expressions = {s: {r["extra_info"]["expression"] for r in rows} for s, rows in pools.items()}
    assert all(len(e) == 300 for e in expressions.values())
    assert not expressions["sft"] & expressions["train"]
    assert not (expressions["sft"] | expressions["train"]) & expressions["test"]
    for split, rows in pools.items():
        for row in rows:
            extra = row["extra_info"]
            assert expression_pool(extra["expression"]) == split
            assert extra["question"] == QUICKSTART_PHRASINGS[extra["phrasing"]].format(
                extra["expression"]
            )
            numbers = extra["expression"].split()[::2]
            assert 2 <= len(numbers) <= 3 and all(1 <= len(n) <= 4 for n in numbers)
            assert row["reward_model"]["ground_truth"] == str(eval(extra["expression"]))
    assert {r["extra_info"]["phrasing"] for r in pools["test"]} == set(QUICKSTART_PHRASINGS)
    # other levels keep no phrasing; any split that is not sft or train is held out
    assert "phrasing" not in make_arithmetic_rows(1, "train", seed=0)[0]["extra_info"]
    val = make_arithmetic_rows(20, "validation", seed=4, difficulty="quickstart")
    assert all(expression_pool(r["extra_info"]["expression"]) == "test" for r in val)
