"""reasoning-gym datasets as verl rows (`agentrl env prepare reasoning_gym:TASK`).

Items come from `reasoning_gym.create_dataset(TASK, size=..., seed=...)`; each row's prompt
is the item's question under a system prompt that asks for `<answer>...</answer>`, its
`data_source` is `reasoning_gym/TASK`, and `extra_info.reasoning_gym_entry` keeps the whole
item (question, answer, metadata) as typed JSON (`agentrl.utils.typed_json`: tuples, int
keys, fractions come back as they were), so reasoning-gym's own `score_answer` scores the
response on the item exactly as the task made it (`agentrl.reward.score.environments`).
`reward_model.ground_truth` is the task's answer; a task whose items have no answer
(`None`: the scorer checks a move sequence or a coloring itself) gets null there and a
warning, never the string "None". Train and test never share a question: the items are
drawn once, duplicates of a question dropped, and the pool split in two.

A task that cannot be made from its default config (`composite` needs its list of
datasets), or whose item holds a value typed JSON cannot carry, is a ValueError saying so
(`agentrl env prepare` exits 2 with it).
"""

from __future__ import annotations

import difflib
import logging
from typing import Any

from agentrl.utils import typed_json
from agentrl.utils.answer_tags import ANSWER_TAG
from agentrl.utils.extras import missing_package

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "Solve the problem. Think briefly, then give only the final answer inside "
    "<answer></answer>, exactly in the form the problem asks for."
)


def unknown_task(task: str, names: list[str]) -> str:
    """The message for a task reasoning-gym does not have, with the closest names."""
    typo = task.lower()

    def words(name: str) -> str:  # "sudoku_mini" is close to "mini_sudoku"
        return "_".join(sorted(name.split("_")))

    by_words = {words(n): n for n in names}
    close = list(dict.fromkeys(
        [by_words[w] for w in difflib.get_close_matches(words(typo), by_words, n=5, cutoff=0.6)]
        + difflib.get_close_matches(typo, names, n=5, cutoff=0.6)
        + [n for n in sorted(names) if typo in n]))[:5]
    return (f"reasoning-gym has no task {task!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
            + f" ({len(names)} tasks: reasoning_gym.factory.DATASETS)")


def _dataset(task: str, size: int, seed: int) -> Any:
    import reasoning_gym

    try:
        return reasoning_gym.create_dataset(task, size=size, seed=seed)
    except Exception as err:  # a task's own config check: AssertionError, ValueError, ...
        raise ValueError(f"reasoning_gym:{task} cannot be made from its default config "
                         f"({type(err).__name__}: {err}); prepare it with reasoning-gym's "
                         "create_dataset and its own config instead") from err


def load_items(task: str, count: int, seed: int) -> list[dict[str, Any]]:
    """`count` items of `task` with distinct questions (ValueError if the task has fewer)."""
    try:
        import reasoning_gym.factory
    except ImportError as err:
        raise missing_package("reasoning-gym", "envs", f"reasoning_gym:{task}") from err
    names = list(reasoning_gym.factory.DATASETS)
    if task not in names:
        raise ValueError(unknown_task(task, names))
    # draw more than needed: small tasks repeat questions
    dataset = _dataset(task, max(2 * count, count + 50), seed)
    items, seen = [], set()
    for item in _items(task, dataset):
        if item["question"] in seen:
            continue
        seen.add(item["question"])
        items.append(item)
        if len(items) == count:
            return items
    raise ValueError(f"reasoning_gym:{task} gave {len(items)} distinct questions from seed "
                     f"{seed}, fewer than the {count} asked for (train + test)")


def _items(task: str, dataset: Any) -> Any:
    """The dataset's items; one that fails to generate is a ValueError naming the task."""
    iterator = iter(dataset)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except Exception as err:
            raise ValueError(f"reasoning_gym:{task} failed to make an item "
                             f"({type(err).__name__}: {err})") from err
        yield item


def entry_json(task: str, item: dict[str, Any]) -> str:
    """The item as typed JSON that loads back equal to it, types included (ValueError if a
    value cannot be carried exactly)."""
    try:
        text = typed_json.dumps(item, "item")
    except TypeError as err:
        raise ValueError(f"reasoning_gym:{task}: {err}; its scorer could not be given the "
                         "item as the task made it") from err
    if not typed_json.same(typed_json.loads(text), item):
        raise ValueError(f"reasoning_gym:{task}: an item does not survive typed JSON exactly; "
                         "its scorer could not be given the item as the task made it")
    return text


def make_rows(task: str, items: list[dict[str, Any]], split: str,
              answer_tag: str = ANSWER_TAG) -> list[dict[str, Any]]:
    """verl rows of reasoning-gym items (see the module docstring)."""
    system = SYSTEM_PROMPT.replace("<answer></answer>", f"<{answer_tag}></{answer_tag}>")
    if any(item["answer"] is None for item in items):
        logger.warning("reasoning_gym:%s has no oracle answer for %d of %d items (its scorer "
                       "checks the answer itself); their ground_truth is null", task,
                       sum(item["answer"] is None for item in items), len(items))
    return [
        {
            "data_source": f"reasoning_gym/{task}",
            "prompt": [{"role": "system", "content": system},
                       {"role": "user", "content": item["question"]}],
            "ability": "reasoning",
            "reward_model": {"style": "rule", "ground_truth": _ground_truth(item)},
            "extra_info": {
                "index": index, "split": split, "question": item["question"],
                "answer_tag": answer_tag,
                "reasoning_gym_entry": entry_json(task, item),
            },
        }  # fmt: skip
        for index, item in enumerate(items)
    ]


def _ground_truth(item: dict[str, Any]) -> str | None:
    answer = item["answer"]
    return None if answer is None else str(answer)


def prepare(task: str, size: int, test_size: int, seed: int, answer_tag: str = ANSWER_TAG, *,
            allow_shared_prompts: bool = False
            ) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(train rows, test rows, no extra files): disjoint by question, so by prompt
    (`allow_shared_prompts`, for games whose prompt hides their setup, changes nothing)."""
    items = load_items(task, test_size + size, seed)
    test, train = items[:test_size], items[test_size:]
    return (make_rows(task, train, "train", answer_tag),
            make_rows(task, test, "test", answer_tag), {})


__all__ = ["SYSTEM_PROMPT", "entry_json", "load_items", "make_rows", "prepare", "unknown_task"]
