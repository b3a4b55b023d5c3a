"""Write the offline shell tasks for the harness agents (Claude Code, Codex) as verl parquet.

Usage:

    python examples/data_preprocess/shell_tasks.py --local_dir ~/data/shell_tasks \
        --train_size 64 --test_size 16 --seed 0

writes ``train.parquet`` and ``test.parquet`` into ``--local_dir``. Each row is one task
(create a file with given content, count the lines of a file, fix a one-line bug so a
hidden test passes) with its workspace files, check command and the check's own files
(the hidden test, never shown to the policy) in ``extra_info`` (see
agentrl/tasks/shell_tasks.py and docs/agents.md); recipes/harness trains on them.
"""

from __future__ import annotations

import argparse
import logging
import sys

from agentrl.tasks.shell_tasks import write_shell_task_dataset


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", default="~/data/shell_tasks", help="output directory")
    parser.add_argument("--train_size", type=int, default=64, help="number of train rows")
    parser.add_argument("--test_size", type=int, default=16, help="number of test rows")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    args = parser.parse_args(argv)
    for name in ("train_size", "test_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    write_shell_task_dataset(args.local_dir, args.train_size, args.test_size, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
