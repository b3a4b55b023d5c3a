"""``agentrl retriever``: build (once) or load a retrieval index and serve it over HTTP.

    agentrl retriever --corpus corpus.jsonl --index-dir idx/ --port 8000
    agentrl retriever --index-dir idx/ --port 8000                      # index already built
    agentrl retriever --corpus c.jsonl --index-dir idx/ --kind dense --dense-model intfloat/e5-base-v2

The search tool's ``retrieval_service_url`` is then ``http://HOST:PORT/retrieve``.
"""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from envs.retriever.index import open_index
from envs.retriever.server import create_app

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", help="jsonl corpus of {'id', 'contents'} to index")
    parser.add_argument("--index-dir", required=True, help="where the index is saved/loaded")
    parser.add_argument("--kind", choices=["bm25", "dense"], default="bm25", help="index kind")
    parser.add_argument("--dense-model", help="sentence-transformers encoder for --kind dense")
    parser.add_argument("--rebuild", action="store_true", help="rebuild even if an index exists")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--topk", type=int, default=3, help="results per query by default")
    parser.add_argument("--max-topk", type=int, default=100, help="largest topk a request may ask")


def run(args: argparse.Namespace) -> int:
    if args.topk < 1 or args.topk > args.max_topk:
        logger.error("--topk must be between 1 and --max-topk (%d)", args.max_topk)
        return 2
    try:
        index = open_index(args.index_dir, args.corpus, args.kind, args.dense_model, args.rebuild)
    except (FileNotFoundError, ValueError, ImportError) as err:
        logger.error("%s", err)
        return 1
    app = create_app(index, default_topk=args.topk, max_topk=args.max_topk)
    logger.info("serving %d documents on http://%s:%d/retrieve", len(index), args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m envs.retriever.cli", description=__doc__)
    add_arguments(_parser)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sys.exit(run(_parser.parse_args()))
