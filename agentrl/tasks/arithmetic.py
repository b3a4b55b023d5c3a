"""Seeded generator of arithmetic word problems that need a calculator, as verl dataset rows.

Each problem is a short word problem whose answer is an arithmetic expression over
multi-digit numbers (``+ - * /`` and parentheses, decimals allowed), e.g.
``"A warehouse has 347 shelves ... How many boxes are there in total?"`` with the
expression ``347 * 28``. Three difficulty levels:

- ``easy``: one multi-digit multiplication or a division with a decimal result;
- ``medium``: two or three operations (``a * b - c``, ``(a + b + c) / 3``, ...);
- ``hard``: nested expressions with four or more operations.

Two more levels are outside ``DIFFICULTIES`` (the levels above):

- ``quickstart``: the CPU quickstart's task, a bare expression of 2 or 3 operands of 1 to
  4 digits joined by ``+ - *`` (``"What is 347 * 29 + 12?"``) in six phrasings
  (``QUICKSTART_PHRASINGS``). A tiny model cannot compute these in its head but can learn
  to copy the expression into a calculator call; the phrasing of each row is kept in
  ``extra_info["phrasing"]`` so that the SFT teacher can treat phrasings differently
  (agentrl/tasks/arithmetic_sft.py);
- ``basic``: a two-digit and a one-digit number with one ``+``, ``-`` or ``*`` in a word
  problem (the first quickstart's level).

``SHORT_SYSTEM_PROMPT`` is a short system prompt for CPU runs, where every prompt token
costs a tiny model time (``system_prompt=`` of the row functions).

The ground truth is the exact value of the expression (computed with fractions, never
floats) formatted by :func:`format_number`: an integer without ``.0``, otherwise rounded
half-up to 4 decimals with trailing zeros removed (``1/3 -> "0.3333"``, ``25/2 -> "12.5"``).

Rows follow verl's format (see docs/data.md). Empty kwargs dicts cannot be stored in a
parquet struct column, so they are left out: the tool entry is
``{"calculator": {"create_kwargs": {"ground_truth": gt}}}`` and ``extra_info`` has no
``interaction_kwargs``; a missing kwargs key means ``{}``. The rows returned here are
exactly what a parquet reader gives back.

Everything is a pure function of ``(n, split, seed, difficulty)``. Splits never share an
expression: a hash assigns every expression to one of three pools (``expression_pool``):
``test`` (10% of the expression space, every split other than ``sft`` and ``train``
draws from it), ``sft`` and ``train`` (45% each), so SFT data, RL training data and
held-out data are disjoint for any seeds.

Run ``python examples/data_preprocess/arithmetic.py --local_dir ~/data/arithmetic`` to
write train/test parquet files.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import operator
import random
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path

from agentrl.utils.jsonl import write_parquet

logger = logging.getLogger(__name__)

DATA_SOURCE = "agentrl/arithmetic"
ABILITY = "math"
TOOL_NAME = "calculator"
DIFFICULTIES = ("easy", "medium", "hard")
HELD_OUT_PERCENT = 10  # share of the expression space reserved for held-out splits
POOLS = ("sft", "train", "test")  # the disjoint expression pools (see expression_pool)

SYSTEM_PROMPT = (
    "You are a careful assistant that solves arithmetic word problems. "
    "You can call the `calculator` tool, which evaluates an arithmetic expression "
    "(numbers, + - * / and parentheses) exactly; use it for every multiplication, "
    "division and multi-step computation instead of computing in your head. "
    "Give the final answer as <answer>NUMBER</answer> with the number only (no units); "
    "write an integer without decimals and round any other result to 4 decimal places."
)

# The quickstart's system prompt: every prompt token costs a CPU-trained tiny model time.
SHORT_SYSTEM_PROMPT = "Use the calculator. Reply <answer>NUMBER</answer>."

Template = Callable[[random.Random], tuple[str, str]]


def _dollars(cents: int) -> str:
    """A price written in dollars with cents: 1275 -> '12.75'."""
    return f"{cents // 100}.{cents % 100:02d}"


def _money(rng: random.Random, low: int, high: int) -> str:
    """A price in dollars with cents, e.g. '12.75', drawn from [low, high) dollars."""
    return _dollars(rng.randrange(low * 100, high * 100))


# --- easy: one hard-to-do-in-your-head operation -------------------------------------


def _shelves(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(101, 999), rng.randint(12, 99)
    q = (
        f"A warehouse has {a} shelves and each shelf holds {b} boxes. "
        "How many boxes are there in total?"
    )
    return q, f"{a} * {b}"


def _tickets(rng: random.Random) -> tuple[str, str]:
    price, n = _money(rng, 5, 90), rng.randint(12, 250)
    q = f"A concert ticket costs {price} dollars. How many dollars do {n} tickets cost?"
    return q, f"{price} * {n}"


def _tanks(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(1000, 99999), rng.randint(7, 97)
    q = (
        f"{a} liters of water are shared equally among {b} tanks. "
        "How many liters go into each tank?"
    )
    return q, f"{a} / {b}"


# --- medium: two or three operations ---------------------------------------------------


def _factory(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(120, 980), rng.randint(13, 72)
    c = rng.randint(100, a * b - 1)
    q = (
        f"A factory makes {a} widgets per hour for {b} hours and then ships {c} widgets. "
        "How many widgets are left?"
    )
    return q, f"{a} * {b} - {c}"


def _profit(rng: random.Random) -> tuple[str, str]:
    n, cost_cents = rng.randint(25, 900), rng.randrange(200, 6000)
    cost, sell = _dollars(cost_cents), _dollars(cost_cents + rng.randrange(1, 4000))
    q = (
        f"A shop buys {n} lamps at {cost} dollars each and sells all of them at {sell} "
        "dollars each. What is the total profit in dollars?"
    )
    return q, f"{n} * ({sell} - {cost})"


def _average(rng: random.Random) -> tuple[str, str]:
    a, b, c = (rng.randint(1000, 9999) for _ in range(3))
    q = (
        f"Three runners trained for {a}, {b} and {c} meters this week. "
        "What is the average distance in meters?"
    )
    return q, f"({a} + {b} + {c}) / 3"


# --- basic (quickstart only): a two-digit and a one-digit number, one + - * -----------


def _boxes(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(10, 99), rng.randint(2, 9)
    return f"There are {a} boxes with {b} pens each. How many pens are there?", f"{a} * {b}"


def _bus(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(10, 99), rng.randint(1, 9)
    return f"A bus has {a} people and {b} more get on. How many are on it?", f"{a} + {b}"


def _bakery(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(10, 99), rng.randint(1, 9)
    return f"A baker makes {a} rolls and sells {b}. How many rolls are left?", f"{a} - {b}"


# --- quickstart: a bare expression, 2-3 operands of 1-4 digits, in six phrasings ------


def _operand(rng: random.Random) -> int:
    """A number of 1 to 4 digits, each length equally likely."""
    digits = rng.randint(1, 4)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _quickstart_expression(rng: random.Random) -> str:
    n_operands = rng.randint(2, 3)
    parts = [str(_operand(rng))]
    for _ in range(n_operands - 1):
        parts += [rng.choice("+-*"), str(_operand(rng))]
    return " ".join(parts)


# Question phrasings of the quickstart level, by name (kept in extra_info["phrasing"]).
QUICKSTART_PHRASINGS: dict[str, str] = {
    "what_is": "What is {}?",
    "compute": "Compute {}.",
    "calculate": "Calculate {}.",
    "equals": "{} = ?",
    "evaluate": "Evaluate {}.",
    "find": "Find {}.",
}


def _phrased(name: str) -> Template:
    def template(rng: random.Random) -> tuple[str, str]:
        expression = _quickstart_expression(rng)
        return QUICKSTART_PHRASINGS[name].format(expression), expression

    template.__name__ = name
    return template


# --- hard: nested expressions ------------------------------------------------------------


def _payroll(rng: random.Random) -> tuple[str, str]:
    a, b, c = rng.randint(12, 95), rng.randint(3, 19), rng.randint(5, 140)
    d = rng.randint(100000, 9999999)
    q = (
        f"A company has {b} offices with {a} employees each, plus {c} remote employees. "
        f"A bonus pool of {d} dollars is split equally among all employees. "
        "How many dollars does each employee get?"
    )
    return q, f"{d} / ({a} * {b} + {c})"


def _tank_flow(rng: random.Random) -> tuple[str, str]:
    # start > drain * t2 keeps the water left positive
    start, fill, drain = rng.randint(2100, 9000), rng.randint(35, 240), rng.randint(12, 34)
    t1, t2, cups = rng.randint(11, 59), rng.randint(11, 59), rng.randint(3, 29)
    q = (
        f"A tank contains {start} liters. It is filled at {fill} liters per minute for {t1} "
        f"minutes, then drained at {drain} liters per minute for {t2} minutes. The water "
        f"left is poured equally into {cups} barrels. How many liters are in each barrel?"
    )
    return q, f"({start} + {fill} * {t1} - {drain} * {t2}) / {cups}"


def _garden(rng: random.Random) -> tuple[str, str]:
    length, width = rng.randint(23, 480), rng.randint(17, 350)
    bed_l, bed_w, price = rng.randint(3, 15), rng.randint(2, 12), _money(rng, 2, 30)
    q = (
        f"A garden is {length} meters long and {width} meters wide. A flower bed of {bed_l} "
        f"by {bed_w} meters is left out, and the rest is covered with turf at {price} "
        "dollars per square meter. How many dollars does the turf cost?"
    )
    return q, f"({length} * {width} - {bed_l} * {bed_w}) * {price}"


TEMPLATES: dict[str, tuple[Template, ...]] = {
    "easy": (_shelves, _tickets, _tanks),
    "medium": (_factory, _profit, _average),
    "hard": (_payroll, _tank_flow, _garden),
    # not in DIFFICULTIES: the CPU quickstart's levels
    "quickstart": tuple(_phrased(name) for name in QUICKSTART_PHRASINGS),
    "basic": (_boxes, _bus, _bakery),
}


# --- exact evaluation and formatting ---------------------------------------------------

_BINARY_OPS: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def evaluate_expression(expression: str) -> Fraction:
    """Exact value of an expression of numbers, ``+ - * /``, unary minus and parentheses.

    Raises ``ValueError`` naming the expression for anything else (names, calls, ``**``)
    and ``ZeroDivisionError`` for a division by zero.
    """
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc
    return _eval_node(tree.body, expression)


def _eval_node(node: ast.AST, expression: str) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))  # str() keeps 12.75 exact instead of its float
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _eval_node(node.left, expression), _eval_node(node.right, expression)
        return _BINARY_OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_node(node.operand, expression)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(
        f"unsupported element {ast.dump(node)} in arithmetic expression {expression!r}"
    )


def format_number(value: Fraction) -> str:
    """The ground-truth string: ``'1722'``, ``'12.5'``, ``'0.3333'`` (half-up, 4 decimals)."""
    if value.denominator == 1:
        return str(value.numerator)
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    rounded = exact.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    text = format(rounded, "f").rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


# --- rows ------------------------------------------------------------------------------


def expression_pool(expression: str) -> str:
    """The pool (``"sft"``, ``"train"`` or ``"test"``) an expression belongs to, by a hash:
    ``test`` holds HELD_OUT_PERCENT of the expression space, the rest is split in half."""
    digest = hashlib.sha256(expression.encode("utf-8")).digest()
    if int.from_bytes(digest[:4], "big") % 100 < HELD_OUT_PERCENT:
        return "test"
    return "sft" if digest[4] % 2 == 0 else "train"


def split_pool(split: str) -> str:
    """The pool a split draws from: ``sft`` and ``train`` their own, any other ``test``."""
    return split if split in ("sft", "train") else "test"


def draw_distinct(
    n: int, split: str, rng: random.Random, draw: Callable[[random.Random], tuple], what: str
) -> list[tuple]:
    """`n` draws `draw(rng) = (key, ...)` with distinct keys in the pool of `split`
    (``split_pool`` / ``expression_pool``), in draw order; ValueError naming `what` when
    1000 + 200 n attempts do not find them."""
    pool = split_pool(split)
    seen: set[str] = set()
    out: list[tuple] = []
    max_attempts = 1000 + 200 * n
    for _ in range(max_attempts):
        if len(out) == n:
            break
        drawn = draw(rng)
        if drawn[0] in seen or expression_pool(drawn[0]) != pool:
            continue
        seen.add(drawn[0])
        out.append(drawn)
    if len(out) < n:
        raise ValueError(
            f"could only generate {len(out)} distinct {what} for split {split!r} in "
            f"{max_attempts} attempts, {n} requested"
        )
    return out


def make_row(
    index: int,
    split: str,
    question: str,
    expression: str,
    system_prompt: str = SYSTEM_PROMPT,
    phrasing: str | None = None,
) -> dict:
    """One verl row for a question and its expression (empty kwargs dicts left out);
    ``phrasing`` (the template's name) goes to ``extra_info`` when given."""
    ground_truth = format_number(evaluate_expression(expression))
    return {
        "data_source": DATA_SOURCE,
        "prompt": [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": question},
        ],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": index,
            "split": split,
            "question": question,
            "expression": expression,
            **({"phrasing": phrasing} if phrasing else {}),
            "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": ground_truth}}},
        },
    }


