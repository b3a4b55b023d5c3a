"""Tests for examples/data_preprocess/search_r1.py on Search-R1's released formats: its QA
parquet files become our parquet rows (read back with `datasets` and pandas), its corpus
becomes the retriever's corpus and index; a bad file writes nothing and names the problem.
(The jsonl input is tested in test_data_preprocess.py.)"""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import datasets
import numpy as np
import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "data_preprocess" / "search_r1.py"
PREFIX = "Answer the given question. You must conduct reasoning inside <think> and </think> ..."


def load_script():
    spec = importlib.util.spec_from_file_location("data_preprocess_search_r1", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def search_r1_row(id_, question, answers, data_source, split, index) -> dict:
    """One row of Search-R1's nq_hotpotqa_train parquet (nq_search.py's process_fn)."""
    return {
        "id": id_, "question": question, "golden_answers": answers,
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{PREFIX} Question: {question}\n"}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"split": split, "index": index},
    }


TRAIN = [
    search_r1_row("train_0", "total number of death row inmates in the us?", ["2,718"], "nq",
                  "train", 0),
    search_r1_row("5a7a06935542990198eaf050", "Which magazine was started first Arthur's "
                  "Magazine or First for Women?", ["Arthur's Magazine"], "hotpotqa", "train", 0),
]
TEST = [
    search_r1_row("test_0", "who got the first nobel prize in physics?",
                  ["Wilhelm Conrad Röntgen"], "nq", "test", 0),
    search_r1_row("test_1", "when is the next deadpool movie being released?",
                  ["May 18, 2018"], "nq", "test", 1),
]
WIKI_18 = [
    {"id": "0", "contents": '"Paris"\nParis is the capital and most populous city of France.'},
    {"id": "1", "contents": '"Berlin"\nBerlin is the capital and largest city of Germany.'},
]


def expected(row: dict, index: int, split: str) -> dict:
    script = load_script()
    question, answers = row["question"], row["golden_answers"]
    gt = {"target": answers}
    return {
        "data_source": row["data_source"],
        "prompt": [{"role": "user", "content": f"{script.INSTRUCTION}Question: {question}\n"}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": gt},
        "extra_info": {
            "index": index, "split": split, "question": question, "need_tools_kwargs": True,
            "tools_kwargs": {"search": {"create_kwargs": {
                "ground_truth": gt, "question": question, "data_source": row["data_source"],
            }}},
        },
    }


def to_python(value):
    if isinstance(value, np.ndarray):
        return [to_python(v) for v in value]
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    return value


def read_back(path: Path, cache_dir: Path) -> list[dict]:
    rows = datasets.load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(cache_dir)
    ).to_list()
    assert [to_python(r) for r in pd.read_parquet(path).to_dict("records")] == rows
    return rows


@pytest.fixture
def files(tmp_path):
    src = tmp_path / "nq_hotpotqa_train"
    src.mkdir()
    datasets.Dataset.from_list(TRAIN).to_parquet(str(src / "train.parquet"))
    datasets.Dataset.from_list(TEST).to_parquet(str(src / "test.parquet"))
    corpus = src / "wiki-18.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in WIKI_18), encoding="utf-8")
    return src


def test_parquet_and_corpus_to_rows_corpus_and_index(tmp_path, files):
    out = tmp_path / "out"
    argv = [
        "--train_file", str(files / "train.parquet"), "--test_file", str(files / "test.parquet"),
        "--corpus", str(files / "wiki-18.jsonl"), "--local_dir", str(out),
        "--index_dir", str(out / "index"),
    ]
    assert load_script().main(argv) == 0
    assert read_back(out / "train.parquet", tmp_path / "hf") == [
        expected(row, i, "train") for i, row in enumerate(TRAIN)
    ]
    assert read_back(out / "test.parquet", tmp_path / "hf") == [
        expected(row, i, "test") for i, row in enumerate(TEST)
    ]
    lines = (out / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == WIKI_18

    from envs.retriever.index import load_index

    index = load_index(out / "index")
    ((doc, _),) = index.search(["capital of Germany"], topk=1)[0]
    assert doc == WIKI_18[1]


def test_rows_pass_the_dataset_checks(tmp_path, files, tiny_tokenizer):
    from agentrl.config import load_config
    from agentrl.data import RLHFDataset

    out = tmp_path / "out"
    assert load_script().main(["--train_file", str(files / "train.parquet"),
                               "--local_dir", str(out)]) == 0
    tool_config = SCRIPT.parents[2] / "recipes" / "search_r1" / "search_tool.yaml"
    config = load_config(None, ["data.max_prompt_length=1024",
                                f"data.tool_config_path={tool_config}"])
    item = RLHFDataset(str(out / "train.parquet"), tiny_tokenizer, config.data)[1]
    assert item["tools_kwargs"]["search"]["create_kwargs"]["ground_truth"] == {
        "target": ["Arthur's Magazine"]
    }
    assert '"name": "search"' in tiny_tokenizer.decode(item["raw_prompt_ids"])


def test_bad_row_names_file_row_and_field_and_writes_nothing(tmp_path, files, caplog):
    bad = tmp_path / "bad.parquet"
    rows = [TRAIN[0], {**TRAIN[1], "reward_model": {"style": "rule",
                                                     "ground_truth": {"target": []}}}]
    datasets.Dataset.from_list(rows).to_parquet(str(bad))
    out = tmp_path / "out"
    argv = ["--train_file", str(files / "train.parquet"), "--test_file", str(bad),
            "--corpus", str(files / "wiki-18.jsonl"), "--local_dir", str(out)]
    with caplog.at_level(logging.ERROR):
        assert load_script().main(argv) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [f"{bad}, row 1: field 'reward_model.ground_truth.target' is an empty list"]
    assert not out.exists()


def test_bad_corpus_line_writes_nothing(tmp_path, files, caplog):
    corpus = files / "wiki-18.jsonl"
    corpus.write_text(corpus.read_text() + '{"id": "2", "text": 7}\n')
    out = tmp_path / "out"
    with caplog.at_level(logging.ERROR):
        assert load_script().main(["--corpus", str(corpus), "--local_dir", str(out)]) == 1
    assert f"{corpus}, line 3: field 'text' must be a non-empty string" in caplog.text
    assert not (out / "corpus.jsonl").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give at least one of --train_file, --test_file or --corpus"),
        (["--corpus", "c.jsonl", "--max_docs", "0"], "--max_docs must be >= 1, got 0"),
        (["--train_file", "t.parquet", "--index_dir", "i"], "--index_dir needs --corpus"),
        (["--corpus", "c.jsonl", "--index_dir", "i", "--index_kind", "dense"],
         "--index_kind dense needs --dense_model"),
    ],
)
def test_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        load_script().main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
