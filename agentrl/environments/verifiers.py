"""verifiers environments as verl rows (`agentrl env prepare verifiers:ENV`).

``ENV`` is an installed verifiers environment (``verifiers.load_environment(ENV)``: the module
``ENV`` with ``-`` as ``_`` and its ``load_environment()``), of any of the kinds verifiers
builds on ``vf.MultiTurnEnv``: single-turn, tool (``vf.ToolEnv``) and multi-turn.

Each row is one item of the environment's dataset: its prompt (the environment's system
prompt and few-shot turns included) as the row's prompt, ``data_source = verifiers/ENV``,
and the item (prompt, answer, task, info, example_id) as JSON in
``extra_info.interaction_kwargs.input`` for the verifiers interaction
(``agentrl.interactions.verifiers``), which plays the environment's responses and scores
the rollout with its rubric. A tool environment's tools become ``tools.yaml`` entries
(``agentrl.tools.verifiers.VerifiersTool``, the schema its ``oai_tools`` entry). The test
rows come from the environment's eval dataset when it has one, else from its dataset; the
items are shuffled with ``--seed`` and no test prompt is in training. The answer format is
the environment's own (its parser and system prompt): ``--answer-tag`` does not apply.

What loading an environment prints (verifiers' own log lines, a package's download banner)
is held back; when the load fails, the error names the cause in one line (`load_failure`).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from typing import Any

from agentrl.tools.verifiers import load_environment, message_text, require_verifiers
from agentrl.utils.answer_tags import ANSWER_TAG
from agentrl.utils.captured_output import captured_output

logger = logging.getLogger(__name__)

INTERACTION_NAME = "verifiers"


def _first_line(err: BaseException) -> str:
    """The first line of an error's message that says something (not a rule of stars)."""
    for line in str(err).splitlines():
        if line.strip(" *=-"):
            return line.strip()
    return ""


def load_failure(env_id: str, err: BaseException) -> str:
    """One line naming why ``verifiers.load_environment(env_id)`` failed: the innermost
    cause of the chain (verifiers wraps every failure in a ValueError or RuntimeError whose
    message runs over several lines)."""
    cause = err
    while cause.__cause__ is not None:
        cause = cause.__cause__
    module = env_id.replace("-", "_").split("/")[-1]
    if isinstance(cause, ModuleNotFoundError) and cause.name == module:
        return (f"verifiers:{env_id}: no module {module} is installed (verifiers loads ENV as "
                "the module of that name, - as _: install the environment's package)")
    if isinstance(cause, AttributeError) and "load_environment" in str(cause):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        where = f" ({spec.origin})" if spec is not None and spec.origin else ""
        return (f"verifiers:{env_id}: the module {module}{where} has no load_environment(): "
                "another module of that name comes first, or it is no verifiers environment")
    if cause is err:
        return _first_line(err)
    return (f"verifiers:{env_id}: loading it raised {type(cause).__name__}: "
            f"{_first_line(cause)}")


def load_quietly(env_id: str) -> Any:
    """`load_environment(env_id)` with what it prints held back: shown as it was when the
    load works, logged at debug level when it fails (ValueError: `load_failure`)."""
    try:
        with captured_output() as captured:
            env = load_environment(env_id)
    except ValueError as err:
        logger.debug("verifiers:%s printed while loading:\n%s", env_id, captured.text)
        raise ValueError(load_failure(env_id, err)) from err
    sys.stderr.write(captured.text)
    return env


def prompt_messages(prompt: Any, env_id: str) -> list[dict[str, str]]:
    """A dataset item's prompt as plain chat messages (ValueError for a completion prompt)."""
    if not isinstance(prompt, list):
        raise ValueError(f"verifiers:{env_id}: its prompts are {type(prompt).__name__}, not "
                         "chat messages (message_type='completion' is not supported)")
    return [{"role": str(m["role"]), "content": message_text(m.get("content"),
                                                             f"verifiers:{env_id}'s prompt")}
            for m in prompt]  # fmt: skip


def _items(dataset: Any, seed: int, env_id: str) -> list[dict[str, Any]]:
    """The dataset's items, shuffled with ``seed``, each prompt once."""
    items, seen = [], set()
    for item in dataset.shuffle(seed=seed):
        prompt = prompt_messages(item["prompt"], env_id)
        key = json.dumps(prompt, sort_keys=True)
        if key not in seen:
            seen.add(key)
            items.append({**item, "prompt": prompt})
    return items


