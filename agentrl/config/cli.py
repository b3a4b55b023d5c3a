"""`agentrl config [--config recipe.yaml] [key.sub=value ...]`: print the resolved config.

Shows exactly what a run would use after defaults, the recipe and the overrides are merged,
or every problem with them (exit code 2).
"""

from __future__ import annotations

import argparse
import sys

from agentrl.config.loader import ConfigError, config_to_yaml, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="recipe YAML (only what differs)")
    parser.add_argument("overrides", nargs="*", help="key.sub=value overrides")


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as err:
        sys.stderr.write(f"{err}\n")
        return 2
    sys.stdout.write(config_to_yaml(cfg))
    return 0
