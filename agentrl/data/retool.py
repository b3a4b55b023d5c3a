"""ReTool-style math rows: a user's math file -> verl rows that solve problems with the
``code_interpreter`` sandbox tool (recipes/retool).

Input, read by :func:`convert_file`:

- jsonl, one ``{"question": ..., "answer": ...}`` per line (``problem``/``Problem`` and
  ``Answer`` are read too, as MATH and AIME 2024 files name them);
- parquet with those columns, or verl-format rows such as BytedTsinghua-SIA/DAPO-Math-17k
  and BytedTsinghua-SIA/AIME-2024: the question is the last user message with DAPO's
  instruction around it removed, the answer ``reward_model.ground_truth``.

Output rows (verl's format, docs/data.md)::

    data_source   "retool/math"  (scored by agentrl.reward.score.math: the last \\boxed{}
                                  equal to the answer after MATH normalisation -> 1, else 0)
    prompt        [{"role": "user", "content": PROMPT_TEMPLATE.format(question=...)}]
    ability       "math"
    reward_model  {"style": "rule", "ground_truth": answer}
    extra_info    {"index", "split", "question",
                   "tools_kwargs": {"code_interpreter": {"create_kwargs": {"ground_truth": answer}}}}

The prompt follows ReTool's template (Feng et al. 2025, "ReTool: Reinforcement Learning for
Strategic Tool Use in LLMs", arXiv:2504.11536): reason step by step, run Python in a sandbox
where a computation helps, give the final answer in ``\\boxed{}``. Where we depart: the
model calls the ``code_interpreter`` tool (a function call the rollout parses) instead of
writing ``<code>`` blocks that the rollout intercepts, so the output comes back as a tool
message rather than an ``<interpreter>`` block; the answer is the last ``\\boxed{}`` as in
verl's ReTool recipe, without the paper's ``<answer>`` tags. The reward is 1/0 where
ReTool's is +1/-1: the same GRPO advantages, since groups are normalised.

Duplicates (the same question and answer) are dropped and counted: DAPO-Math-17k's parquet
has ~1.79M rows, its ~17.9k problems about 100 times each, and BytedTsinghua-SIA/AIME-2024
repeats its 30 problems 32 times (``keep_duplicates=True`` keeps them). Errors raise :class:`RetoolDataError` naming
the file, the line (jsonl, from 1) or the row (parquet, from 0 as in pandas) and the field.

    python examples/data_preprocess/retool.py --train_file math.jsonl --test_file aime.jsonl \\
        --local_dir ~/data/retool
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from agentrl.utils.jsonl import JsonlError, read_jsonl

logger = logging.getLogger(__name__)

DATA_SOURCE = "retool/math"
ABILITY = "math"
TOOL_NAME = "code_interpreter"  # the function name in recipes/retool/sandbox_tool.yaml
PROMPT_TEMPLATE = (
    "Solve the following problem step by step. You can run Python code with the "
    "`code_interpreter` tool: it executes the code in a sandbox and returns what it prints. "
    "Use it for any computation that is long or error-prone by hand (large numbers, long "
    "sums, enumerations, solving equations) and to check your reasoning. Each call starts "
    "fresh, so write complete scripts with their imports and print the results you need.\n"
    "Put the final answer at the end of your response in the form \\boxed{{answer}}.\n\n"
    "Problem: {question}"
)
QUESTION_KEYS = ("question", "problem", "Problem")
ANSWER_KEYS = ("answer", "Answer")
# DAPO-Math-17k wraps each problem in this instruction; ReTool's prompt replaces it.
_DAPO_PROMPT = re.compile(
    r"^\s*Solve the following math problem step by step\..*?\n\n(?P<question>.*)\n\n"
    r"Remember to put your answer on its own line after \"Answer:\"\.?\s*$",
    re.DOTALL,
)


class RetoolDataError(ValueError):
    """A math file is missing or a record is malformed (the message names file, row, field)."""


class FieldError(ValueError):
    """A record's field is missing or malformed; ``field`` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"field {field!r}: {message}")
        self.field = field


