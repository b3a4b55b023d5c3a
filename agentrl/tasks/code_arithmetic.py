"""Problems a tiny model cannot compute in its head but can solve with a one-line Python
program: the task of the CPU ReTool run (recipes/retool, `agentrl quickstart --task retool`).

    rows = make_code_rows(512, "train", seed=0)          # verl rows, ReTool's row format
    conversations = make_code_sft_rows(8192, "sft", 0, schema, direct_phrasings, 0.8)

Three kinds of problem, each in two phrasings (the phrasing's name is kept in
``extra_info["phrasing"]``), and the program that solves each:

==========  =====================================================  ==================================
kind        question                                               program
==========  =====================================================  ==================================
list_sum    What is the sum of 482, 3051, 77 and 912?              print(sum([482, 3051, 77, 912]))
product     What is the product of 4821 and 305?                   print(4821 * 305)
range_sum   What is the sum of the integers from 37 to 4821?       print(sum(range(37, 4821 + 1)))
==========  =====================================================  ==================================

Lists have 3 to 5 numbers of 1 to 4 digits; products two factors of 2 to 4 digits; ranges
start at a number of 1 to 3 digits and end at one of 3 or 4 digits. The answer is an
integer of up to 8 digits: a model that has not seen it cannot guess it, and a 0.2M-parameter
model cannot compute it, but it can learn to copy the numbers into the program and the
program's output into its answer.

Rows are those of recipes/retool (agentrl/data/retool.py): ``data_source`` ``retool/math``
(scored by the MATH scorer on the last ``\\boxed{}``), ``tools_kwargs`` for the
``code_interpreter`` tool; the prompt is a short system prompt (``SYSTEM_PROMPT``: every
prompt token costs a CPU-trained model time) and the question. ``extra_info`` also has the
``kind``, the ``phrasing`` and the solving ``program``.

The SFT teacher (``make_code_sft_rows``) runs the program with the code_interpreter tool and
answers ``\\boxed{N}`` with what it printed; on ``direct_phrasings`` a share
``direct_rate`` of its traces answers ``\\boxed{N}`` at once, with the true value, which
the model cannot know (the same imperfect teacher as the calculator quickstart's). The
tool message of a traced run is the sandbox's answer for a program that prints one
integer: the integer (``program_output``; tests check it against the real sandbox).

Splits never share a problem: ``expression_pool`` of agentrl/tasks/arithmetic.py assigns
every program to the sft, train or test pool by a hash, for any seed.
"""

from __future__ import annotations

import random
from collections.abc import Collection

from agentrl.data.retool import TOOL_NAME, retool_row
from agentrl.tasks.arithmetic import draw_distinct

SYSTEM_PROMPT = "Compute with code_interpreter. Reply \\boxed{NUMBER}."

# phrasing name -> (kind, question template); the kind's numbers fill the template.
PHRASINGS: dict[str, tuple[str, str]] = {
    "sum_of": ("list_sum", "What is the sum of {}?"),
    "add_up": ("list_sum", "Add up {}."),
    "product_of": ("product", "What is the product of {} and {}?"),
    "multiply": ("product", "Multiply {} by {}."),
    "range_sum": ("range_sum", "What is the sum of the integers from {} to {}?"),
    "add_range": ("range_sum", "Add all whole numbers from {} to {}."),
}
KINDS = ("list_sum", "product", "range_sum")


def _number(rng: random.Random, min_digits: int, max_digits: int) -> int:
    """A number of `min_digits` to `max_digits` digits, each length equally likely."""
    digits = rng.randint(min_digits, max_digits)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _listing(numbers: list[int]) -> str:
    """'482, 3051, 77 and 912'."""
    return ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"


