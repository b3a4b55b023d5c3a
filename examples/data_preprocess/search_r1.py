"""Convert Search-R1 NQ / HotpotQA jsonl files into verl parquet rows for the search tool.

Usage:

    python examples/data_preprocess/search_r1.py --train_file nq/train.jsonl \
        --test_file nq/test.jsonl --local_dir ~/data/searchR1_nq [--data_source searchR1_nq]

Each input line is ``{"id": ..., "question": ..., "golden_answers": [...]}`` (the format of
Search-R1's NQ and HotpotQA files; ``"answers"`` or ``"answer"`` are accepted instead of
``"golden_answers"``). Each given file becomes ``train.parquet`` or ``test.parquet`` in
``--local_dir``. Without ``--data_source`` the source is read from the file name
(``hotpot`` -> ``searchR1_hotpotqa``, ``nq`` -> ``searchR1_nq``).

The prompt follows Search-R1 (Jin et al., 2025, "Search-R1: Training LLMs to Reason and
Leverage Search Engines with Reinforcement Learning"): reason inside <think></think>, call
the ``search`` tool when knowledge is missing, answer inside <answer></answer>. Where we
depart: the search is a tool call rather than <search> tags in the text. The ground truth is
``{"target": [answers...]}`` and ``tools_kwargs`` carries it to the search tool. Empty kwargs
dicts are left out because parquet cannot store an empty struct; a missing key means ``{}``
(see docs/data.md).

The script is self-contained on purpose, so it can be copied and adapted to other data.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from agentrl.utils.jsonl import JsonlError, read_jsonl, write_parquet

logger = logging.getLogger("data_preprocess.search_r1")

ABILITY = "fact-reasoning"
INSTRUCTION = (
    "Answer the given question. Reason inside <think> and </think> first, and again every "
    "time you get new information. If you find you lack some knowledge, call the `search` "
    "tool with a query and it returns the top results; you can search as many times as you "
    "want. When you need no more external knowledge, give the answer inside <answer> and "
    "</answer> without a detailed explanation, for example <answer> Beijing </answer>. "
)
ANSWER_KEYS = ("golden_answers", "answers", "answer")


def infer_data_source(path: Path) -> str:
    """``searchR1_hotpotqa`` or ``searchR1_nq`` from a file name; ``JsonlError`` otherwise."""
    name = path.name.lower()
    if "hotpot" in name:
        return "searchR1_hotpotqa"
    if re.search(r"(^|[^a-z])nq([^a-z]|$)", name):
        return "searchR1_nq"
    raise JsonlError(f"{path}: cannot tell the data source from the file name; pass --data_source")


def normalize_question(question: str) -> str:
    """Strip whitespace and make the question end with a question mark."""
    question = question.strip()
    return question if question.endswith("?") else question + "?"


def extract_answers(record: dict) -> list[str]:
    """The gold answers of a record as a non-empty list of strings."""
    key = next((k for k in ANSWER_KEYS if k in record), None)
    if key is None:
        raise ValueError(f"missing answer field (one of {', '.join(ANSWER_KEYS)})")
    value = record[key]
    answers = value if isinstance(value, list) else [value]
    if not answers:
        raise ValueError(f"field {key!r} is an empty list")
    for answer in answers:
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise ValueError(f"field {key!r} holds a non-text answer: {answer!r}")
    return [str(answer) for answer in answers]


def make_row(record: dict, index: int, split: str, data_source: str) -> dict:
    """One verl row from a Search-R1 record; ``ValueError`` names a missing or bad field."""
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("missing or empty string field 'question'")
    question = normalize_question(question)
    ground_truth = {"target": extract_answers(record)}
    create_kwargs = {"ground_truth": ground_truth, "question": question, "data_source": data_source}
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{INSTRUCTION}Question: {question}\n"}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": index,
            "split": split,
            "question": question,
            "need_tools_kwargs": True,
            "tools_kwargs": {"search": {"create_kwargs": create_kwargs}},
        },
    }


def convert_file(path: Path, split: str, data_source: str | None) -> list[dict]:
    """All rows of one jsonl file; ``JsonlError`` names the file and line of a bad record."""
    source = data_source or infer_data_source(path)
    rows = []
    for lineno, record in read_jsonl(path):
        try:
            rows.append(make_row(record, len(rows), split, source))
        except ValueError as exc:
            raise JsonlError(f"{path}, line {lineno}: {exc}") from None
    if not rows:
        raise JsonlError(f"{path}: no records")
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_file", type=Path, help="Search-R1 jsonl for the train split")
    parser.add_argument("--test_file", type=Path, help="Search-R1 jsonl for the test split")
    parser.add_argument("--local_dir", default="~/data/searchR1", help="output directory")
    parser.add_argument(
        "--data_source",
        default=None,
        help="data_source of every row (default: from the file name, searchR1_nq or "
        "searchR1_hotpotqa)",
    )
    args = parser.parse_args(argv)
    if args.train_file is None and args.test_file is None:
        parser.error("give at least one of --train_file, --test_file")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    out_dir = Path(args.local_dir).expanduser()
    splits = [("train", args.train_file), ("test", args.test_file)]
    try:
        converted = [
            (split, convert_file(path, split, args.data_source))
            for split, path in splits
            if path is not None
        ]
    except JsonlError as exc:
        logger.error("%s", exc)
        return 1
    for split, rows in converted:
        out_path = out_dir / f"{split}.parquet"
        write_parquet(rows, out_path)
        logger.info("%s: wrote %d rows to %s", split, len(rows), out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
