"""Convert math files into verl parquet rows for the ReTool recipe (the code sandbox tool).

Usage:

    python examples/data_preprocess/retool.py --train_file math.jsonl \
        --test_file aime_2024.jsonl --local_dir ~/data/retool

Each file is jsonl, one ``{"question": ..., "answer": ...}`` per line (``problem`` and
``Answer`` are accepted too), or parquet with those columns or in verl's row format (e.g.
BytedTsinghua-SIA/DAPO-Math-17k, BytedTsinghua-SIA/AIME-2024). Each given file becomes
``train.parquet`` or ``test.parquet`` in ``--local_dir``. Rows get ReTool's prompt (solve step
by step, run Python with the ``code_interpreter`` tool, answer in ``\\boxed{}``),
``data_source`` ``retool/math`` and ``tools_kwargs`` for the tool; repeated problems are
dropped unless ``--keep_duplicates``. The row format and the prompt are documented in
agentrl/data/retool.py. A malformed record stops the script with the file, the line or row
and the field.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from agentrl.data.retool import DATA_SOURCE, RetoolDataError, convert_file
from agentrl.utils.jsonl import write_parquet

logger = logging.getLogger("data_preprocess.retool")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_file", type=Path, help="math jsonl or parquet for the train split")
    parser.add_argument("--test_file", type=Path, help="math jsonl or parquet for the test split")
    parser.add_argument("--local_dir", default="~/data/retool", help="output directory")
    parser.add_argument(
        "--data_source",
        default=DATA_SOURCE,
        help=f"data_source of every row (default {DATA_SOURCE}, scored by the last \\boxed{{}}); "
        "another name needs a registered scorer or custom_reward_function",
    )
    parser.add_argument(
        "--keep_duplicates", action="store_true", help="keep repeated (question, answer) records"
    )
    args = parser.parse_args(argv)
    if args.train_file is None and args.test_file is None:
        parser.error("give at least one of --train_file, --test_file")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    out_dir = Path(args.local_dir).expanduser()
    splits = [("train", args.train_file), ("test", args.test_file)]
    try:
        converted = [
            (split, convert_file(path, split, data_source=args.data_source,
                                 keep_duplicates=args.keep_duplicates))
            for split, path in splits
            if path is not None
        ]
    except RetoolDataError as exc:
        logger.error("%s", exc)
        return 1
    for split, rows in converted:
        out_path = write_parquet(rows, out_dir / f"{split}.parquet")
        logger.info("%s: wrote %d rows to %s", split, len(rows), out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
