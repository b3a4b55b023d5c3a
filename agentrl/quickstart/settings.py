"""The quickstart's settings and the RL stage's config they make.

    s = settings_for("search", seed=1)             # a task's defaults, then what is given
    cfg = rl_config(model_dir, data, tool_config, run_dir, s, val_path)

`QuickstartSettings` is every knob of a run (agentrl/quickstart/pipeline.py runs the
stages); `rl_config` is the task's recipe with the run's paths, seed, step count and the
overrides given, validated by `load_config` (agentrl/quickstart/checks.py builds it before
the first stage, from the paths the stages will write).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agentrl.config import load_config
from agentrl.tasks.quickstart import TASKS, TaskData


@dataclasses.dataclass(frozen=True)
class QuickstartSettings:
    """Every knob of the quickstart; the defaults are the calculator's measured ones
    (docs/quickstart.md); `settings_for` applies another task's defaults."""

    task: str = "calculator"  # agentrl.tasks.quickstart.TASKS
    seed: int = 0
    size: str = "nano"  # agentrl.models.tiny.TINY_SIZES
    untied: bool = False  # the tiny model's output layer gets weights of its own
    steps: int = 25  # GRPO steps (0: stop after SFT)
    sft_steps: int = 3000  # cap on SFT optimizer steps (exact count with sft_check=0)
    sft_check: float = 0.8  # held-out turn reproduction that ends SFT (0: no check)
    sft_extra_steps: int = 400  # SFT steps after the check first passes
    sft_check_rows: int = 128  # tool-using SFT conversations held out for the check
    sft_warmup_steps: int | None = 110  # linear lr warm-up (None: the first 10% of sft_steps)
    sft_examples: int = 8192  # distinct SFT conversations
    sft_lr: float = 3e-3
    rl_lr: float | None = None  # the GRPO stage's actor lr (None: the recipe's optim.lr)
    sft_batch_size: int = 32
    sft_max_length: int = 1024  # longest SFT conversation in tokens (longer: an error)
    direct_rate: float = 0.8  # share of direct answers on the teacher's direct phrasings
    n_train: int = 512  # RL training prompts
    n_test: int = 256  # held-out test prompts
    val_freq: int = 5  # validate during RL every this many steps (0: only eval_sft/eval_rl)
    val_rows: int = 64  # test problems of that validation (the first ones of the test set)
    control: bool = True  # run the SFT-only control
    # a trained model of the task (same tokenizer): the RL stage distils from it on-policy
    # (algorithm.adv_estimator=on_policy_distill) and the report gains its evaluation
    teacher: str | None = None
    # a stage that misses its target stops the run (agentrl/quickstart/targets.py) unless
    # one of these goes on: past the teacher's target only, or past any target
    allow_weak_teacher: bool = False
    allow_missed_targets: bool = False
    # the GRPO stage's inference backend (actor_rollout_ref.rollout.name); SFT and the
    # evaluations always run on the embedded hf engine. A name of ROLLOUT_VARIANTS brings
    # that variant's own defaults (`settings_for`).
    rollout: str = "hf"
    server_python: str | None = None  # the interpreter its servers run under (null: this one)
    overrides: tuple[str, ...] = ()  # RL config overrides key.sub=value


# rollout backend -> the settings its quickstart variant changes (before the flags given).
# vLLM's CPU attention refuses the nano model's 16-wide heads (it serves 32, 64, ...:
# agentrl/rollout/backends/vllm.py), so its variant runs the smallest size it serves, 32-wide
# heads, and, because its CPU build keeps a stale tied output layer after a weight reload
# (docs/backends.md), with an output layer of its own. The tiny model's SFT lr is its own:
# at the nano model's 3e-3 its copying skill crept to 0.72 by the 3,000-step cap (seed 0);
# at 1e-3 it jumped between steps 300 and 450 and passed the check at 700 (docs/quickstart.md).
# Its GRPO lr is half the recipe's: at 3e-4 seed 1's copying fell apart after step 15 (0.781);
# at 1.5e-4, tuned on seeds 0-1, seeds 2-6 are the table in docs/quickstart.md.
ROLLOUT_VARIANTS: dict[str, dict[str, Any]] = {
    "vllm": {"size": "tiny", "untied": True},
}
# model size -> the learning rates measured for it (the nano model's are the dataclass's):
# the tiny size's, above, whichever backend rolls out (the distillation recipe's teacher is
# a tiny quickstart on the hf engine; at 3e-3 its SFT hit the 3,000-step cap on a seed)
SIZE_DEFAULTS: dict[str, dict[str, Any]] = {
    "tiny": {"sft_lr": 1e-3, "rl_lr": 1.5e-4},
}


