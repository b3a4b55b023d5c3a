"""`agentrl quickstart`: a nano model learns, on 2 CPU cores in about 5 minutes, when to
call a calculator: SFT on an imperfect teacher, then GRPO, against an SFT-only control.

    agentrl quickstart --out-dir outputs/quickstart [--seed N] [--steps 25] [key.sub=value ...]

The stages are in agentrl/quickstart/pipeline.py, the evaluation in evaluation.py; the
numbers measured on 2 cores are in docs/quickstart.md. Writes `OUT_DIR/report.json`,
`OUT_DIR/report.html` (plots and a trajectory viewer, `agentrl report`) and
`OUT_DIR/quickstart.log`. The console shows one progress bar per stage and, at the end,
the before/after/control table with standard errors and the seconds of every stage.
"""

from __future__ import annotations

import argparse
import logging

from agentrl.quickstart.pipeline import (
    RECIPE_CONFIG,
    RECIPE_TOOLS,
    QuickstartSettings,
    rl_model_dir,
    run_quickstart,
)

__all__ = [
    "RECIPE_CONFIG",
    "RECIPE_TOOLS",
    "QuickstartSettings",
    "add_arguments",
    "rl_model_dir",
    "run",
    "run_quickstart",
]

_DEFAULTS = QuickstartSettings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    parser.add_argument("--out-dir", default="outputs/quickstart", help="where everything goes")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of weights, data, sampling")
    parser.add_argument("--steps", type=int, default=d.steps, help="GRPO steps (0: SFT only)")
    parser.add_argument("--size", default=d.size, help="tiny model size (make-tiny-model --size)")
    parser.add_argument("--sft-steps", type=int, default=d.sft_steps, help="SFT steps")
    parser.add_argument(
        "--sft-examples", type=int, default=d.sft_examples, help="distinct SFT conversations"
    )
    parser.add_argument("--sft-lr", type=float, default=d.sft_lr, help="SFT learning rate")
    parser.add_argument("--sft-batch-size", type=int, default=d.sft_batch_size, help="SFT batch")
    parser.add_argument(
        "--direct-rate",
        type=float,
        default=d.direct_rate,
        help="share of SFT traces that answer without the tool on four of six phrasings",
    )
    parser.add_argument("--n-train", type=int, default=d.n_train, help="RL training problems")
    parser.add_argument("--n-test", type=int, default=d.n_test, help="held-out test problems")
    parser.add_argument(
        "--no-control", action="store_true", help="skip the SFT-only control (faster)"
    )
    parser.add_argument("overrides", nargs="*", help="RL config overrides key.sub=value")


def settings_from_args(args: argparse.Namespace) -> QuickstartSettings:
    return QuickstartSettings(
        seed=args.seed,
        size=args.size,
        steps=args.steps,
        sft_steps=args.sft_steps,
        sft_examples=args.sft_examples,
        sft_lr=args.sft_lr,
        sft_batch_size=args.sft_batch_size,
        direct_rate=args.direct_rate,
        n_train=args.n_train,
        n_test=args.n_test,
        control=not args.no_control,
        overrides=tuple(args.overrides),
    )


def run(args: argparse.Namespace) -> int:
    with quiet_console():
        run_quickstart(args.out_dir, settings_from_args(args))
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
