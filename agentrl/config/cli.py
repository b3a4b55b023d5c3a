"""`agentrl config`: print the resolved config.

    agentrl config [--config recipe.yaml] [key.sub=value ...]
    agentrl config --config-path DIR --config-name NAME [key=value | +key=value | ~key ...]

Shows exactly what a run would use after defaults, the YAML and the overrides are merged,
or every problem with them (exit code 2). `agentrl train` and `python -m
agentrl.trainer.main_ppo` take the same arguments (`add_config_arguments`,
`config_from_args`).
"""

from __future__ import annotations

import argparse
import sys

from omegaconf import DictConfig

from agentrl.config.loader import ConfigError, config_to_yaml, load_config
from agentrl.utils.command import report_error


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """The config arguments of every command that loads a run config (verl's, too)."""
    parser.add_argument("--config", default=None,
                        help="recipe YAML (only what differs, or a defaults: list)")
    parser.add_argument("--config-path", "-cp", dest="config_path", default=None,
                        help="directory of the config YAML (verl/Hydra; relative to the "
                             "current directory)")
    parser.add_argument("--config-name", "-cn", dest="config_name", default=None,
                        help="config YAML name in --config-path (verl/Hydra)")
    parser.add_argument("overrides", nargs="*",
                        help="Hydra overrides: key.sub=value, +key=value, ++key=value, ~key")


def config_from_args(args: argparse.Namespace) -> DictConfig:
    """The validated config the parsed arguments name; raises `ConfigError`."""
    if args.config is not None and (args.config_path or args.config_name):
        raise ConfigError(["give either --config FILE or --config-path/--config-name"])
    return load_config(args.config, args.overrides, config_dir=args.config_path,
                       config_name=args.config_name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
    except ConfigError as err:
        return report_error(err)
    sys.stdout.write(config_to_yaml(cfg))
    return 0


if __name__ == "__main__":
    import sys

    from agentrl.utils.command import main_of

    sys.exit(main_of(sys.modules[__name__], "config"))
