"""Write a "guess the number" dataset (verl parquet) whose rows configure the tool per row.

    python examples/custom_tool/make_data.py --out ~/data/guess_number/train.parquet --rows 256

Each row's ``extra_info.tools_kwargs["guess_number"]["create_kwargs"]`` holds that row's
secret, so every trajectory plays its own game.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from agentrl.utils.jsonl import write_parquet

PROMPT = (
    "I picked a whole number from {low} to {high}. Find it with the guess_number tool, "
    "then answer with the number."
)


def make_row(index: int, secret: int, low: int = 1, high: int = 100) -> dict:
    """One dataset row; the ``tools_kwargs`` entry is what reaches the tool's methods."""
    return {
        "data_source": "guess_number",
        "prompt": [{"role": "user", "content": PROMPT.format(low=low, high=high)}],
        "ability": "game",
        "reward_model": {"style": "rule", "ground_truth": str(secret)},
        "extra_info": {
            "index": index,
            "split": "train",
            "tools_kwargs": {
                "guess_number": {
                    "create_kwargs": {"secret": secret, "low": low, "high": high},
                }
            },
        },
    }


def write_dataset(out: str | Path, rows: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    return write_parquet([make_row(i, rng.randint(1, 100)) for i in range(rows)], out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="parquet file to write")
    parser.add_argument("--rows", type=int, default=256, help="number of rows")
    parser.add_argument("--seed", type=int, default=0, help="seed of the secrets")
    args = parser.parse_args(argv)
    write_dataset(args.out, args.rows, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
