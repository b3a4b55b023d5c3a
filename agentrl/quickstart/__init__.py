"""`agentrl quickstart`: a nano model learns, on 2 CPU cores in about 4 minutes, when to
call a calculator: SFT on an imperfect teacher, then GRPO, against an SFT-only control.

    agentrl quickstart --out-dir outputs/quickstart [--seed N] [--steps 25] [key.sub=value ...]
    agentrl quickstart --task search --out-dir OUT [--seed N]   # the CPU Search-R1 run
    agentrl quickstart --task retool --out-dir OUT [--seed N]   # the CPU ReTool run
    agentrl quickstart --task reasoning_gym --out-dir OUT [--seed N]   # recipes/envs
    agentrl quickstart --task blackjack --out-dir OUT [--seed N]   # recipes/envs (a game)
    agentrl quickstart --rollout vllm --server-python .venv-vllm/bin/python --out-dir OUT
                                     # the GRPO stage on vLLM servers (docs/quickstart.md)

Bad settings and a bad RL config (the overrides given) are refused before the first stage,
with one message and exit status 2 (checks.py). A stage that misses its target (SFT's
cap before its skill check, a `--teacher` scoring below the student) stops the run with
one message and exit status 3, unless `--allow-missed-targets` (or, for the teacher,
`--allow-weak-teacher`) goes on (targets.py). The stages are in
agentrl/quickstart/pipeline.py, the settings in settings.py, the tasks in
agentrl/tasks/quickstart.py, the evaluation in evaluation.py; the numbers measured on 2
cores are in docs/quickstart.md, recipes/search_r1/README.md and recipes/retool/README.md.
Writes `OUT_DIR/report.json`,
`OUT_DIR/report.html` (plots and a trajectory viewer, `agentrl report`) and
`OUT_DIR/quickstart.log`. The console shows one progress bar per stage and, at the end,
the before/after/control table with standard errors and the seconds of every stage.
"""

from __future__ import annotations

import argparse
import logging
import sys

from agentrl.quickstart.checks import check_run
from agentrl.quickstart.pipeline import rl_model_dir, run_quickstart
from agentrl.quickstart.settings import QuickstartSettings, settings_for
from agentrl.quickstart.targets import (
    ALLOW_ANY,
    ALLOW_WEAK_TEACHER,
    TARGET_MISSED_EXIT,
    TargetMissed,
)
from agentrl.tasks.quickstart import TASKS
from agentrl.utils.command import report_error

__all__ = [
    "QuickstartSettings",
    "add_arguments",
    "rl_model_dir",
    "run",
    "run_quickstart",
    "settings_for",
]

