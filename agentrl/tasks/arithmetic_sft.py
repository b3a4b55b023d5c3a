"""Synthetic, correct calculator trajectories for the arithmetic problems (SFT warm-up data).

    rows = make_arithmetic_sft_rows(256, "train", seed=0)
    write_arithmetic_sft_dataset("data/sft_train.jsonl", 256, seed=0)

Each arithmetic row (agentrl/tasks/arithmetic.py) becomes one conversation in verl's
multi-turn SFT format (`messages` + `tools`):

    system: the arithmetic system prompt      user: the word problem
    assistant: <tool_call> calculator {"expression": EXPR} </tool_call>
    tool: the calculator's real output for EXPR (tools/calculator.py, as the tool returns it)
    assistant: <answer>N</answer>             N = that output rounded like the ground truth

The answer is derived from the calculator's output, never from the ground truth; tests
check that it scores 1.0 against the ground truth for every row.

An imperfect teacher (the quickstart's): with ``direct_phrasings`` and ``direct_rate``,
that share of the rows whose question has one of those phrasings (``extra_info
["phrasing"]``, the ``quickstart`` level) answers at once, without the tool:

    assistant: <answer>N</answer>             N = the true value, computed by the teacher

A tiny model cannot compute N itself, so imitating these traces gives wrong answers: after
SFT it under-uses the calculator on those phrasings, and RL has something to discover.
Rows record which kind they are in ``uses_tool``.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Collection
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from agentrl.plugins import load_object
from agentrl.tasks.arithmetic import (
    SYSTEM_PROMPT,
    TOOL_NAME,
    format_number,
    make_arithmetic_rows,
)
from agentrl.utils.jsonl import write_jsonl

# the calculator tool plugin, reached by path as a user's config reaches it
CALCULATOR = "tools.calculator"


@functools.cache
def _calculator(name: str) -> Any:
    return load_object(f"{CALCULATOR}.{name}")


def calculator_output(expression: str) -> str:
    """What the calculator tool answers for `expression` (its `execute` text). No time
    limit: the data must not depend on how busy the machine was while writing it."""
    no_time_limit = _calculator("Limits")(max_time=math.inf)
    return _calculator("format_result")(_calculator("evaluate")(expression, no_time_limit))


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


def direct_answer_messages(prompt: list[dict], ground_truth: str) -> list[dict]:
    """The prompt followed by the answer at once, without the tool."""
    return [
        *[dict(m) for m in prompt],
        {"role": "assistant", "content": f"<answer>{ground_truth}</answer>"},
    ]


def make_arithmetic_sft_rows(
    n: int,
    split: str,
    seed: int,
    difficulty: str = "easy",
    tool_schema: dict | None = None,
    system_prompt: str = SYSTEM_PROMPT,
    direct_phrasings: Collection[str] = (),
    direct_rate: float = 0.0,
) -> list[dict]:
    """`n` SFT conversations for the arithmetic rows `make_arithmetic_rows(n, split, seed,
    difficulty, system_prompt)`; each keeps the row's `ground_truth`, `expression`, `index`
    (and `phrasing`, when the level has one) and says whether it `uses_tool`. A share `direct_rate` of the rows phrased as one of
    `direct_phrasings` answers directly (the imperfect teacher, see the module docstring).
    """
    if not 0.0 <= direct_rate <= 1.0:
        raise ValueError(f"direct_rate must be in [0, 1], got {direct_rate}")
    schema = tool_schema or _calculator("DEFAULT_SCHEMA")
    rng = random.Random(f"agentrl/arithmetic_sft:{seed}:{split}:{difficulty}")
    out = []
    for row in make_arithmetic_rows(n, split, seed, difficulty, system_prompt):
        extra = row["extra_info"]
        truth = row["reward_model"]["ground_truth"]
        direct = extra.get("phrasing") in direct_phrasings and rng.random() < direct_rate
        messages = (
            direct_answer_messages(row["prompt"], truth)
            if direct
            else trajectory_messages(row["prompt"], extra["expression"])
        )
        out.append(
            {
                "messages": messages,
                "tools": [schema],
                "ground_truth": truth,
                "expression": extra["expression"],
                "index": extra["index"],
                **({"phrasing": extra["phrasing"]} if "phrasing" in extra else {}),
                "uses_tool": not direct,
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
    direct_phrasings: Collection[str] = (),
    direct_rate: float = 0.0,
) -> Path:
    """Write `make_arithmetic_sft_rows(...)` as jsonl to `path`; return the path."""
    rows = make_arithmetic_sft_rows(
        n, split, seed, difficulty, tool_schema, system_prompt, direct_phrasings, direct_rate
    )
    return write_jsonl(rows, path)
