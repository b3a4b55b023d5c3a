"""The tasks `agentrl quickstart` can teach: what each brings to the shared stages.

A task names its RL recipe and its tool, prepares the three disjoint data pools (SFT
conversations from an imperfect teacher, RL prompts, held-out prompts with group labels
for the report), and provides the tool config for the run (starting any server the tool
needs, and stopping it afterwards). The stages themselves (agentrl/quickstart/pipeline.py)
are the same for every task.

- ``calculator`` (the README's main job): arithmetic expressions, the calculator tool;
- ``search`` (the CPU Search-R1 run, recipes/search_r1/): questions about fictional people,
  the search tool against a local BM25 retriever over their documents;
- ``retool`` (the CPU ReTool run, recipes/retool/): sums of lists, products and sums of
  ranges, the code_interpreter tool against the local code sandbox;
- ``reasoning_gym`` (the CPU run of recipes/envs/): reasoning-gym's ``basic_arithmetic``
  items, scored by reasoning-gym, the calculator tool (agentrl/environments/quickstart_task.py,
  beside the adapter it uses);
- ``blackjack`` (the multi-turn CPU run of recipes/envs/): TextArena's ``Blackjack-v0``
  through the TextArena interaction, no tool, the game's reward
  (agentrl/environments/quickstart_game.py).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

# Phrasings on which the calculator's imperfect teacher mostly answers without the tool.
CALCULATOR_DIRECT_PHRASINGS = ("compute", "equals", "evaluate", "find")
# The same for the search teacher: one phrasing of each question kind.
SEARCH_DIRECT_PHRASINGS = ("born_town", "founder_name", "bridge_town")
# The same for the ReTool teacher: one phrasing of each problem kind.
RETOOL_DIRECT_PHRASINGS = ("add_up", "multiply", "add_range")
# The same for the reasoning-gym teacher: its questions of 2 or 3 terms.
REASONING_GYM_DIRECT_PHRASINGS = ("short",)


@dataclass(frozen=True)
class TaskData:
    """The files of the three pools and, per grouping, a label for every test row."""

    sft: Path
    train: Path
    test: Path
    groups: dict[str, list[str]]


@dataclass(frozen=True)
class Task:
    name: str
    recipe_config: Path
    tool_name: str
    prepare: Callable[[Path, Any], TaskData]  # (data dir, settings) -> TaskData
    # data dir -> tool config (None: the task has no tool)
    tools: Callable[[Path], contextlib.AbstractContextManager[Path | None]]
    defaults: dict[str, Any] = field(default_factory=dict)  # QuickstartSettings overrides
    aliases: dict[str, str] = field(default_factory=dict)  # report key -> evaluation metric
    answer_tag: str = "<answer>"  # what a final answer contains (evaluation's answer_rate)
    interaction: str | None = None  # interaction config that `prepare` writes in the data dir
    # generate rows -> the task's own metrics, added to each evaluation's greedy ones
    metrics: Callable[[list[dict]], dict[str, float]] | None = None


def recipe_file(recipe: str, name: str) -> Path:
    """A file of a recipe shipped as package data (recipes/<recipe>/<name>)."""
    return Path(str(resources.files(f"recipes.{recipe}") / name))


def check_disjoint(pools: dict[str, set[str]]) -> None:
    """Raise if two pools share an item (training and test data must not meet)."""
    names = sorted(pools)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = pools[a] & pools[b]
            if shared:
                raise ValueError(
                    f"the {a} and {b} pools share {len(shared)} items, e.g. {sorted(shared)[:3]}"
                )


def write_task_data(
    out_dir: Path,
    sft: list[dict],
    train: list[dict],
    test: list[dict],
    direct_phrasings: Collection[str],
    **groups: list[str],
) -> TaskData:
    """Write the three pools (sft.jsonl, train.parquet, test.parquet) into `out_dir`; the
    test rows are grouped by `phrasing` (the teacher's direct phrasings or the others) and by
    every grouping given."""
    from agentrl.utils.jsonl import write_jsonl, write_parquet

    phrasing = [
        "direct_phrasings" if r["extra_info"]["phrasing"] in direct_phrasings
        else "tool_phrasings" for r in test
    ]  # fmt: skip
    return TaskData(
        write_jsonl(sft, out_dir / "sft.jsonl"),
        write_parquet(train, out_dir / "train.parquet"),
        write_parquet(test, out_dir / "test.parquet"),
        {"phrasing": phrasing, **groups},
    )


# ---------------------------------------------------------------------- calculator


def _calculator_data(out_dir: Path, s: Any) -> TaskData:
    from agentrl.tasks.arithmetic import SHORT_SYSTEM_PROMPT, make_arithmetic_rows
    from agentrl.tasks.arithmetic_sft import make_arithmetic_sft_rows
    from agentrl.tools import load_tool_schemas

    (schema,) = load_tool_schemas(recipe_file("quickstart", "calculator_tool.yaml"))
    level, prompt, direct = "quickstart", SHORT_SYSTEM_PROMPT, CALCULATOR_DIRECT_PHRASINGS
    sft = make_arithmetic_sft_rows(
        s.sft_examples, "sft", s.seed, level, schema, prompt, direct, s.direct_rate
    )
    train = make_arithmetic_rows(s.n_train, "train", s.seed, level, prompt)
    test = make_arithmetic_rows(s.n_test, "test", s.seed, level, prompt)
    check_disjoint(
        {
            "sft": {r["expression"] for r in sft},
            "train": {r["extra_info"]["expression"] for r in train},
            "test": {r["extra_info"]["expression"] for r in test},
        }
    )
    return write_task_data(out_dir, sft, train, test, direct)


CALCULATOR = Task(
    name="calculator",
    recipe_config=recipe_file("quickstart", "config.yaml"),
    tool_name="calculator",
    prepare=_calculator_data,
    tools=lambda data_dir: contextlib.nullcontext(recipe_file("quickstart", "calculator_tool.yaml")),
)


# ------------------------------------------------- tasks whose modules load on first use


def _lazy(module: str, name: str, *bound: Any) -> Callable[..., Any]:
    """`module.name(*args, *bound)`, importing the module at the first call (the search
    and sandbox stacks are only loaded by the runs that use them)."""

    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, *bound)

    return call


_SEARCH = "agentrl.tasks.search_task"
SEARCH = Task(
    name="search",
    recipe_config=recipe_file("search_r1", "cpu_config.yaml"),
    tool_name="search",
    prepare=_lazy(_SEARCH, "write_search_data", SEARCH_DIRECT_PHRASINGS),
    tools=_lazy(_SEARCH, "serve_search_tool"),
    # a fixed SFT length (sft_check 0) warmed up over its first 10%, as measured: the
    # held-out check is not yet measured on this task
    defaults={"steps": 24, "sft_steps": 800, "sft_check": 0.0, "sft_warmup_steps": None,
              "n_test": 300},
    aliases={
        "exact_match": "accuracy",
        "exact_match_stderr": "accuracy_stderr",
        "sampled_exact_match": "sampled_accuracy",
        "searches_per_question": "tool_calls_per_question",
    },
)


_RETOOL = "agentrl.tasks.retool_task"
RETOOL = Task(
    name="retool",
    recipe_config=recipe_file("retool", "cpu_config.yaml"),
    tool_name="code_interpreter",
    prepare=_lazy(_RETOOL, "write_code_data", RETOOL_DIRECT_PHRASINGS),
    tools=_lazy(_RETOOL, "serve_sandbox_tool"),
    # programs are longer to copy than expressions; a fixed SFT length (sft_check 0) warmed
    # up over its first 10%, as measured: the held-out check is not yet measured on this task
    defaults={"sft_steps": 1800, "sft_check": 0.0, "sft_warmup_steps": None, "n_test": 300},
    aliases={"sandbox_runs_per_question": "tool_calls_per_question"},
    answer_tag="\\boxed{",
)

_REASONING_GYM = "agentrl.environments.quickstart_task"
REASONING_GYM = Task(
    name="reasoning_gym",
    recipe_config=recipe_file("envs", "cpu_config.yaml"),
    tool_name="calculator",
    prepare=_lazy(_REASONING_GYM, "write_reasoning_gym_data", REASONING_GYM_DIRECT_PHRASINGS),
    tools=_lazy(_REASONING_GYM, "calculator_tool"),
    defaults={"n_test": 300},
)

_BLACKJACK = "agentrl.environments.quickstart_game"
BLACKJACK = Task(
    name="blackjack",
    recipe_config=recipe_file("envs", "game_config.yaml"),
    tool_name="",
    prepare=_lazy(_BLACKJACK, "write_blackjack_data", ()),
    tools=lambda data_dir: contextlib.nullcontext(None),  # the game needs no tool
    # whole games are long (5 hands, ~100 tokens a turn) and the teacher's moves on high
    # hands are a coin it tosses, so no turn-reproduction check: a fixed SFT length
    defaults={"n_test": 300, "steps": 40, "sft_examples": 4096, "sft_steps": 300,
              "sft_batch_size": 8, "sft_check": 0.0, "sft_warmup_steps": None,
              "sft_max_length": 2048, "direct_rate": 0.9},
    answer_tag="<answer>",
    interaction="interaction.yaml",  # as `agentrl env prepare textarena:...` names it
    metrics=_lazy(_BLACKJACK, "decision_metrics"),
)

TASKS: dict[str, Task] = {
    task.name: task for task in (CALCULATOR, SEARCH, RETOOL, REASONING_GYM, BLACKJACK)
}