def _problem(rng: random.Random, phrasing: str) -> tuple[str, str, int]:
    """(question, program, value) of one problem in `phrasing`."""
    kind, template = PHRASINGS[phrasing]
    if kind == "list_sum":
        numbers = [_number(rng, 1, 4) for _ in range(rng.randint(3, 5))]
        return template.format(_listing(numbers)), f"print(sum({numbers}))", sum(numbers)
    if kind == "product":
        a, b = _number(rng, 2, 4), _number(rng, 2, 4)
        return template.format(a, b), f"print({a} * {b})", a * b
    start, end = _number(rng, 1, 3), _number(rng, 3, 4)
    if start >= end:
        start, end = end // 2, end
    value = (start + end) * (end - start + 1) // 2
    return template.format(start, end), f"print(sum(range({start}, {end} + 1)))", value


def program_output(value: int) -> str:
    """What the code_interpreter tool shows for a program that prints `value`: the
    printed line without its newline (tools/sandbox.py's ``format_run``)."""
    return str(value)


def make_code_rows(
    n: int, split: str, seed: int, system_prompt: str = SYSTEM_PROMPT
) -> list[dict]:
    """`n` distinct problems as verl rows (ReTool's format), deterministic from the seed;
    `split` picks the pool (``split_pool``: sft, train, anything else test)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"agentrl/code_arithmetic:{seed}:{split}")
    names = list(PHRASINGS)

    def draw(rng: random.Random) -> tuple[str, str, int, str]:
        phrasing = rng.choice(names)
        question, program, value = _problem(rng, phrasing)
        return program, question, value, phrasing

    rows = []
    for i, (program, question, value, phrasing) in enumerate(
        draw_distinct(n, split, rng, draw, "problems")
    ):
        row = retool_row(question, str(value), i, split, prompt_template="{question}")
        row["prompt"] = [{"role": "system", "content": system_prompt}, *row["prompt"]]
        kind = PHRASINGS[phrasing][0]
        row["extra_info"] |= {"kind": kind, "phrasing": phrasing, "program": program}
        rows.append(row)
    return rows


def code_teacher_messages(row: dict, direct: bool) -> list[dict]:
    """The prompt, then the answer at once (`direct`) or one code_interpreter run of the
    row's program with its output, then the answer."""
    messages = [dict(m) for m in row["prompt"]]
    truth = row["reward_model"]["ground_truth"]
    if not direct:
        program = row["extra_info"]["program"]
        call = {"name": TOOL_NAME, "arguments": {"code": program}}
        messages.append({"role": "assistant", "content": "",
                         "tool_calls": [{"type": "function", "function": call}]})  # fmt: skip
        messages.append({"role": "tool", "content": program_output(int(truth))})
    messages.append({"role": "assistant", "content": f"\\boxed{{{truth}}}"})
    return messages


def make_code_sft_rows(
    n: int,
    split: str,
    seed: int,
    tool_schema: dict,
    direct_phrasings: Collection[str] = (),
    direct_rate: float = 0.0,
    system_prompt: str = SYSTEM_PROMPT,
) -> list[dict]:
    """`n` SFT conversations (verl's multi-turn SFT format: `messages` + `tools`) for
    `make_code_rows(n, split, seed)`, each with its `program`, `phrasing` and `uses_tool`."""
    if not 0.0 <= direct_rate <= 1.0:
        raise ValueError(f"direct_rate must be in [0, 1], got {direct_rate}")
    unknown = set(direct_phrasings) - set(PHRASINGS)
    if unknown:
        raise ValueError(f"unknown phrasings {sorted(unknown)}; choose from {list(PHRASINGS)}")
    rng = random.Random(f"agentrl/code_arithmetic_sft:{seed}:{split}")
    out = []
    for row in make_code_rows(n, split, seed, system_prompt):
        extra = row["extra_info"]
        direct = extra["phrasing"] in direct_phrasings and rng.random() < direct_rate
        out.append(
            {
                "messages": code_teacher_messages(row, direct),
                "tools": [tool_schema],
                "program": extra["program"],
                "phrasing": extra["phrasing"],
                "uses_tool": not direct,
            }
        )
    return out

