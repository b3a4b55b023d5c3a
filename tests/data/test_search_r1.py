"""Tests for agentrl/data/search_r1.py on files in Search-R1's released formats, built here:
the QA parquet its scripts/data_process/nq_search.py and qa_search_train_merge.py write
(datasets' to_parquet of FlashRAG rows plus data_source, prompt, ability, reward_model,
extra_info) and the wiki-18 corpus jsonl(.gz)."""

from __future__ import annotations

import gzip
import json

import datasets
import pytest

from agentrl.data.search_r1 import (
    INSTRUCTION,
    SearchR1DataError,
    make_search_row,
    read_search_r1_corpus,
    read_search_r1_file,
    read_search_r1_parquet,
    write_retriever_corpus,
)
from envs.retriever.index import read_corpus

# scripts/data_process/nq_search.py, make_prefix(template_type="base"), verbatim.
SEARCH_R1_PREFIX = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times "
    "as your want. If you find no further external knowledge needed, you can directly provide "
    "the answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>. Question: {question}\n"
)


def search_r1_row(id_, question, answers, data_source, split, index, metadata=None) -> dict:
    """A row as Search-R1's released parquet holds it (its process_fn on a FlashRAG row)."""
    return {
        "id": id_,
        "question": question,
        "golden_answers": answers,
        "metadata": metadata,
        "data_source": data_source,
        "prompt": [{"role": "user", "content": SEARCH_R1_PREFIX.format(question=question)}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"split": split, "index": index},
    }


# nq_hotpotqa_train's train.parquet: NQ rows, then HotpotQA rows (index restarts at 0).
TRAIN_ROWS = [
    search_r1_row("train_0", "total number of death row inmates in the us?", ["2,718"],
                  "nq", "train", 0),
    search_r1_row("train_1", "big little lies season 2 how many episodes?", ["seven"],
                  "nq", "train", 1),
    search_r1_row("5a7a06935542990198eaf050", "Which magazine was started first Arthur's "
                  "Magazine or First for Women?", ["Arthur's Magazine"], "hotpotqa", "train", 0,
                  {"type": "comparison", "level": "medium"}),
]


def write_search_r1_parquet(path, rows):
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def ours(question, answers, data_source, index, split="train") -> dict:
    create_kwargs = {"ground_truth": {"target": answers}, "question": question,
                     "data_source": data_source}
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{INSTRUCTION}Question: {question}\n"}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {
            "index": index, "split": split, "question": question, "need_tools_kwargs": True,
            "tools_kwargs": {"search": {"create_kwargs": create_kwargs}},
        },
    }


def test_prompt_is_search_r1s_with_the_search_sentence_for_the_tool():
    theirs = SEARCH_R1_PREFIX.format(question="q?")
    mine = make_search_row("q?", ["a"], "nq", 0, "train")["prompt"][0]["content"]
    search_sentence = (
        "you can call a search engine by <search> query </search> and it will return the top "
        "searched results between <information> and </information>."
    )
    tool_sentence = (
        "you can call the `search` tool with a list of queries and it will return the top "
        "searched results."
    )
    assert mine == theirs.replace(search_sentence, tool_sentence)


def test_parquet_rows_convert_exactly(tmp_path):
    path = write_search_r1_parquet(tmp_path / "train.parquet", TRAIN_ROWS)
    assert read_search_r1_parquet(path, "train") == [
        ours("total number of death row inmates in the us?", ["2,718"], "nq", 0),
        ours("big little lies season 2 how many episodes?", ["seven"], "nq", 1),
        ours("Which magazine was started first Arthur's Magazine or First for Women?",
             ["Arthur's Magazine"], "hotpotqa", 2),
    ]


def test_parquet_data_source_override_and_file_dispatch(tmp_path):
    path = write_search_r1_parquet(tmp_path / "test.parquet", TRAIN_ROWS[:1])
    (row,) = read_search_r1_file(path, "test", data_source="searchR1_nq")
    assert row == ours("total number of death row inmates in the us?", ["2,718"],
                       "searchR1_nq", 0, "test")


def test_parquet_without_reward_model_uses_golden_answers(tmp_path):
    rows = [{k: v for k, v in TRAIN_ROWS[0].items() if k != "reward_model"}]
    path = write_search_r1_parquet(tmp_path / "t.parquet", rows)
    (row,) = read_search_r1_parquet(path, "train")
    assert row["reward_model"]["ground_truth"] == {"target": ["2,718"]}


