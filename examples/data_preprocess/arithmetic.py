"""Write an arithmetic word-problem dataset that needs a calculator, as verl parquet files.

Usage:

    python examples/data_preprocess/arithmetic.py --local_dir ~/data/arithmetic \
        --train_size 2000 --test_size 200 --seed 0 --difficulty easy

writes ``train.parquet`` and ``test.parquet`` into ``--local_dir``. Each row asks one
word problem, has ``tools_kwargs`` for the ``calculator`` tool and the exact answer in
``reward_model.ground_truth`` (see agentrl/tasks/arithmetic.py and docs/data.md).
"""

from __future__ import annotations

import argparse
import logging
import sys

from agentrl.tasks.arithmetic import DIFFICULTIES, write_arithmetic_dataset


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", default="~/data/arithmetic", help="output directory")
    parser.add_argument("--train_size", type=int, default=2000, help="number of train rows")
    parser.add_argument("--test_size", type=int, default=200, help="number of test rows")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    parser.add_argument("--difficulty", choices=DIFFICULTIES, default="easy")
    args = parser.parse_args(argv)
    for name in ("train_size", "test_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    write_arithmetic_dataset(
        args.local_dir, args.train_size, args.test_size, args.seed, args.difficulty
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