def ground_truth_text(value: Any, field: str) -> str:
    """The ground truth as a non-empty string (``34``, ``34.0`` -> ``"34"``, ``0.5`` -> ``"0.5"``)."""
    if isinstance(value, bool) or value is None:
        raise FieldError(field, f"expected a string or a number, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (int, float)):
        return str(value)
    if not isinstance(value, str):
        raise FieldError(field, f"expected a string or a number, got {type(value).__name__}")
    if not value.strip():
        raise FieldError(field, "is empty")
    return value.strip()


def strip_dapo_prompt(content: str) -> str:
    """The bare problem of a DAPO-Math user message; other text is returned unchanged."""
    match = _DAPO_PROMPT.match(content)
    return match.group("question").strip() if match else content.strip()


def _first_key(record: Mapping[str, Any], keys: tuple[str, ...], what: str) -> str:
    for key in keys:
        if record.get(key) is not None:
            return key
    raise FieldError(keys[0], f"missing {what} (one of {', '.join(keys)}); the record has "
                              f"{', '.join(map(str, record)) or 'no fields'}")


def _verl_question(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise FieldError("prompt", f"expected a non-empty list of messages, got {type(prompt).__name__}")
    users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
    if not users or not isinstance(users[-1].get("content"), str):
        raise FieldError("prompt", "has no user message with string 'content'")
    return users[-1]["content"]


def record_fields(record: Mapping[str, Any]) -> tuple[str, str]:
    """``(question, answer)`` of a flat record or a verl row; ``FieldError`` names the field."""
    if "prompt" in record and "reward_model" in record:  # a verl row (DAPO-Math, AIME-2024)
        reward_model = record["reward_model"]
        if not isinstance(reward_model, Mapping) or reward_model.get("ground_truth") is None:
            raise FieldError("reward_model.ground_truth", "missing")  # parquet fills it with null
        answer = ground_truth_text(reward_model["ground_truth"], "reward_model.ground_truth")
        question = strip_dapo_prompt(_verl_question(record["prompt"]))
        if not question:
            raise FieldError("prompt", "the user message is empty")
        return question, answer
    qkey = _first_key(record, QUESTION_KEYS, "question")
    question = record[qkey]
    if not isinstance(question, str) or not question.strip():
        raise FieldError(qkey, f"expected a non-empty string, got {question!r}"[:200])
    akey = _first_key(record, ANSWER_KEYS, "answer")
    return question.strip(), ground_truth_text(record[akey], akey)


def retool_row(question: str, answer: str, index: int, split: str, *,
             data_source: str = DATA_SOURCE, prompt_template: str = PROMPT_TEMPLATE) -> dict:
    """One verl row. Only non-empty kwargs dicts are written (parquet cannot store ``{}``)."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": prompt_template.format(question=question)}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {
            "index": index,
            "split": split,
            "question": question,
            "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": answer}}},
        },
    }


def read_records(path: str | Path) -> Iterator[tuple[str, dict]]:
    """``(where, record)`` for every record of a jsonl or parquet file (``where`` names the
    line or the row)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise RetoolDataError(f"{path}: no such file")
    if path.suffix == ".parquet":
        try:
            batches = pq.ParquetFile(path).iter_batches(batch_size=4096)
        except (pa.ArrowException, OSError) as err:
            raise RetoolDataError(f"{path}: cannot read parquet: {err}") from None
        row = 0
        for batch in batches:  # in batches: DAPO-Math-17k's file has ~1.8M rows
            for record in batch.to_pylist():
                yield f"row {row}", record
                row += 1
        return
    try:
        for lineno, record in read_jsonl(path):
            yield f"line {lineno}", record
    except JsonlError as err:
        raise RetoolDataError(str(err)) from None


def convert_file(path: str | Path, split: str, *, data_source: str = DATA_SOURCE,
                 prompt_template: str = PROMPT_TEMPLATE, keep_duplicates: bool = False) -> list[dict]:
    """All rows of one math file; ``RetoolDataError`` names the file, row and field."""
    rows: list[dict] = []
    seen: set[tuple[str, str]] = set()
    duplicates = 0
    for where, record in read_records(path):
        try:
            question, answer = record_fields(record)
        except FieldError as err:
            raise RetoolDataError(f"{path}, {where}: {err}") from None
        if not keep_duplicates:
            if (question, answer) in seen:
                duplicates += 1
                continue
            seen.add((question, answer))
        rows.append(retool_row(question, answer, len(rows), split, data_source=data_source,
                             prompt_template=prompt_template))
    if not rows:
        raise RetoolDataError(f"{path}: no records")
    if duplicates:
        logger.info("%s: dropped %d duplicate records (same question and answer)", path, duplicates)
    return rows