def settings_for(task: str, **given: Any) -> QuickstartSettings:
    """The settings of `task`: its defaults, then its rollout variant's (`ROLLOUT_VARIANTS`,
    when `given` names one in `rollout`), then its size's (`SIZE_DEFAULTS`), then what is
    `given`."""
    if task not in TASKS:
        raise ValueError(f"unknown quickstart task {task!r}; choose one of {sorted(TASKS)}")
    variant = ROLLOUT_VARIANTS.get(given.get("rollout", "hf"), {})
    chosen = TASKS[task].defaults | variant
    size = SIZE_DEFAULTS.get(given.get("size", chosen.get("size", "nano")), {})
    return dataclasses.replace(QuickstartSettings(task=task), **(chosen | size | given))


def environment_overrides(tool_config: Path | None, data: TaskData, task: str) -> list[str]:
    """The multi-turn keys of a run of `task`: its tool config (null: no tool) and its
    interaction config, when it has one (written by its `prepare` beside the data)."""
    interaction = TASKS[task].interaction
    return [
        "actor_rollout_ref.rollout.multi_turn.tool_config_path="
        + ("null" if tool_config is None else str(tool_config)),
        *([] if interaction is None else [
            "actor_rollout_ref.rollout.multi_turn.interaction_config_path="
            f"{data.train.parent / interaction}"]),
    ]  # fmt: skip


def validation_overrides(val_path: Path | None, s: QuickstartSettings) -> list[str]:
    """The keys of the validation during RL: `val_path` every `val_freq` steps and before
    the first (none without a `val_path` or with `val_freq` 0)."""
    if val_path is None or s.val_freq <= 0:
        return []
    return [f"data.val_files={val_path}", f"trainer.test_freq={s.val_freq}",
            "trainer.val_before_train=true"]  # fmt: skip


def rl_config(
    model_dir: Path, data: TaskData, tool_config: Path | None, run_dir: Path,
    s: QuickstartSettings, val_path: Path | None = None,
) -> DictConfig:
    """The task's recipe config with the run's paths, seed and step count (and, with a
    `val_path`, `validation_overrides`)."""
    return load_config(
        TASKS[s.task].recipe_config,
        [
            f"actor_rollout_ref.model.path={model_dir}",
            *environment_overrides(tool_config, data, s.task),
            f"actor_rollout_ref.rollout.engine_kwargs.seed={s.seed}",
            f"data.train_files={data.train}",
            f"data.seed={s.seed}",
            f"trainer.seed={s.seed}",
            f"trainer.total_training_steps={s.steps}",
            f"trainer.default_local_dir={run_dir}",
            f"trainer.rollout_data_dir={run_dir / 'rollouts'}",
            "trainer.logger=[file]",  # the progress bar shows the key numbers
            *validation_overrides(val_path, s),
            f"actor_rollout_ref.rollout.name={s.rollout}",
            *([] if s.rl_lr is None else [f"actor_rollout_ref.actor.optim.lr={s.rl_lr}"]),
            *([] if s.server_python is None else [
                f"actor_rollout_ref.rollout.server_python={s.server_python}"]),
            *([] if s.teacher is None else [
                "algorithm.adv_estimator=on_policy_distill",
                f"actor_rollout_ref.teacher.model.path={s.teacher}"]),
            *s.overrides,
        ],
    )


__all__ = ["ROLLOUT_VARIANTS", "QuickstartSettings", "environment_overrides", "rl_config",
           "settings_for", "validation_overrides"]
