"""RLHFDataset on parquet files written by a user's own code (pyarrow/pandas, not ours)."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from agentrl.config import load_config
from agentrl.data import RLHFDataset, RowError, left_pad, truncate_ids

TOOLS_YAML = {
    "tools": [
        {"class_name": "tools.calculator.CalculatorTool", "config": {"type": "native"},
         "tool_schema": {"type": "function", "function": {
             "name": "calculator", "description": "Evaluate arithmetic.",
             "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                            "required": ["expression"]}}}},
        {"class_name": "tools.search.SearchTool", "config": {"type": "native"},
         "tool_schema": {"type": "function", "function": {
             "name": "search", "description": "Search the web.",
             "parameters": {"type": "object", "properties": {"query_list": {
                 "type": "array", "items": {"type": "string"}}}, "required": ["query_list"]}}}},
    ]
}


def _kwargs(create: dict) -> dict:
    return {"create_kwargs": create, "execute_kwargs": {"mode": "fast"},
            "calc_reward_kwargs": {"scale": 1.0}, "release_kwargs": {"keep": False}}


def _user_rows() -> list[dict]:
    return [
        {"data_source": "user/calc", "ability": "math",
         "prompt": [{"role": "system", "content": "Use tools."},
                    {"role": "user", "content": "What is 12 * 34?"}],
         "reward_model": {"style": "rule", "ground_truth": "408"},
         "extra_info": {"index": 10, "split": "train",
                        "tools_kwargs": {"calculator": _kwargs({"ground_truth": "408"})}}},
        {"data_source": "user/search", "ability": "qa",
         "prompt": [{"role": "user", "content": "Who wrote Hamlet?"}],
         "reward_model": {"style": "rule", "ground_truth": "Shakespeare"},
         "extra_info": {"index": 11, "split": "train",
                        "tools_kwargs": {"search": _kwargs({"ground_truth": "Shakespeare"})}}},
    ]


@pytest.fixture
def data_cfg_factory(tmp_path):
    def make(*overrides, tools: bool = False):
        extra = []
        if tools:
            path = tmp_path / "tools.yaml"
            path.write_text(yaml.safe_dump(TOOLS_YAML))
            extra = [f"actor_rollout_ref.rollout.multi_turn.tool_config_path={path}"]
        return load_config(overrides=["data.max_prompt_length=400", *extra, *overrides]).data
    return make


def _write(tmp_path, rows, name="user.parquet"):
    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_user_parquet_tools_kwargs_come_back_unchanged(tmp_path, tiny_tokenizer, data_cfg_factory):
    rows = _user_rows()
    ds = RLHFDataset(_write(tmp_path, rows), tiny_tokenizer, data_cfg_factory(tools=True))
    assert len(ds) == 2
    for i, row in enumerate(rows):
        item = ds[i]
        assert item["tools_kwargs"] == row["extra_info"]["tools_kwargs"]
        assert item["interaction_kwargs"] == {}
        assert item["index"] == row["extra_info"]["index"]
        assert item["data_source"] == row["data_source"]
        assert item["reward_model"] == row["reward_model"]
        assert item["raw_prompt"] == row["prompt"]


def test_keys_other_rows_have_do_not_leak_in(tmp_path, tiny_tokenizer, data_cfg_factory):
    rows = _user_rows()
    rows[1]["extra_info"]["tools_kwargs"] = {
        "calculator": _kwargs({"ground_truth": "x", "question": "Who wrote Hamlet?"})}
    ds = RLHFDataset(_write(tmp_path, rows), tiny_tokenizer, data_cfg_factory())
    assert ds[0]["tools_kwargs"] == rows[0]["extra_info"]["tools_kwargs"]  # no "question": None
    assert ds[1]["tools_kwargs"] == rows[1]["extra_info"]["tools_kwargs"]


def test_pandas_written_file_with_interaction_kwargs(tmp_path, tiny_tokenizer, data_cfg_factory):
    rows = _user_rows()
    for row in rows:
        row["extra_info"]["interaction_kwargs"] = {"name": "gsm8k", "query": "q"}
    path = tmp_path / "pandas.parquet"
    pd.DataFrame(rows).to_parquet(path)
    ds = RLHFDataset([path], tiny_tokenizer, data_cfg_factory())
    assert ds[1]["interaction_kwargs"] == {"name": "gsm8k", "query": "q"}
    assert ds[1]["tools_kwargs"] == rows[1]["extra_info"]["tools_kwargs"]


def test_prompt_is_the_chat_template_left_padded(tmp_path, tiny_tokenizer, data_cfg_factory):
    rows = _user_rows()
    ds = RLHFDataset(_write(tmp_path, rows), tiny_tokenizer, data_cfg_factory(
        "data.return_full_prompt=true"))
    item = ds[0]
    text = tiny_tokenizer.apply_chat_template(rows[0]["prompt"], tokenize=False,
                                              add_generation_prompt=True)
    assert item["full_prompts"] == text
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert item["raw_prompt_ids"] == ids
    n_pad = 400 - len(ids)
    assert item["input_ids"].shape == item["attention_mask"].shape == (400,)
    assert item["input_ids"][:n_pad].eq(tiny_tokenizer.pad_token_id).all()
    assert item["input_ids"][n_pad:].tolist() == ids
    assert item["attention_mask"].tolist() == [0] * n_pad + [1] * len(ids)
    assert item["position_ids"].tolist() == [0] * n_pad + list(range(len(ids)))


def test_tool_schemas_rendered_are_those_the_row_names(tmp_path, tiny_tokenizer, data_cfg_factory):
    rows = _user_rows()
    rows.append({**rows[0], "extra_info": {"index": 12, "split": "train", "tools_kwargs": None}})
    ds = RLHFDataset(_write(tmp_path, rows), tiny_tokenizer, data_cfg_factory(
        "data.return_full_prompt=true", tools=True))
    calc = json.dumps(TOOLS_YAML["tools"][0]["tool_schema"]["function"]["name"])
    assert '"name": ' + calc in ds[0]["full_prompts"]
    assert '"name": "search"' not in ds[0]["full_prompts"]
    assert '"name": "search"' in ds[1]["full_prompts"]
    assert '"name": "calculator"' not in ds[1]["full_prompts"]
    both = ds[2]["full_prompts"]  # no tools_kwargs: every configured tool is offered
    assert '"name": "calculator"' in both and '"name": "search"' in both
    assert ds[2]["tools_kwargs"] == {}


@pytest.mark.parametrize("mode", ["all", "none"])
def test_tool_schemas_in_prompt_all_or_none(tmp_path, tiny_tokenizer, data_cfg_factory, mode):
    ds = RLHFDataset(_write(tmp_path, _user_rows()), tiny_tokenizer, data_cfg_factory(
        "data.return_full_prompt=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_schemas_in_prompt={mode}", tools=True))
    for i in range(2):
        prompt = ds[i]["full_prompts"]
        shown = {name for name in ("calculator", "search") if f'"name": "{name}"' in prompt}
        assert shown == ({"calculator", "search"} if mode == "all" else set())
        assert ds[i]["tools_kwargs"]  # the tools still run: their kwargs are kept
    if mode == "none":  # exactly the prompt of a model that never saw a schema
        messages = _user_rows()[0]["prompt"]
        assert ds[0]["full_prompts"] == tiny_tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True)


def test_tool_schemas_in_prompt_rejects_other_values(data_cfg_factory):
    from agentrl.config import ConfigError

    with pytest.raises(ConfigError, match="tool_schemas_in_prompt"):
        data_cfg_factory("actor_rollout_ref.rollout.multi_turn.tool_schemas_in_prompt=some")


def test_truncation_sides():
    ids = list(range(10))
    assert truncate_ids(ids, 4, "left", "r") == [6, 7, 8, 9]
    assert truncate_ids(ids, 4, "right", "r") == [0, 1, 2, 3]
    assert truncate_ids(ids, 5, "middle", "r") == [0, 1, 7, 8, 9]
    assert truncate_ids(ids, 10, "error", "r") == ids
    with pytest.raises(RowError, match="r: prompt is 10 tokens, longer than data.max_prompt_length=9"):
        truncate_ids(ids, 9, "error", "r")


def test_left_pad_shapes_and_positions():
    input_ids, mask, pos = left_pad([7, 8, 9], 5, 0)
    assert input_ids.tolist() == [0, 0, 7, 8, 9]
    assert mask.tolist() == [0, 0, 1, 1, 1]
    assert pos.tolist() == [0, 0, 0, 1, 2]
    assert input_ids.dtype == mask.dtype == pos.dtype == torch.long


def test_overlong_row_errors_or_is_truncated_or_filtered(tmp_path, tiny_tokenizer, data_cfg_factory):
    rows = _user_rows()
    rows[1]["prompt"] = [{"role": "user", "content": "word " * 500}]
    path = _write(tmp_path, rows)
    ds = RLHFDataset(path, tiny_tokenizer, data_cfg_factory())
    ds[0]
    with pytest.raises(RowError, match="row 1: prompt is .* tokens, longer than data.max_prompt_length=400"):
        ds[1]
    left = RLHFDataset(path, tiny_tokenizer, data_cfg_factory("data.truncation=left"))[1]
    assert len(left["raw_prompt_ids"]) == 400 and left["attention_mask"].all()
    assert tiny_tokenizer.decode(left["raw_prompt_ids"]).endswith("<|im_start|>assistant\n")
    filtered = RLHFDataset(path, tiny_tokenizer, data_cfg_factory("data.filter_overlong_prompts=true"))
    assert len(filtered) == 1 and filtered[0]["data_source"] == "user/calc"


def test_several_files_concatenate(tmp_path, tiny_tokenizer, data_cfg_factory):
    rows = _user_rows()
    a, b = _write(tmp_path, rows[:1], "a.parquet"), _write(tmp_path, rows[1:], "b.parquet")
    ds = RLHFDataset([a, b], tiny_tokenizer, data_cfg_factory())
    assert [ds[i]["data_source"] for i in range(len(ds))] == ["user/calc", "user/search"]


@pytest.mark.parametrize("mutate,fragment", [
    (lambda r: r.update(prompt="What is 2+2?"), "'prompt' must be a list of {'role', 'content'} messages, got str"),
    (lambda r: r.update(prompt=[{"role": "robot", "content": "x"}]), "'prompt'[0] has role 'robot'"),
    (lambda r: r.update(prompt=[{"role": "user", "content": None}]), "'prompt'[0] (user) must have string 'content'"),
    (lambda r: r.update(prompt=[]), "'prompt' is an empty list"),
    (lambda r: r.update(prompt=["hi"]), "'prompt'[0] must be a message mapping with 'role' and 'content', got str"),
    (lambda r: r["extra_info"].update(tools_kwargs="search"), "extra_info.tools_kwargs must be a mapping of tool name"),
    (lambda r: r["extra_info"].update(tools_kwargs={"search": {"create": {"q": 1}}}), "extra_info.tools_kwargs['search'] has unknown keys ['create']"),
    (lambda r: r["extra_info"].update(tools_kwargs={"search": {"create_kwargs": "q"}}), "extra_info.tools_kwargs['search']['create_kwargs'] must be a mapping"),
    (lambda r: r["extra_info"].update(tools_kwargs={"search": ["create_kwargs"]}), "extra_info.tools_kwargs['search'] must be a mapping"),
    (lambda r: r["extra_info"].update(interaction_kwargs="gsm8k"), "extra_info.interaction_kwargs must be a mapping"),
    (lambda r: r.update(extra_info="train"), "'extra_info' must be a mapping, got str"),
])
def test_bad_rows_name_the_row_and_problem(tmp_path, tiny_tokenizer, data_cfg_factory, mutate, fragment):
    # Every row gets the same malformation (a parquet column has one type), so row 0 fails.
    rows = [dict(r, extra_info=dict(r["extra_info"], tools_kwargs=None)) for r in _user_rows()]
    for row in rows:
        mutate(row)
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(RowError) as err:
        RLHFDataset(path, tiny_tokenizer, data_cfg_factory())
    assert "bad.parquet row 0: " + fragment in str(err.value)


def test_bad_row_in_the_middle_is_named_by_its_index(tmp_path, tiny_tokenizer, data_cfg_factory):
    rows = _user_rows() * 2
    rows[3] = dict(rows[3], prompt=None)
    with pytest.raises(RowError, match="user.parquet row 3: missing 'prompt'"):
        RLHFDataset(_write(tmp_path, rows), tiny_tokenizer, data_cfg_factory())


def test_unknown_tool_in_tools_kwargs(tmp_path, tiny_tokenizer, data_cfg_factory):
    rows = _user_rows()
    rows[1]["extra_info"]["tools_kwargs"] = {"serch": _kwargs({"ground_truth": "x"})}
    with pytest.raises(RowError, match=r"row 1: extra_info.tools_kwargs names tools \['serch'\] "
                                       r"that the tool config does not define \(defined: calculator, search\)"):
        RLHFDataset(_write(tmp_path, rows), tiny_tokenizer, data_cfg_factory(tools=True))


def test_missing_file_and_missing_prompt_column(tmp_path, tiny_tokenizer, data_cfg_factory):
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        RLHFDataset(tmp_path / "nope.parquet", tiny_tokenizer, data_cfg_factory())
    path = _write(tmp_path, [{"question": "q"}], "noprompt.parquet")
    with pytest.raises(RowError, match="no 'prompt' column .*columns: question"):
        RLHFDataset(path, tiny_tokenizer, data_cfg_factory())


def test_arithmetic_rows_from_the_generator_load(tmp_path, tiny_tokenizer, data_cfg_factory):
    from agentrl.tasks.arithmetic import write_arithmetic_dataset

    train, _ = write_arithmetic_dataset(tmp_path, n_train=6, n_test=2, seed=0)
    ds = RLHFDataset(train, tiny_tokenizer, data_cfg_factory("data.max_prompt_length=1024",
                                                             tools=True))
    item = ds[0]
    assert set(item["tools_kwargs"]) == {"calculator"}
    assert item["tools_kwargs"]["calculator"]["execute_kwargs"] == {}
    assert item["data_source"] == "agentrl/arithmetic"
