"""Running one command module: what `agentrl COMMAND ARGS` and `python -m MODULE ARGS` share.

A command module exposes `add_arguments(parser)` and `run(args) -> int` (agentrl/cli.py
lists them). This module sits at the bottom of the package, so a command module's
`python -m` entry runs it without importing the top-level `agentrl.cli`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """The console logging every command gets (`--log-level`, default INFO)."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)


def run_command_module(
    module: ModuleType, command: str, argv: Sequence[str], description: str | None = None
) -> int:
    """Parse ARGV with the module's own arguments and run it, as `agentrl COMMAND`."""
    if description is None:  # the module docstring's first line
        description = next(iter((module.__doc__ or "").strip().splitlines()), None)
    parser = argparse.ArgumentParser(prog=f"agentrl {command}", description=description)
    module.add_arguments(parser)
    return int(module.run(parser.parse_intermixed_args(list(argv))) or 0)


def main_of(module: ModuleType, command: str, argv: Sequence[str] | None = None) -> int:
    """`python -m MODULE [--log-level L] ARGS`: the same as `agentrl [--log-level L] COMMAND
    ARGS`."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--log-level", default="INFO")
    known, rest = pre.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    configure_logging(known.log_level)
    return run_command_module(module, command, rest)
