"""Convert GSM8K-format jsonl files into verl parquet rows.

Usage:

    python examples/data_preprocess/gsm8k.py --train_file gsm8k/train.jsonl \
        --test_file gsm8k/test.jsonl --local_dir ~/data/gsm8k [--with_tools]

Each input line is ``{"question": ..., "answer": ...}`` with the answer ending in
``#### 42`` (the format of openai/gsm8k). Each given file becomes ``train.parquet`` or
``test.parquet`` in ``--local_dir``. The ground truth is the number after ``####`` with
commas removed. ``--with_tools`` adds a system message about the ``calculator`` tool and
``tools_kwargs`` for it. Empty kwargs dicts are left out of ``tools_kwargs`` because parquet
cannot store an empty struct; a missing key means ``{}`` (see docs/data.md).

The script is self-contained on purpose, so it can be copied and adapted to other data.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from agentrl.utils.jsonl import JsonlError, read_jsonl, write_parquet

logger = logging.getLogger("data_preprocess.gsm8k")

DATA_SOURCE = "openai/gsm8k"
ABILITY = "math"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SYSTEM_PROMPT = (
    "You are a math expert. Solve the problem step by step. You can call the `calculator` "
    "tool, which evaluates an arithmetic expression (numbers, + - * / and parentheses) "
    'exactly; use it for the computations. Output the final answer after "####".'
)
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def _text_field(record: dict, key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"missing or empty string field {key!r}")
    return value


def extract_solution(answer: str) -> str:
    """The number after the last ``####`` of a GSM8K answer, commas removed."""
    if "####" not in answer:
        raise ValueError("field 'answer' has no '#### <number>' final answer")
    solution = answer.rsplit("####", 1)[1].strip().replace(",", "")
    if not _NUMBER.fullmatch(solution):
        raise ValueError(f"final answer after '####' is not a number: {solution!r}")
    return solution


def make_row(record: dict, index: int, split: str, with_tools: bool) -> dict:
    """One verl row from a GSM8K record; ``ValueError`` names a missing or bad field."""
    question, answer = _text_field(record, "question"), _text_field(record, "answer")
    solution = extract_solution(answer)
    prompt = [{"role": "user", "content": f"{question} {INSTRUCTION}"}]
    extra_info: dict = {"index": index, "split": split, "question": question, "answer": answer}
    if with_tools:
        prompt.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
        extra_info["tools_kwargs"] = {"calculator": {"create_kwargs": {"ground_truth": solution}}}
    return {
        "data_source": DATA_SOURCE,
        "prompt": prompt,
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": solution},
        "extra_info": extra_info,
    }


def convert_file(path: Path, split: str, with_tools: bool) -> list[dict]:
    """All rows of one jsonl file; ``JsonlError`` names the file and line of a bad record."""
    rows = []
    for lineno, record in read_jsonl(path):
        try:
            rows.append(make_row(record, len(rows), split, with_tools))
        except ValueError as exc:
            raise JsonlError(f"{path}, line {lineno}: {exc}") from None
    if not rows:
        raise JsonlError(f"{path}: no records")
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_file", type=Path, help="GSM8K-format jsonl for the train split")
    parser.add_argument("--test_file", type=Path, help="GSM8K-format jsonl for the test split")
    parser.add_argument("--local_dir", default="~/data/gsm8k", help="output directory")
    parser.add_argument(
        "--with_tools", action="store_true", help="add the calculator system message and tools"
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
            (split, convert_file(path, split, args.with_tools))
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