# flag -> (type, help); each defaults to the task's measured setting when not given
_FLAGS = {
    "--seed": (int, "seed of weights, data and sampling"),
    "--steps": (int, "GRPO steps (0: SFT only)"),
    "--size": (str, "tiny model size (make-tiny-model --size)"),
    "--sft-steps": (int, "cap on SFT steps (the exact count with --sft-check 0)"),
    "--sft-check": (
        float,
        "held-out turn reproduction that ends SFT, then --sft-extra-steps more (0: no check)",
    ),
    "--sft-extra-steps": (int, "SFT steps after the held-out check passes"),
    "--sft-examples": (int, "distinct SFT conversations"),
    "--sft-lr": (float, "SFT learning rate"),
    "--rl-lr": (float, "the GRPO stage's learning rate (actor_rollout_ref.actor.optim.lr)"),
    "--sft-batch-size": (int, "SFT batch size"),
    "--sft-max-length": (int, "longest SFT conversation in tokens (longer ones are an error)"),
    "--direct-rate": (
        float,
        "share of SFT traces answering without the tool on the teacher's direct phrasings "
        "(blackjack: share of the teacher's moves on hands of 17-21 that hit)",
    ),
    "--n-train": (int, "RL training problems"),
    "--n-test": (int, "held-out test problems"),
    "--val-freq": (int, "validate during RL every N steps on --val-rows test problems (0: no)"),
    "--val-rows": (int, "test problems of the validation during RL (the first ones)"),
    "--teacher": (str, "a trained model of the task to distil from on-policy instead of GRPO"),
    "--rollout": (
        str,
        "the GRPO stage's backend (rollout.name; SFT and evaluation stay on hf); vllm: "
        "the tiny size (vLLM's CPU attention refuses the nano model's 16-wide heads), untied, "
        "SFT lr 1e-3, GRPO lr 1.5e-4",
    ),
    "--server-python": (str, "interpreter of the rollout's servers (e.g. .venv-vllm/bin/python)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", default="outputs/quickstart", help="where everything goes")
    parser.add_argument(
        "--task",
        default="calculator",
        choices=sorted(TASKS),
        help="calculator (the main job), search (the CPU Search-R1 run), retool (the CPU "
        "ReTool run), reasoning_gym (reasoning-gym's basic_arithmetic with the calculator) or "
        "blackjack (TextArena's Blackjack-v0 over turns, no tool): the last two are "
        "recipes/envs/",
    )
    for flag, (kind, text) in _FLAGS.items():
        parser.add_argument(flag, type=kind, default=None, help=text + " (default: the task's)")
    parser.add_argument(
        "--no-control", action="store_true", help="skip the SFT-only control (faster)"
    )
    parser.add_argument(
        ALLOW_WEAK_TEACHER, action="store_true",
        help="distil even from a --teacher that scores below the student after SFT",
    )  # fmt: skip
    parser.add_argument(
        ALLOW_ANY, action="store_true",
        help=f"go on after any stage misses its target (else the run stops, exit status "
        f"{TARGET_MISSED_EXIT}): SFT's cap before its skill check, a weak --teacher",
    )  # fmt: skip
    parser.add_argument("overrides", nargs="*", help="RL config overrides key.sub=value")


def settings_from_args(args: argparse.Namespace) -> QuickstartSettings:
    """The task's settings with the flags that were given."""
    names = [flag[2:].replace("-", "_") for flag in _FLAGS]
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.no_control:
        given["control"] = False
    given |= {name: True for name in ("allow_weak_teacher", "allow_missed_targets")
              if getattr(args, name)}  # fmt: skip
    return settings_for(args.task, overrides=tuple(args.overrides), **given)


def run(args: argparse.Namespace) -> int:
    with quiet_console():
        try:  # before any stage: one message, exit 2
            settings = settings_from_args(args)
            check_run(args.out_dir, settings)
        except ValueError as err:  # a ConfigError among them
            return report_error(err)
        try:  # a stage that missed its target: its message, exit 3 (targets.py)
            run_quickstart(args.out_dir, settings, check=False)
        except TargetMissed as err:
            sys.stderr.write(f"{args.out_dir}: {err}\n")
            return TARGET_MISSED_EXIT
    return 0


class quiet_console:
    """While active, the console shows only the quickstart's own lines, warnings and its
    stages' progress bars (not the model loading and saving bars of transformers and
    datasets); the run's log file (quickstart.log) still gets every record."""

    def __enter__(self) -> None:
        import datasets.utils.logging
        import transformers.utils.logging

        self.handlers = [
            h
            for h in logging.getLogger().handlers
            if type(h) is logging.StreamHandler  # the console, not the file handlers
        ]
        for handler in self.handlers:
            handler.addFilter(_console_filter)
        self.bars = [
            (module, module.is_progress_bar_enabled())
            for module in (transformers.utils.logging, datasets.utils.logging)
        ]
        for module, _ in self.bars:
            module.disable_progress_bar()

    def __exit__(self, *exc_info: object) -> None:
        for handler in self.handlers:
            handler.removeFilter(_console_filter)
        for module, enabled in self.bars:
            if enabled:
                module.enable_progress_bar()


def _console_filter(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING or record.name.startswith("agentrl.quickstart")
