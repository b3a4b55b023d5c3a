"""Search tool: asks a retrieval server (Search-R1's API) and formats the documents.

Parameters ``{"query_list": [str, ...]}`` as verl's search tool. Each document is shown as
Search-R1 shows it, ``Doc 1(Title: <first line of contents>) <rest of contents>``; the
title line is kept verbatim (with its quotes, as Search-R1-trained models saw it). Results of
several queries are joined with ``\\n---\\n``.

Tool config keys:

    retrieval_service_url   http://host:port/retrieve (required)
    topk                    documents per query (3)
    timeout                 seconds per HTTP request (30)
    max_concurrent          requests in flight per tool object, i.e. per process (64);
                            verl's ``rate_limit`` / ``num_workers`` are read as this
                            (verl's ``enable_global_rate_limit`` is accepted: one process
                            here, so the limit is already global; ``default_timeout`` is
                            read as ``timeout``)
    request_format          "batch": {"queries": [...]} one request per call (default);
                            "single": {"query": str} one request per query
    max_queries             most queries one call may carry (16)
    max_retries             retries on connection errors, 429 and 5xx only (3)
    retry_backoff           first retry delay in seconds, doubled each retry (0.5)
    retry_backoff_max       cap on one retry delay (8)

A dead or failing server gives the model an ``Error: ...`` text and
``metrics["tool_error"]``; nothing is raised. When the retriever itself failed (unreachable,
timed out, 429/5xx, an answer that is not JSON) the metrics also carry ``infra_error``: an
infrastructure failure, not the model's (``rollout.on_infra_error``, docs/rollout.md). ``calc_reward`` is 0.0: scoring the answer is
the reward function's job. The ``httpx.AsyncClient`` is created lazily on first use (one per
event loop) and closed by ``aclose()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agentrl.tools import BaseTool, OpenAIFunctionToolSchema, ToolResponse
from agentrl.utils.http import HTTPCallError, JSONClient, RetryPolicy

logger = logging.getLogger(__name__)

DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search a knowledge base for documents relevant to each query.",
        "parameters": {
            "type": "object",
            "properties": {
                "query_list": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Fully-formed search queries; each returns its documents.",
                }
            },
            "required": ["query_list"],
        },
    },
}

DEFAULTS: dict[str, Any] = {
    "topk": 3,
    "timeout": 30.0,
    "max_concurrent": 64,
    "request_format": "batch",
    "max_queries": 16,
    "max_retries": 3,
    "retry_backoff": 0.5,
    "retry_backoff_max": 8.0,
}

# verl's search tool config keys, read as ours so a verl tool YAML works unchanged.
VERL_ALIASES = {
    "num_workers": "max_concurrent",
    "rate_limit": "max_concurrent",
    "default_timeout": "timeout",  # older verl configs
}
IGNORED_KEYS = {"type", "enable_global_rate_limit"}  # one process here: no global limiter

def format_documents(docs: list[Any]) -> str:
    """Search-R1's passage format: ``Doc i(Title: <title line>) <text>`` per line."""
    lines = []
    for i, item in enumerate(docs, start=1):
        doc = item.get("document", item) if isinstance(item, dict) else item
        if isinstance(doc, dict) and "contents" in doc:
            contents = str(doc["contents"])
        elif isinstance(doc, dict):
            contents = f'"{doc.get("title", "")}"\n{doc.get("text", "")}'
        else:
            contents = str(doc)
        title, _, text = contents.partition("\n")
        lines.append(f"Doc {i}(Title: {title}) {text}")
    return "\n".join(lines)


