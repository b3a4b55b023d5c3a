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

from agentrl.utils.http_limits import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES
from envs.retriever.index import open_index
from envs.retriever.server import DEFAULT_MAX_QUERIES, DEFAULT_MAX_QUERY_CHARS, create_app

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
    parser.add_argument(
        "--max-queries",
        type=int,
        default=DEFAULT_MAX_QUERIES,
        help=f"most queries per request (default {DEFAULT_MAX_QUERIES}; more: 422)",
    )
    parser.add_argument(
        "--max-query-chars",
        type=int,
        default=DEFAULT_MAX_QUERY_CHARS,
        help=f"longest query in characters (default {DEFAULT_MAX_QUERY_CHARS}; longer: 422)",
    )
    parser.add_argument(
        "--search-workers",
        type=int,
        default=None,
        help="searches run at once; the rest queue (default min(32, CPUs + 4))",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest request body in bytes (default {DEFAULT_MAX_BODY_BYTES}; larger: 413)",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULT_BODY_TIMEOUT,
        help=f"seconds for a request body to arrive (default {DEFAULT_BODY_TIMEOUT:g}; then 408)",
    )


def _check_limits(args: argparse.Namespace) -> str | None:
    """What is wrong with the numeric options, or None."""
    if args.topk < 1 or args.topk > args.max_topk:
        return f"--topk must be between 1 and --max-topk ({args.max_topk})"
    for name in ("max_queries", "max_query_chars", "max_body_bytes"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}"
    if args.search_workers is not None and args.search_workers < 1:
        return f"--search-workers must be >= 1, got {args.search_workers}"
    if args.body_timeout <= 0:
        return f"--body-timeout must be > 0 seconds, got {args.body_timeout:g}"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check_limits(args)
    if problem is not None:
        logger.error("%s", problem)
        return 2
    try:
        index = open_index(args.index_dir, args.corpus, args.kind, args.dense_model, args.rebuild)
    except (FileNotFoundError, ValueError, ImportError) as err:
        logger.error("%s", err)
        return 1
    app = create_app(
        index,
        default_topk=args.topk,
        max_topk=args.max_topk,
        max_queries=args.max_queries,
        max_query_chars=args.max_query_chars,
        search_workers=args.search_workers,
        max_body_bytes=args.max_body_bytes,
        body_timeout=args.body_timeout,
    )
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
