"""The retrieval HTTP server: FastAPI app over a ``RetrievalIndex``, Search-R1's API.

    POST /retrieve  {"queries": [str], "topk": int, "return_scores": bool}
        -> {"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}
           (one list per query, best first; without return_scores the bare documents)
    POST /retrieve  {"query": str, "topk": int, "return_scores": bool}
        -> {"result": [...]}   the single-query variant: one flat list
    GET  /health    -> {"status": "ok", "index": "bm25", "num_docs": N,
                        "search_workers": W, "busy_workers": B, "queue_depth": Q}

Bad requests (no queries, an empty query, topk < 1 or above the limit, more than
``max_queries`` queries, a query over ``max_query_chars`` characters) get a 422 with a
message that names the problem; a body over ``max_body_bytes`` a 413, a body not complete
within ``body_timeout`` seconds a 408, and a body that is not JSON a 400 saying why
(``agentrl.utils.http_limits``). ``topk`` defaults to the server's.

Searches run in worker threads, at most ``search_workers`` at a time; the others wait in a
queue. ``/health`` runs on the event loop and never waits for a worker, so it answers at
once under any search load and reports the load: busy workers and searches waiting.
``agentrl.utils.serving.serve_in_thread`` runs it on a loopback port in a background thread.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import anyio
import anyio.to_thread
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from agentrl.utils.http_limits import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES, harden
from envs.retriever.index import RetrievalIndex

logger = logging.getLogger(__name__)

DEFAULT_MAX_QUERIES = 1024
DEFAULT_MAX_QUERY_CHARS = 4096


class RetrieveRequest(BaseModel):
    queries: list[str] | None = None
    query: str | None = None
    topk: int | None = None
    return_scores: bool = False


def default_search_workers() -> int:
    """Python's ThreadPoolExecutor default: min(32, CPUs + 4)."""
    return min(32, (os.cpu_count() or 1) + 4)


def _check_request(
    request: RetrieveRequest, max_topk: int, max_queries: int, max_query_chars: int
) -> list[str]:
    """The queries of a valid request; raises HTTP 422 naming what is wrong."""
    if (request.queries is None) == (request.query is None):
        raise HTTPException(422, "give exactly one of 'queries' (a list) or 'query' (a string)")
    queries = request.queries if request.queries is not None else [request.query]
    if not queries:
        raise HTTPException(422, "'queries' is empty")
    if len(queries) > max_queries:
        raise HTTPException(422, f"too many queries: {len(queries)} > max_queries ({max_queries})")
    for i, query in enumerate(queries):
        if len(query) > max_query_chars:
            raise HTTPException(
                422,
                f"query {i} is {len(query)} characters, over max_query_chars ({max_query_chars})",
            )
        if not query.strip():
            raise HTTPException(422, f"query {i} is empty")
    if request.topk is not None and not 1 <= request.topk <= max_topk:
        raise HTTPException(422, f"'topk' must be between 1 and {max_topk}, got {request.topk}")
    return queries


def _search(
    index: RetrievalIndex, queries: list[str], topk: int, return_scores: bool
) -> list[list[Any]]:
    """Search and shape the result as Search-R1 does (in a worker thread)."""
    hits = index.search(queries, topk)
    if return_scores:
        return [[{"document": doc, "score": score} for doc, score in q] for q in hits]
    return [[doc for doc, _ in q] for q in hits]


def create_app(
    index: RetrievalIndex,
    *,
    default_topk: int = 3,
    max_topk: int = 100,
    max_queries: int = DEFAULT_MAX_QUERIES,
    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
    search_workers: int | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
) -> FastAPI:
    """The FastAPI app serving ``index``.

    Args:
        index: what to search (``envs.retriever.index.open_index``).
        default_topk: results per query when a request gives no ``topk``.
        max_topk: the largest ``topk`` a request may ask for.
        max_queries: the most queries one request may carry.
        max_query_chars: the longest query, in characters (search time grows with it).
        search_workers: searches run at once, in threads; None: ``default_search_workers()``.
        max_body_bytes: the largest request body, in bytes (413 above).
        body_timeout: seconds for a request body to arrive (408 after); None: no limit.
    """
    workers = default_search_workers() if search_workers is None else search_workers
    if workers < 1:
        raise ValueError(f"search_workers must be >= 1, got {workers}")
    # Our own limiter, not FastAPI's shared thread pool limiter: searches queue here, and
    # its statistics are the load /health reports.
    limiter = anyio.CapacityLimiter(workers)
    app = FastAPI(title="agentrl retriever", description=__doc__)
    harden(app, max_body_bytes=max_body_bytes, body_timeout=body_timeout)

    # `async def`: runs on the event loop, so it never queues behind searches.
    @app.get("/health")
    async def health() -> dict[str, Any]:
        stats = limiter.statistics()
        return {
            "status": "ok",
            "index": index.kind,
            "num_docs": len(index),
            "search_workers": workers,
            "busy_workers": stats.borrowed_tokens,
            "queue_depth": stats.tasks_waiting,
        }

    @app.post("/retrieve")
    async def retrieve(request: RetrieveRequest) -> dict[str, Any]:
        queries = _check_request(request, max_topk, max_queries, max_query_chars)
        topk = request.topk or default_topk
        result = await anyio.to_thread.run_sync(
            _search, index, queries, topk, request.return_scores, limiter=limiter
        )
        return {"result": result[0] if request.query is not None else result}

    return app
