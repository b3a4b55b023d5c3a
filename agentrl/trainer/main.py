"""`agentrl train`: verl's main_ppo entry point.

    agentrl train --config recipe.yaml actor_rollout_ref.rollout.n=8 trainer.total_epochs=2
    agentrl train --config-path DIR --config-name NAME key=value +key=value ~key
    python -m agentrl.trainer.main_ppo ...   (the same, under verl's module name)

Loads the config (agentrl's defaults <- the YAML, composed with Hydra as verl does <-
the overrides), validates it, then builds a `PPOTrainer`, fits it and closes it. A config
problem, and every problem of the run's inputs that needs no model to find (data files and
their columns, tool and interaction classes, `trainer.device`: agentrl/trainer/preflight.py),
is reported on stderr as one message with exit status 2, before any model loads (the
traceback too with `--debug` or `AGENTRL_DEBUG=1`). The last step's main metrics are logged
at the end.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from agentrl.config import ConfigError
from agentrl.config.cli import add_config_arguments, config_from_args
from agentrl.utils.command import report_error

if TYPE_CHECKING:
    from agentrl.trainer.ppo_trainer import PPOTrainer

logger = logging.getLogger(__name__)

SUMMARY_KEYS = ("critic/score/mean", "response_length/mean", "actor/pg_loss", "perf/throughput")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)


def create_trainer(config: DictConfig) -> PPOTrainer:
    """The trainer of ``trainer.mode``: PPOTrainer (sync), else OffPolicyTrainer."""
    from agentrl.trainer.ppo_trainer import PPOTrainer

    if config.trainer.mode == "sync":
        return PPOTrainer(config)
    from agentrl.trainer.off_policy import OffPolicyTrainer

    return OffPolicyTrainer(config)


def run_train(config: DictConfig) -> list[dict[str, float]]:
    """Build the trainer of ``trainer.mode``, fit it, close it; returns the per-step
    metrics."""
    trainer = create_trainer(config)
    try:
        return trainer.fit()
    finally:
        trainer.close()


def run(args: argparse.Namespace) -> int:
    try:
        history = run_train(config_from_args(args))
    except ConfigError as err:
        return report_error(err)
    if history:
        last = history[-1]
        summary = ", ".join(f"{k}={last[k]:.4g}" for k in SUMMARY_KEYS if k in last)
        logger.info("training done: %d steps; last step: %s", len(history), summary)
    return 0


if __name__ == "__main__":
    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "train"))