class SearchTool(BaseTool):
    """Searches ``retrieval_service_url`` for every query in ``query_list``."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)
        super().__init__(config, schema)
        unknown = (
            set(self.config) - set(DEFAULTS) - {"retrieval_service_url"} - set(VERL_ALIASES)
            - IGNORED_KEYS
        )
        if unknown:
            raise ValueError(f"search tool: unknown config keys {sorted(unknown)}")
        if not self.config.get("retrieval_service_url"):
            raise ValueError("search tool: config 'retrieval_service_url' is required")
        self.url = str(self.config["retrieval_service_url"])
        aliases = {VERL_ALIASES[k]: v for k, v in self.config.items() if k in VERL_ALIASES}
        settings = {**DEFAULTS, **aliases, **self.config}
        if settings["request_format"] not in ("batch", "single"):
            raise ValueError(
                f"search tool: request_format must be 'batch' or 'single', "
                f"got {settings['request_format']!r}"
            )
        self.topk = int(settings["topk"])
        self.timeout = float(settings["timeout"])
        self.max_concurrent = int(settings["max_concurrent"])
        self.request_format = settings["request_format"]
        self.max_queries = int(settings["max_queries"])
        self._http = JSONClient(
            timeout=self.timeout,
            max_concurrent=self.max_concurrent,
            retry=RetryPolicy(
                max_retries=int(settings["max_retries"]),
                backoff=float(settings["retry_backoff"]),
                backoff_max=float(settings["retry_backoff_max"]),
            ),
        )

    async def aclose(self) -> None:
        """Close the HTTP client (if it was made in the running loop)."""
        await self._http.aclose()

    async def _post(self, payload: dict[str, Any]) -> tuple[Any, int]:
        """POST to the retriever; returns (decoded JSON, retries used)."""
        return await self._http.post_json(self.url, payload)

    async def _search_batch(self, queries: list[str]) -> tuple[list[list[Any]], int]:
        body, retries = await self._post(
            {"queries": queries, "topk": self.topk, "return_scores": True}
        )
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise HTTPCallError("bad_response", "the retriever's 'result' does not match the queries")
        return result, retries

    async def _search_one(self, query: str) -> tuple[list[Any], int]:
        body, retries = await self._post({"query": query, "topk": self.topk, "return_scores": True})
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list):
            raise HTTPCallError("bad_response", "the retriever's answer has no 'result' list")
        # Some single-query servers nest the one result list like the batch API.
        if len(result) == 1 and isinstance(result[0], list):
            result = result[0]
        return result, retries

    async def _search(self, queries: list[str]) -> tuple[list[list[Any]], int]:
        if self.request_format == "batch":
            return await self._search_batch(queries)
        outcomes = await asyncio.gather(*(self._search_one(q) for q in queries))
        return [docs for docs, _ in outcomes], sum(r for _, r in outcomes)

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        queries = parameters.get("query_list")
        if (
            not isinstance(queries, list)
            or not queries
            or not all(isinstance(q, str) and q.strip() for q in queries)
        ):
            text = "Error: 'query_list' must be a non-empty list of non-empty strings."
            return ToolResponse(text=text), 0.0, {"tool_error": "invalid_arguments"}
        if len(queries) > self.max_queries:
            text = f"Error: at most {self.max_queries} queries per call, got {len(queries)}."
            return ToolResponse(text=text), 0.0, {"tool_error": "invalid_arguments"}
        start = time.monotonic()
        try:
            results, retries = await self._search(queries)
        except HTTPCallError as err:
            logger.warning("search failed: %s", err)
            metrics = {"tool_error": err.kind, "search_queries": len(queries)}
            if err.infra:  # the retriever failed, not the model (agentrl/utils/infra.py)
                metrics["infra_error"] = f"search failed: {err}"
            return ToolResponse(text=f"Error: search failed: {err}"), 0.0, metrics
        blocks = [format_documents(docs) or "No results found." for docs in results]
        metrics = {
            "search_queries": len(queries),
            "search_latency_s": time.monotonic() - start,
            "search_retries": retries,
        }
        return ToolResponse(text="\n---\n".join(blocks)), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """Always 0.0: the reward function, not the search tool, scores the answer."""
        return 0.0
