"""reasoning-gym datasets as verl rows (`agentrl env prepare reasoning_gym:TASK`).

Items come from `reasoning_gym.create_dataset(TASK, size=..., seed=...)`; each row's prompt
is the item's question under a system prompt that asks for `<answer>...</answer>`, its
`data_source` is `reasoning_gym/TASK`, and `extra_info.reasoning_gym_entry` keeps the whole
item (question, answer, metadata) as JSON, so reasoning-gym's own `score_answer` scores the
response (`agentrl.reward.score.environments`). Train and test never share a question:
the items are drawn once, duplicates of a question dropped, and the pool split in two.
"""

from __future__ import annotations

import json
from typing import Any

from agentrl.utils.extras import missing_package

SYSTEM_PROMPT = (
    "Solve the problem. Think briefly, then give only the final answer inside "
    "<answer></answer>, exactly in the form the problem asks for."
)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def load_items(task: str, count: int, seed: int) -> list[dict[str, Any]]:
    """`count` items of `task` with distinct questions (ValueError if the task has fewer)."""
    try:
        import reasoning_gym
        from reasoning_gym.factory import DATASETS
    except ImportError as err:
        raise missing_package("reasoning-gym", "envs", f"reasoning_gym:{task}") from err
    if task not in DATASETS:
        close = sorted(name for name in DATASETS if task.lower() in name or name in task.lower())
        raise ValueError(f"reasoning-gym has no task {task!r}"
                         + (f"; did you mean {', '.join(close[:5])}?" if close else "")
                         + f" ({len(DATASETS)} tasks: reasoning_gym.factory.DATASETS)")
    # draw more than needed: small tasks repeat questions
    dataset = reasoning_gym.create_dataset(task, size=max(2 * count, count + 50), seed=seed)
    items, seen = [], set()
    for item in dataset:
        if item["question"] in seen:
            continue
        seen.add(item["question"])
        items.append(item)
        if len(items) == count:
            return items
    raise ValueError(f"reasoning_gym:{task} gave {len(items)} distinct questions from seed "
                     f"{seed}, fewer than the {count} asked for (train + test)")


def make_rows(task: str, items: list[dict[str, Any]], split: str,
              answer_tag: str = "answer") -> list[dict[str, Any]]:
    """verl rows of reasoning-gym items (see the module docstring)."""
    system = SYSTEM_PROMPT.replace("<answer></answer>", f"<{answer_tag}></{answer_tag}>")
    return [
        {
            "data_source": f"reasoning_gym/{task}",
            "prompt": [{"role": "system", "content": system},
                       {"role": "user", "content": item["question"]}],
            "ability": "reasoning",
            "reward_model": {"style": "rule", "ground_truth": str(item["answer"])},
            "extra_info": {
                "index": index, "split": split, "question": item["question"],
                "answer_tag": answer_tag,
                "reasoning_gym_entry": json.dumps(_jsonable(item), ensure_ascii=False),
            },
        }  # fmt: skip
        for index, item in enumerate(items)
    ]


def prepare(task: str, size: int, test_size: int, seed: int,
            answer_tag: str = "answer") -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(train rows, test rows, no extra files): disjoint by question."""
    items = load_items(task, test_size + size, seed)
    test, train = items[:test_size], items[test_size:]
    return (make_rows(task, train, "train", answer_tag),
            make_rows(task, test, "test", answer_tag), {})


__all__ = ["SYSTEM_PROMPT", "load_items", "make_rows", "prepare"]
