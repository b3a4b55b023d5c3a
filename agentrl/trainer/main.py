"""`agentrl train`: verl's main_ppo entry point.

    agentrl train --config recipe.yaml actor_rollout_ref.rollout.n=8 trainer.total_epochs=2

Loads the config (defaults <- recipe <- `key.sub=value` overrides; verl's `+key=value` is
accepted), validates it, then builds a `PPOTrainer`, fits it and closes it. A config
problem is reported on stderr with exit status 2, before any model loads. The last step's
main metrics are logged at the end.
"""

from __future__ import annotations

import argparse
import logging
import sys

from agentrl.config import ConfigError, load_config

logger = logging.getLogger(__name__)

SUMMARY_KEYS = ("critic/score/mean", "response_length/mean", "actor/pg_loss", "perf/throughput")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="recipe YAML (only what differs)")
    parser.add_argument("overrides", nargs="*", help="key.sub=value overrides")


def run(args: argparse.Namespace) -> int:
    from agentrl.trainer.ppo_trainer import run_train

    try:
        history = run_train(load_config(args.config, args.overrides))
    except ConfigError as err:
        sys.stderr.write(f"{err}\n")
        return 2
    if history:
        last = history[-1]
        summary = ", ".join(f"{k}={last[k]:.4g}" for k in SUMMARY_KEYS if k in last)
        logger.info("training done: %d steps; last step: %s", len(history), summary)
    return 0
