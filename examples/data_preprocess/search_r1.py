"""Convert Search-R1's released files into verl parquet rows for the search tool, and its
Wikipedia corpus into the retriever's corpus and index.

Usage:

    # Search-R1's parquet (PeterJinGo/nq_hotpotqa_train: train.parquet, test.parquet)
    python examples/data_preprocess/search_r1.py --train_file nq_hotpotqa_train/train.parquet \
        --test_file nq_hotpotqa_train/test.parquet --local_dir ~/data/search_r1
    # jsonl questions {"id", "question", "golden_answers"} (FlashRAG's NQ / HotpotQA files)
    python examples/data_preprocess/search_r1.py --train_file nq/train.jsonl \
        --test_file nq/test.jsonl --local_dir ~/data/searchR1_nq [--data_source searchR1_nq]
    # the corpus (wiki-18.jsonl or .jsonl.gz) -> LOCAL_DIR/corpus.jsonl, and optionally its index
    python examples/data_preprocess/search_r1.py --corpus wiki-18.jsonl.gz \
        --local_dir ~/data/search_r1 [--max_docs 100000] [--index_dir ~/data/search_r1/bm25]

Each question file becomes ``train.parquet`` or ``test.parquet`` in ``--local_dir``; the
format follows the file's extension. Parquet rows keep their ``data_source`` (``nq``,
``hotpotqa``, ...); jsonl rows take ``--data_source`` or one read from the file name
(``hotpot`` -> ``searchR1_hotpotqa``, ``nq`` -> ``searchR1_nq``). The exact-match scorer
knows all of these names. The rows, the prompt and where we depart from Search-R1:
agentrl/data/search_r1.py.

``--index_dir`` builds a retrieval index over the written corpus (``--index_kind bm25``, or
``dense`` with ``--dense_model intfloat/e5-base-v2``, which needs faiss and
sentence-transformers), the one ``agentrl retriever --index-dir`` then serves.

A malformed input stops the script with one error naming the file, the row (parquet, from
0) or line (jsonl, from 1) and the field, exit code 1, and nothing is written.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from agentrl.data.search_r1 import (
    INSTRUCTION,
    SearchR1DataError,
    read_search_r1_file,
    write_retriever_corpus,
)
from agentrl.utils.jsonl import write_parquet

__all__ = ["INSTRUCTION", "main"]

logger = logging.getLogger("data_preprocess.search_r1")


def build_index(corpus: Path, index_dir: str, kind: str, dense_model: str | None) -> int:
    """Build (or load, if up to date) the retriever's index of ``corpus``; its size."""
    from envs.retriever.index import open_index

    return len(open_index(Path(index_dir).expanduser(), corpus, kind, dense_model))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_file", type=Path, help="Search-R1 parquet or jsonl, train split")
    parser.add_argument("--test_file", type=Path, help="Search-R1 parquet or jsonl, test split")
    parser.add_argument("--local_dir", default="~/data/searchR1", help="output directory")
    parser.add_argument(
        "--data_source",
        default=None,
        help="data_source of every row (default: the parquet rows' own; for jsonl, from the "
        "file name: searchR1_nq or searchR1_hotpotqa)",
    )
    parser.add_argument("--corpus", type=Path, help="Search-R1 corpus, .jsonl or .jsonl.gz")
    parser.add_argument("--max_docs", type=int, default=None, help="keep the first N passages")
    parser.add_argument("--index_dir", default=None, help="build the retriever's index here")
    parser.add_argument("--index_kind", choices=["bm25", "dense"], default="bm25")
    parser.add_argument(
        "--dense_model", default=None, help="encoder of a dense index, e.g. intfloat/e5-base-v2"
    )
    args = parser.parse_args(argv)
    if args.train_file is None and args.test_file is None and args.corpus is None:
        parser.error("give at least one of --train_file, --test_file or --corpus")
    if args.max_docs is not None and args.max_docs < 1:
        parser.error(f"--max_docs must be >= 1, got {args.max_docs}")
    if args.index_dir and args.corpus is None:
        parser.error("--index_dir needs --corpus")
    if args.index_kind == "dense" and args.index_dir and not args.dense_model:
        parser.error("--index_kind dense needs --dense_model (e.g. intfloat/e5-base-v2)")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    out_dir = Path(args.local_dir).expanduser()
    splits = [("train", args.train_file), ("test", args.test_file)]
    try:
        converted = [
            (split, read_search_r1_file(path, split, args.data_source))
            for split, path in splits
            if path is not None
        ]
        if args.corpus is not None:
            corpus_out = out_dir / "corpus.jsonl"
            count = write_retriever_corpus(args.corpus, corpus_out, args.max_docs)
            logger.info("corpus: wrote %d documents to %s", count, corpus_out)
    except SearchR1DataError as exc:
        logger.error("%s", exc)
        return 1
    for split, rows in converted:
        out_path = out_dir / f"{split}.parquet"
        write_parquet(rows, out_path)
        logger.info("%s: wrote %d rows to %s", split, len(rows), out_path)
    if args.index_dir:
        try:
            size = build_index(corpus_out, args.index_dir, args.index_kind, args.dense_model)
        except (ValueError, ImportError) as exc:
            logger.error("%s", exc)
            return 1
        logger.info("index: %s index of %d documents in %s", args.index_kind, size, args.index_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
