"""Running one command module: what `agentrl COMMAND ARGS` and `python -m MODULE ARGS` share.

A command module exposes `add_arguments(parser)` and `run(args) -> int` (agentrl/cli.py
lists them). This module sits at the bottom of the package, so a command module's
`python -m` entry runs it without importing the top-level `agentrl.cli`.

A user's mistake (a bad config, a missing file) is reported by `report_error`: one message on
stderr and exit status 2, no traceback unless `--debug` (any command, before or after its
name) or the environment variable `AGENTRL_DEBUG=1` asks for it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DEBUG_ENV = "AGENTRL_DEBUG"  # set (to anything but 0/false/no): user errors show tracebacks
DEBUG_HELP = f"show the traceback of a reported error (the same as {DEBUG_ENV}=1)"


def debug_enabled() -> bool:
    """Whether `--debug` or `AGENTRL_DEBUG` asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def enable_debug() -> None:
    """`--debug`: through the environment, so worker processes see it too."""
    os.environ[DEBUG_ENV] = "1"


def report_error(err: BaseException) -> int:
    """A user's mistake as one message on stderr (the traceback first under `--debug`);
    returns the exit status 2."""
    if debug_enabled():
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    sys.stderr.write(f"{err}\n")
    return 2


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
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    args = parser.parse_intermixed_args(list(argv))
    if args.debug:
        enable_debug()
    return int(module.run(args) or 0)


def main_of(module: ModuleType, command: str, argv: Sequence[str] | None = None) -> int:
    """`python -m MODULE [--log-level L] ARGS`: the same as `agentrl [--log-level L] COMMAND
    ARGS`."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--log-level", default="INFO")
    pre.add_argument("--debug", action="store_true")
    known, rest = pre.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    configure_logging(known.log_level)
    if known.debug:
        enable_debug()
    return run_command_module(module, command, rest)
