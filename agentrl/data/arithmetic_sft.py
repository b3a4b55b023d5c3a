"""Synthetic, correct calculator trajectories for the arithmetic problems (SFT warm-up data).

    rows = make_arithmetic_sft_rows(256, "train", seed=0)
    write_arithmetic_sft_dataset("data/sft_train.jsonl", 256, seed=0)

Each arithmetic row (agentrl/data/arithmetic.py) becomes one conversation in verl's
multi-turn SFT format (`messages` + `tools`):

    system: the arithmetic system prompt      user: the word problem
    assistant: <tool_call> calculator {"expression": EXPR} </tool_call>
    tool: the calculator's real output for EXPR (tools/calculator.py, as the tool returns it)
    assistant: <answer>N</answer>             N = that output rounded like the ground truth

The answer is derived from the calculator's output, never from the ground truth; tests
check that it scores 1.0 against the ground truth for every row.
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

from agentrl.data.arithmetic import (
    SYSTEM_PROMPT,
    TOOL_NAME,
    format_number,
    make_arithmetic_rows,
)
from tools.calculator import DEFAULT_SCHEMA, evaluate
from tools.calculator import format_number as calculator_text


def calculator_output(expression: str) -> str:
    """What the calculator tool answers for `expression` (its `execute` text)."""
    return calculator_text(evaluate(expression))


def answer_from_output(output: str) -> str:
    """The final answer written from the calculator's output: an integer as is, otherwise
    rounded half-up to 4 decimals (the system prompt's rule)."""
    return format_number(Fraction(Decimal(output)))


def trajectory_messages(prompt: list[dict], expression: str) -> list[dict]:
    """The prompt followed by one correct calculator call, its output and the answer."""
    output = calculator_output(expression)
    call = {
        "type": "function",
        "function": {"name": TOOL_NAME, "arguments": {"expression": expression}},
    }
    return [
        *[dict(m) for m in prompt],
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": output},
        {"role": "assistant", "content": f"<answer>{answer_from_output(output)}</answer>"},
    ]


def make_arithmetic_sft_rows(
    n: int,
    split: str,
    seed: int,
    difficulty: str = "easy",
    tool_schema: dict | None = None,
    system_prompt: str = SYSTEM_PROMPT,
) -> list[dict]:
    """`n` SFT conversations for the arithmetic rows `make_arithmetic_rows(n, split, seed,
    difficulty, system_prompt)`; each keeps the row's `ground_truth`, `expression` and
    `index`."""
    schema = tool_schema or DEFAULT_SCHEMA
    out = []
    for row in make_arithmetic_rows(n, split, seed, difficulty, system_prompt):
        extra = row["extra_info"]
        out.append(
            {
                "messages": trajectory_messages(row["prompt"], extra["expression"]),
                "tools": [schema],
                "ground_truth": row["reward_model"]["ground_truth"],
                "expression": extra["expression"],
                "index": extra["index"],
            }
        )
    return out


def write_arithmetic_sft_dataset(
    path: str | Path,
    n: int,
    seed: int,
    split: str = "train",
    difficulty: str = "easy",
    tool_schema: dict | None = None,
    system_prompt: str = SYSTEM_PROMPT,
) -> Path:
    """Write `make_arithmetic_sft_rows(...)` as jsonl to `path`; return the path."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = make_arithmetic_sft_rows(n, split, seed, difficulty, tool_schema, system_prompt)
    with path.open("w", encoding="utf-8") as sink:
        for row in rows:
            sink.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
