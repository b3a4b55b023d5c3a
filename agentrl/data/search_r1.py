"""Search-R1's released data as verl rows for the ``search`` tool, its corpus for the retriever.

Search-R1 (Jin et al. 2025, "Search-R1: Training LLMs to Reason and Leverage Search Engines
with Reinforcement Learning", arXiv:2503.09516) releases three kinds of files; each has a
reader here that checks every row and raises ``SearchR1DataError`` naming the file, the row
(or line) and the field of the first bad one:

- its QA parquet files (``PeterJinGo/nq_hotpotqa_train``, or what its
  ``scripts/data_process/nq_search.py`` writes): columns ``id``, ``question``,
  ``golden_answers``, ``data_source`` (``nq``, ``hotpotqa``, ...), ``prompt``, ``ability``,
  ``reward_model {style, ground_truth: {target: [...]}}``, ``extra_info {split, index}``
  -> :func:`read_search_r1_parquet`;
- jsonl questions ``{"id", "question", "golden_answers"}`` (FlashRAG's files)
  -> :func:`read_search_r1_jsonl`;
- the corpus ``wiki-18.jsonl`` (or ``.jsonl.gz``), one passage a line,
  ``{"id": "0", "contents": "\\"Title\\"\\ntext"}`` -> :func:`read_search_r1_corpus`,
  which yields the retriever's documents (envs/retriever reads that format).

Every QA row becomes one row of our format (docs/data.md), :func:`make_search_row`: the
prompt is Search-R1's template (``nq_search.py``'s ``make_prefix``) with one sentence
changed, because here the model searches with a tool call rather than ``<search>`` tags;
the ground truth ``{"target": [answers]}`` goes to ``reward_model`` (the exact-match scorer)
and to the search tool's ``create_kwargs``. Empty kwargs dicts are left out (parquet cannot
store an empty struct; a missing key means ``{}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.utils.jsonl import JsonlError, read_jsonl

ABILITY = "fact-reasoning"
TOOL_NAME = "search"
# Search-R1's make_prefix, word for word (its "as your want" included) except the search
# sentence: "you can call a search engine by <search> query </search> and it will return the
# top searched results between <information> and </information>".
INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> "
    "first every time you get new information. After reasoning, if you find you lack some "
    "knowledge, you can call the `search` tool with a list of queries and it will return the "
    "top searched results. You can search as many times as your want. If you find no "
    "further external knowledge needed, you can directly provide the answer inside <answer> "
    "and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
)
ANSWER_KEYS = ("golden_answers", "answers", "answer")


class SearchR1DataError(ValueError):
    """A Search-R1 file is missing or malformed; the message names the file, row and field."""


def normalize_question(question: str) -> str:
    """Strip whitespace and make the question end with a question mark (as Search-R1 does)."""
    question = question.strip()
    return question if question.endswith("?") else question + "?"


def make_search_row(
    question: str, answers: list[str], data_source: str, index: int, split: str,
    ability: str = ABILITY,
) -> dict[str, Any]:
    """One verl row asking ``question`` with the search tool; ``answers`` are the targets."""
    question = normalize_question(question)
    ground_truth = {"target": list(answers)}
    create_kwargs = {"ground_truth": ground_truth, "question": question, "data_source": data_source}
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{INSTRUCTION}Question: {question}\n"}],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": index,
            "split": split,
            "question": question,
            "need_tools_kwargs": True,
            "tools_kwargs": {TOOL_NAME: {"create_kwargs": create_kwargs}},
        },
    }


def infer_data_source(path: Path) -> str:
    """``searchR1_hotpotqa`` or ``searchR1_nq`` from a file name."""
    name = path.name.lower()
    if "hotpot" in name:
        return "searchR1_hotpotqa"
    if re.search(r"(^|[^a-z])nq([^a-z]|$)", name):
        return "searchR1_nq"
    raise SearchR1DataError(
        f"{path}: cannot tell the data source from the file name; pass --data_source"
    )


# --- QA rows ---------------------------------------------------------------------------


def _question(record: Mapping[str, Any]) -> str:
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("missing or empty string field 'question'")
    return question


def _answer_list(value: Any, field: str) -> list[str]:
    """A list of answer strings from a list (or one string / number); ValueError names ``field``."""
    answers = list(value) if isinstance(value, (list, tuple)) else [value]
    if not answers:
        raise ValueError(f"field {field!r} is an empty list")
    for answer in answers:
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise ValueError(f"field {field!r} holds a non-text answer: {answer!r}")
    return [str(answer) for answer in answers]


def jsonl_record_answers(record: Mapping[str, Any]) -> list[str]:
    """The answers of a jsonl record: ``golden_answers``, ``answers`` or ``answer``."""
    key = next((k for k in ANSWER_KEYS if k in record), None)
    if key is None:
        raise ValueError(f"missing answer field (one of {', '.join(ANSWER_KEYS)})")
    return _answer_list(record[key], key)


def parquet_row_answers(row: Mapping[str, Any]) -> list[str]:
    """The targets of a Search-R1 parquet row: ``reward_model.ground_truth.target`` (what
    Search-R1 scores against), else ``golden_answers``."""
    reward_model = row.get("reward_model")
    if reward_model is None:
        if row.get("golden_answers") is None:
            raise ValueError(
                "missing field 'reward_model.ground_truth.target' (or 'golden_answers')"
            )
        return _answer_list(row["golden_answers"], "golden_answers")
    if not isinstance(reward_model, Mapping):
        raise ValueError(
            f"field 'reward_model' must be a mapping, got {type(reward_model).__name__}"
        )
    ground_truth = reward_model.get("ground_truth")
    if not isinstance(ground_truth, Mapping):
        raise ValueError(
            "field 'reward_model.ground_truth' must be a mapping {'target': [answers]}, got "
            f"{type(ground_truth).__name__}"
        )
    if ground_truth.get("target") is None:
        raise ValueError("missing field 'reward_model.ground_truth.target'")
    return _answer_list(ground_truth["target"], "reward_model.ground_truth.target")


def row_from_jsonl_record(
    record: Mapping[str, Any], index: int, split: str, data_source: str
) -> dict[str, Any]:
    """Our row from a jsonl question record; ``ValueError`` names a missing or bad field."""
    return make_search_row(
        _question(record), jsonl_record_answers(record), data_source, index, split
    )


def row_from_parquet_row(
    row: Mapping[str, Any], index: int, split: str, data_source: str | None = None
) -> dict[str, Any]:
    """Our row from a row of Search-R1's parquet; its ``data_source`` and ``ability`` are
    kept unless ``data_source`` is given. ``ValueError`` names a missing or bad field."""
    question = _question(row)
    answers = parquet_row_answers(row)
    if data_source is None:
        data_source = row.get("data_source")
        if not isinstance(data_source, str) or not data_source:
            raise ValueError("missing or empty string field 'data_source' (or pass --data_source)")
    ability = row.get("ability")
    if ability is not None and not isinstance(ability, str):
        raise ValueError(f"field 'ability' must be a string, got {type(ability).__name__}")
    return make_search_row(question, answers, data_source, index, split, ability or ABILITY)


def read_search_r1_jsonl(
    path: str | Path, split: str, data_source: str | None = None
) -> list[dict]:
    """Our rows from a jsonl question file (``data_source`` from the file name if not given)."""
    path = Path(path)
    source = data_source or infer_data_source(path)
    rows: list[dict] = []
    try:
        for lineno, record in read_jsonl(path):
            try:
                rows.append(row_from_jsonl_record(record, len(rows), split, source))
            except ValueError as exc:
                raise SearchR1DataError(f"{path}, line {lineno}: {exc}") from None
    except JsonlError as exc:
        raise SearchR1DataError(str(exc)) from None
    if not rows:
        raise SearchR1DataError(f"{path}: no records")
    return rows


def read_search_r1_parquet(
    path: str | Path, split: str, data_source: str | None = None
) -> list[dict]:
    """Our rows from one of Search-R1's parquet files; rows are numbered from 0 in messages.

    ``index`` is the row's position in the file (Search-R1's own index restarts for every
    data source of a merged file) and ``split`` the one given.
    """
    path = Path(path)
    if not path.is_file():
        raise SearchR1DataError(f"{path}: no such file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise SearchR1DataError(f"{path}: not a readable parquet file ({exc})") from None
    if "question" not in table.column_names:
        raise SearchR1DataError(
            f"{path}: no 'question' column (columns: {', '.join(table.column_names)}); "
            "expected Search-R1's id, question, golden_answers, data_source, prompt, ability, "
            "reward_model, extra_info"
        )
    rows = []
    for i, row in enumerate(table.to_pylist()):
        try:
            rows.append(row_from_parquet_row(row, i, split, data_source))
        except ValueError as exc:
            raise SearchR1DataError(f"{path}, row {i}: {exc}") from None
    if not rows:
        raise SearchR1DataError(f"{path}: no rows")
    return rows


def read_search_r1_file(path: str | Path, split: str, data_source: str | None = None) -> list[dict]:
    """Our rows from a Search-R1 ``.parquet`` or ``.jsonl`` question file."""
    path = Path(path)
    if path.suffix == ".parquet":
        return read_search_r1_parquet(path, split, data_source)
    return read_search_r1_jsonl(path, split, data_source)


# --- corpus ----------------------------------------------------------------------------


def corpus_document(record: Any, lineno: int) -> dict[str, str]:
    """The retriever document ``{"id", "contents"}`` of one corpus line.

    ``contents`` is Search-R1's ``'"Title"\\ntext'``; a line with ``title`` and ``text``
    instead is joined that way. A missing ``id`` becomes the line's position (from 0), as the
    retriever does. ``ValueError`` names the bad field.
    """
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    doc_id = record.get("id", lineno - 1)
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
        raise ValueError(f"field 'id' must be a string or an integer, got {type(doc_id).__name__}")
    if "contents" in record:
        contents = record["contents"]
        if not isinstance(contents, str) or not contents.strip():
            raise ValueError(
                f"field 'contents' must be a non-empty string, got {contents!r:.60}"
            )
    elif "text" in record:
        title, text = record.get("title", ""), record["text"]
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"field 'text' must be a non-empty string, got {text!r:.60}")
        if not isinstance(title, str):
            raise ValueError(f"field 'title' must be a string, got {type(title).__name__}")
        contents = f'"{title}"\n{text}'
    else:
        raise ValueError(
            "missing field 'contents' (a string '\"Title\"\\ntext'; or 'title' and 'text')"
        )
    return {"id": str(doc_id), "contents": contents}


def read_search_r1_corpus(path: str | Path) -> Iterator[dict[str, str]]:
    """Yield the documents of a Search-R1 corpus (``.jsonl`` or ``.jsonl.gz``), streaming."""
    records = read_jsonl(path)
    while True:
        try:
            lineno, record = next(records)
        except StopIteration:
            return
        except JsonlError as exc:  # a missing file or a line that is not a JSON object
            raise SearchR1DataError(str(exc)) from None
        try:
            yield corpus_document(record, lineno)
        except ValueError as exc:
            raise SearchR1DataError(f"{path}, line {lineno}: {exc}") from None


def write_retriever_corpus(
    source: str | Path, out_path: str | Path, max_docs: int | None = None
) -> int:
    """Check ``source`` and write its first ``max_docs`` (all if None) documents to
    ``out_path`` as the retriever's jsonl; returns the number written.

    The output is written to a temporary file and renamed when complete, so a bad line
    leaves no half-written corpus behind.
    """
    out_path = Path(out_path).expanduser()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".tmp")
    count = 0
    try:
        with tmp.open("w", encoding="utf-8") as sink:
            for doc in read_search_r1_corpus(source):
                if max_docs is not None and count >= max_docs:
                    break
                sink.write(json.dumps(doc, ensure_ascii=False) + "\n")
                count += 1
        if count == 0:
            raise SearchR1DataError(f"{source}: no documents")
        tmp.replace(out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return count
