"""The retrieval HTTP server: FastAPI app over a ``RetrievalIndex``, Search-R1's API.

    POST /retrieve  {"queries": [str], "topk": int, "return_scores": bool}
        -> {"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}
           (one list per query, best first; without return_scores the bare documents)
    POST /retrieve  {"query": str, "topk": int, "return_scores": bool}
        -> {"result": [...]}   the single-query variant: one flat list
    GET  /health    -> {"status": "ok", "index": "bm25", "num_docs": N}

Bad requests (no queries, an empty query, topk < 1 or above the limit, too many queries)
get a 422 with a message that names the problem. ``topk`` defaults to the server's.
``agentrl.utils.serving.serve_in_thread`` runs it on a loopback port in a background thread.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from envs.retriever.index import RetrievalIndex

logger = logging.getLogger(__name__)


class RetrieveRequest(BaseModel):
    queries: list[str] | None = None
    query: str | None = None
    topk: int | None = None
    return_scores: bool = False


def _check_request(request: RetrieveRequest, max_topk: int, max_queries: int) -> list[str]:
    """The queries of a valid request; raises HTTP 422 naming what is wrong."""
    if (request.queries is None) == (request.query is None):
        raise HTTPException(422, "give exactly one of 'queries' (a list) or 'query' (a string)")
    queries = request.queries if request.queries is not None else [request.query]
    if not queries:
        raise HTTPException(422, "'queries' is empty")
    if len(queries) > max_queries:
        raise HTTPException(422, f"too many queries: {len(queries)} > {max_queries}")
    for i, query in enumerate(queries):
        if not query.strip():
            raise HTTPException(422, f"query {i} is empty")
    if request.topk is not None and not 1 <= request.topk <= max_topk:
        raise HTTPException(422, f"'topk' must be between 1 and {max_topk}, got {request.topk}")
    return queries


def create_app(
    index: RetrievalIndex, *, default_topk: int = 3, max_topk: int = 100, max_queries: int = 1024
) -> FastAPI:
    """The FastAPI app serving ``index``.

    Args:
        index: what to search (``envs.retriever.index.open_index``).
        default_topk: results per query when a request gives no ``topk``.
        max_topk: the largest ``topk`` a request may ask for.
        max_queries: the most queries one request may carry.
    """
    app = FastAPI(title="agentrl retriever", description=__doc__)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "index": index.kind, "num_docs": len(index)}

    # A plain `def`: FastAPI runs it in its thread pool, so a slow search does not block
    # the event loop (and /health stays responsive).
    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> dict[str, Any]:
        queries = _check_request(request, max_topk, max_queries)
        topk = request.topk or default_topk
        hits = index.search(queries, topk)
        if request.return_scores:
            result = [[{"document": doc, "score": score} for doc, score in q] for q in hits]
        else:
            result = [[doc for doc, _ in q] for q in hits]
        return {"result": result[0] if request.query is not None else result}

    return app