def make_rows(env_id: str, items: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """verl rows of dataset items (see the module docstring)."""
    rows = []
    for index, item in enumerate(items):
        info = item.get("info")
        example = {"prompt": item["prompt"], "answer": item.get("answer", ""),
                   "task": item.get("task") or env_id,
                   "info": json.loads(info) if isinstance(info, str) else (info or {}),
                   "example_id": int(item.get("example_id", index))}  # fmt: skip
        rows.append({
            "data_source": f"verifiers/{env_id}",
            "prompt": item["prompt"],
            "ability": "verifiers",
            "reward_model": {"style": "interaction", "ground_truth": str(example["answer"])},
            "extra_info": {
                "index": index, "split": split,
                "interaction_kwargs": {"name": INTERACTION_NAME,
                                       "input": json.dumps(example, default=str)},
            },
        })  # fmt: skip
    return rows


def configs(env_id: str, env: Any) -> dict[str, Any]:
    """interaction.yaml, and tools.yaml for a tool environment."""
    out: dict[str, Any] = {"interaction": {"interaction": [{
        "name": INTERACTION_NAME,
        "class_name": "agentrl.interactions.verifiers.VerifiersInteraction",
        "config": {"env": env_id},
    }]}}  # fmt: skip
    if env.oai_tools:
        out["tools"] = {"tools": [
            {"class_name": "agentrl.tools.verifiers.VerifiersTool", "config": {"env": env_id},
             "tool_schema": tool} for tool in env.oai_tools]}  # fmt: skip
    return out


def check_kind(env_id: str, env: Any) -> None:
    """ValueError for an environment agentrl cannot play (naming why)."""
    vf = require_verifiers(f"verifiers:{env_id}")
    if not isinstance(env, vf.MultiTurnEnv):
        raise ValueError(f"verifiers:{env_id} is a {type(env).__name__}, not a vf.MultiTurnEnv "
                         "(single-turn, tool or multi-turn): its rollout is its own code")
    if env.message_type != "chat":
        raise ValueError(f"verifiers:{env_id} uses message_type={env.message_type!r}; agentrl "
                         "plays chat environments")
    if isinstance(env, vf.StatefulToolEnv):
        raise ValueError(f"verifiers:{env_id} is a StatefulToolEnv: its tools take arguments "
                         "from the rollout's state, which agentrl's tools do not see")
    if env.oai_tools and not isinstance(env, vf.ToolEnv):
        raise ValueError(f"verifiers:{env_id} has tools but is not a vf.ToolEnv: its "
                         "env_response runs them, and agentrl runs tool calls itself")


def prepare(env_id: str, size: int, test_size: int, seed: int, answer_tag: str = ANSWER_TAG, *,
            allow_shared_prompts: bool = False
            ) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(train rows, test rows, {"interaction": ..., "tools": ...}): disjoint by prompt
    (`allow_shared_prompts`, for games whose prompt hides their setup, changes nothing)."""
    env = load_quietly(env_id)
    check_kind(env_id, env)
    has_eval = env.build_eval_dataset() is not None
    pool = _items(env.get_dataset(), seed, env_id) if env.build_dataset() is not None else []
    if has_eval:
        test = _items(env.get_eval_dataset(), seed, env_id)[:test_size]
        prompts = {json.dumps(t["prompt"], sort_keys=True) for t in test}
        train = [i for i in pool if json.dumps(i["prompt"], sort_keys=True) not in prompts]
    else:
        test, train = pool[:test_size], pool[test_size:]
    train = train[:size]
    if len(test) < test_size or len(train) < size:
        raise ValueError(f"verifiers:{env_id} has {len(train)} training and {len(test)} test "
                         f"items with distinct prompts, fewer than the {size} and {test_size} "
                         "asked for (--size, --test-size)")
    return (make_rows(env_id, train, "train"), make_rows(env_id, test, "test"),
            configs(env_id, env))


__all__ = ["check_kind", "configs", "load_failure", "load_quietly", "make_rows", "prepare",
           "prompt_messages"]