def bad(field, value):
    return [TRAIN_ROWS[0], {**TRAIN_ROWS[1], field: value}]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (bad("question", None), "row 1: missing or empty string field 'question'"),
        (bad("question", "  "), "row 1: missing or empty string field 'question'"),
        (bad("data_source", ""), "row 1: missing or empty string field 'data_source'"),
        (bad("reward_model", {"style": "rule", "ground_truth": {"target": []}}),
         "row 1: field 'reward_model.ground_truth.target' is an empty list"),
        (bad("reward_model", {"style": "rule", "ground_truth": None}),
         "row 1: field 'reward_model.ground_truth' must be a mapping"),
        (bad("reward_model", {"style": "rule", "ground_truth": {"target": None}}),
         "row 1: missing field 'reward_model.ground_truth.target'"),
    ],
)
def test_bad_parquet_row_names_file_row_and_field(tmp_path, rows, message):
    path = write_search_r1_parquet(tmp_path / "train.parquet", rows)
    with pytest.raises(SearchR1DataError) as err:
        read_search_r1_parquet(path, "train")
    assert str(err.value).startswith(f"{path}, {message}")


def test_not_search_r1_parquet(tmp_path):
    other = write_search_r1_parquet(tmp_path / "other.parquet", [{"query": "q", "answer": "a"}])
    with pytest.raises(SearchR1DataError, match="no 'question' column .*columns: query, answer"):
        read_search_r1_parquet(other, "train")
    text = tmp_path / "text.parquet"
    text.write_text("id,question\n")
    with pytest.raises(SearchR1DataError, match="text.parquet: not a readable parquet file"):
        read_search_r1_parquet(text, "train")
    with pytest.raises(SearchR1DataError, match="missing.parquet: no such file"):
        read_search_r1_parquet(tmp_path / "missing.parquet", "train")


# --- corpus ----------------------------------------------------------------------------

WIKI_18 = [  # wiki-18.jsonl lines as Search-R1 releases them
    {"id": "0", "contents": '"Aaron"\nAaron ( or ; "Ahärôn") is a prophet, high priest, and '
                            "the brother of Moses."},
    {"id": "1", "contents": '"Aaron"\nAccording to the Book of Exodus, Aaron first functioned '
                            "as Moses' assistant."},
    {"id": "2", "contents": '"Paris"\nParis is the capital and most populous city of France.'},
]


def write_lines(path, lines, compress=False):
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("compress", [False, True])
def test_corpus_reads_jsonl_and_gz(tmp_path, compress):
    path = write_lines(tmp_path / ("wiki-18.jsonl.gz" if compress else "wiki-18.jsonl"),
                       WIKI_18, compress)
    assert list(read_search_r1_corpus(path)) == WIKI_18


def test_corpus_title_text_and_integer_ids(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", [{"id": 5, "title": "T", "text": "body"}, "",
                                              {"contents": '"U"\nmore'}])
    assert list(read_search_r1_corpus(path)) == [
        {"id": "5", "contents": '"T"\nbody'},
        {"id": "2", "contents": '"U"\nmore'},  # no id: the line's position, as the retriever
    ]


def test_written_corpus_is_what_the_retriever_reads(tmp_path):
    source = write_lines(tmp_path / "wiki-18.jsonl.gz", WIKI_18, compress=True)
    out = tmp_path / "out" / "corpus.jsonl"
    assert write_retriever_corpus(source, out, max_docs=2) == 2
    assert list(read_corpus(out)) == WIKI_18[:2]
    assert write_retriever_corpus(source, out) == 3
    assert list(read_corpus(out)) == WIKI_18


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 3: invalid JSON"),
        ('["id", "contents"]', "line 3: expected a JSON object, got list"),
        ({"id": "2", "content": "typo"}, "line 3: missing field 'contents'"),
        ({"id": "2", "contents": ""}, "line 3: field 'contents' must be a non-empty string"),
        ({"id": "2", "contents": ["a"]}, "line 3: field 'contents' must be a non-empty string"),
        ({"id": {"x": 1}, "contents": "a"}, "line 3: field 'id' must be a string or an integer"),
        ({"id": "2", "title": 3, "text": "a"}, "line 3: field 'title' must be a string"),
    ],
)
def test_bad_corpus_line_names_file_line_and_field(tmp_path, line, message):
    path = write_lines(tmp_path / "wiki-18.jsonl", [*WIKI_18[:2], line, WIKI_18[2]])
    out = tmp_path / "corpus.jsonl"
    with pytest.raises(SearchR1DataError) as err:
        write_retriever_corpus(path, out)
    assert str(err.value).startswith(f"{path}, {message}")
    assert list(tmp_path.iterdir()) == [path]  # nothing half-written