def make_arithmetic_rows(
    n: int,
    split: str,
    seed: int,
    difficulty: str = "easy",
    system_prompt: str = SYSTEM_PROMPT,
) -> list[dict]:
    """``n`` distinct arithmetic word problems as verl rows, deterministic from the seed.

    ``split`` is written into ``extra_info.split`` and picks the expression pool
    (``split_pool``): ``"sft"`` and ``"train"`` their own, any other split the held-out
    pool, so no two of SFT, train and test share an expression. Rows of the
    ``quickstart`` level carry their phrasing in ``extra_info["phrasing"]``.
    """
    if difficulty not in TEMPLATES:
        raise ValueError(f"unknown difficulty {difficulty!r}; choose one of {tuple(TEMPLATES)}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"agentrl/arithmetic:{seed}:{split}:{difficulty}")
    templates = TEMPLATES[difficulty]
    keep_phrasing = difficulty == "quickstart"

    def draw(rng: random.Random) -> tuple[str, str, str | None]:
        template = rng.choice(templates)
        question, expression = template(rng)
        return expression, question, template.__name__ if keep_phrasing else None

    drawn = draw_distinct(n, split, rng, draw, f"{difficulty!r} problems")
    rows = [
        make_row(i, split, question, expression, system_prompt, phrasing)
        for i, (expression, question, phrasing) in enumerate(drawn)
    ]
    return rows


def write_arithmetic_dataset(
    out_dir: str | Path,
    n_train: int,
    n_test: int,
    seed: int,
    difficulty: str = "easy",
    system_prompt: str = SYSTEM_PROMPT,
) -> tuple[Path, Path]:
    """Write ``train.parquet`` and ``test.parquet`` into ``out_dir``; return both paths."""
    out_dir = Path(out_dir).expanduser()
    train = make_arithmetic_rows(n_train, "train", seed, difficulty, system_prompt)
    test = make_arithmetic_rows(n_test, "test", seed, difficulty, system_prompt)
    train_path = write_parquet(train, out_dir / "train.parquet")
    test_path = write_parquet(test, out_dir / "test.parquet")
    logger.info(
        "wrote %d train rows to %s, %d test rows to %s", n_train, train_path, n_test, test_path
    )
    return train_path, test_path
