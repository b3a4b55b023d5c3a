"""The ``reasoning_gym`` task of `agentrl quickstart` (the CPU run of recipes/envs/; it lives
with the environment adapters it is built on, and agentrl.tasks.quickstart names it): a
reasoning-gym dataset, prepared as `agentrl env prepare reasoning_gym:basic_arithmetic`
prepares it and scored by reasoning-gym's own ``score_answer``, solved with the calculator.

    data = write_reasoning_gym_data(out_dir, settings, direct_phrasings)

The items are reasoning-gym's ``basic_arithmetic`` (2 to 6 terms of 1 to 4 digits, with
parentheses and negation), drawn once from the run's seed; items with a division are left
out (reasoning-gym rounds their answers down, which no calculator reproduces). Their rows
are `agentrl.environments.reasoning_gym.make_rows`' (data source
``reasoning_gym/basic_arithmetic``, the item kept whole for the scorer), so the reward is
reasoning-gym's, not agentrl's.

The imperfect teacher is the calculator quickstart's: every SFT conversation calls the
calculator on the item's expression and answers with its output, except that on the short
questions (2 or 3 terms, ``extra_info["phrasing"] == "short"``) a share ``direct_rate``
answers at once with the true value, which a nano model cannot compute. After SFT it
answers short questions without the tool too often, and RL has to find the tool again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from agentrl.tasks.quickstart import TaskData, check_disjoint, recipe_file, write_task_data

DATASET = "basic_arithmetic"
SHORT_TERMS = 3  # questions of at most this many terms are "short"


def phrasing(item: dict[str, Any]) -> str:
    """``short`` (2-3 terms, where the teacher mostly answers directly) or ``long``."""
    return "short" if int(item["metadata"]["num_terms"]) <= SHORT_TERMS else "long"


def _items(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` distinct division-free items (see the module docstring)."""
    from agentrl.environments.reasoning_gym import load_items

    items = [
        i for i in load_items(DATASET, 2 * count, seed) if "/" not in i["metadata"]["expression"]
    ]
    if len(items) < count:
        raise ValueError(
            f"reasoning_gym:{DATASET} gave {len(items)} division-free items "
            f"from seed {seed}, fewer than {count}"
        )
    return items[:count]


def _rows(items: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    from agentrl.environments.reasoning_gym import make_rows

    rows = make_rows(DATASET, items, split)
    for row, item in zip(rows, items, strict=True):
        row["extra_info"]["phrasing"] = phrasing(item)
        row["extra_info"]["expression"] = item["metadata"]["expression"]
    return rows


def _sft_rows(
    rows: list[dict[str, Any]], seed: int, direct: Collection[str], direct_rate: float
) -> list[dict[str, Any]]:
    """The imperfect teacher's conversations for `rows` (see the module docstring)."""
    import random

    from agentrl.tasks.arithmetic_sft import direct_answer_messages, trajectory_messages
    from agentrl.tools import load_tool_schemas

    (schema,) = load_tool_schemas(recipe_file("quickstart", "calculator_tool.yaml"))
    rng = random.Random(f"agentrl/reasoning_gym_sft:{seed}")
    out = []
    for row in rows:
        extra = row["extra_info"]
        truth = row["reward_model"]["ground_truth"]
        answers_directly = extra["phrasing"] in direct and rng.random() < direct_rate
        messages = (
            direct_answer_messages(row["prompt"], truth)
            if answers_directly
            else trajectory_messages(row["prompt"], extra["expression"])
        )
        out.append({
            "messages": messages, "tools": [schema], "ground_truth": truth,
            "question": extra["question"], "phrasing": extra["phrasing"],
            "uses_tool": not answers_directly,
            "reasoning_gym_entry": extra["reasoning_gym_entry"],  # what scores it
        })  # fmt: skip
    return out


def write_reasoning_gym_data(out_dir: Path, s: Any, direct_phrasings: Collection[str]) -> TaskData:
    """SFT conversations, train and test parquet (disjoint by question); the test rows are
    grouped by phrasing (short / long) and by their number of terms."""
    items = _items(s.n_test + s.n_train + s.sft_examples, s.seed)
    test_items = items[: s.n_test]
    train_items = items[s.n_test : s.n_test + s.n_train]
    sft_items = items[s.n_test + s.n_train :]
    test, train = _rows(test_items, "test"), _rows(train_items, "train")
    sft = _sft_rows(_rows(sft_items, "sft"), s.seed, direct_phrasings, s.direct_rate)
    check_disjoint({
        "sft": {r["question"] for r in sft},
        "train": {r["extra_info"]["question"] for r in train},
        "test": {r["extra_info"]["question"] for r in test},
    })  # fmt: skip
    terms = [f"{i['metadata']['num_terms']}_terms" for i in test_items]
    return write_task_data(out_dir, sft, train, test, direct_phrasings, terms=terms)


@contextlib.contextmanager
def calculator_tool(data_dir: Path) -> Iterator[Path]:
    """The quickstart's calculator tool config (nothing to serve)."""
    yield recipe_file("quickstart", "calculator_tool.yaml")
