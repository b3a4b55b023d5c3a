"""JSON over HTTP with a timeout on every call and bounded retries of transient failures.

The search and sandbox tools and the SGLang client all talk to services that may be
briefly down or overloaded. One policy for all of them: retry only connection errors,
429 and 5xx, with exponential backoff and a bound; everything else (a 4xx, a timeout, an
answer that is not JSON) fails at once. A failure raises `HTTPCallError` whose `kind`
(`connection`, `timeout`, `http_status`, `bad_response`) goes into metrics.

    client = JSONClient(timeout=10, max_concurrent=64, retry=RetryPolicy(max_retries=3))
    body, retries = await client.post_json("http://127.0.0.1:8000/retrieve", {...})
    await client.aclose()

An `httpx.AsyncClient` belongs to the event loop it was made in, so the client is made
lazily per running loop (no module-level clients). Its connection pool scans every
connection for each request it places (httpcore 1.0), which made the HTTP client most of an
agent loop's CPU at a few hundred requests in flight (measured: 57% of the off-policy
rollout process at 256 generation calls in flight); so the requests are spread over
pools of at most `POOL_CONNECTIONS` connections, each call going to the least busy one. A
pool is made when every pool is full (an httpx client costs ~16 ms to make).

An idle connection is dropped after `KEEPALIVE_EXPIRY_S`, well before the servers close it
(uvicorn's `timeout_keep_alive`, 5 s by default, as SGLang's, vLLM's and `agentrl serve`'s
servers keep it): with httpx's own 5 s the two timers race, and a request sent on a
connection the server is closing failed with a `ReadError` (seen in training runs as a
rollout server "down" for a second after each pause longer than 5 s).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

# Failures after which the same request may succeed: nothing reached the server, or the
# connection broke before an answer.
RETRYABLE_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError)
POOL_CONNECTIONS = 32  # connections per httpx pool (see the module docstring)
KEEPALIVE_EXPIRY_S = 2.0  # an idle connection's life here, below the servers' 5 s


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff: delay `backoff * 2**(attempt-1)`, capped."""

    max_retries: int = 3
    backoff: float = 0.5
    backoff_max: float = 8.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number `attempt` (1-based)."""
        return min(self.backoff_max, self.backoff * 2 ** (attempt - 1))


class HTTPCallError(Exception):
    """An HTTP call failed; `kind` names how, `status_code` is set for HTTP errors."""

    def __init__(self, kind: str, message: str, status_code: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.status_code = status_code

    @property
    def retryable(self) -> bool:
        """Whether the failure was transient (it was retried until the bound)."""
        return self.kind == "connection" or (
            self.status_code is not None and (self.status_code == 429 or self.status_code >= 500))

    @property
    def infra(self) -> bool:
        """Whether the service, not the request, failed (agentrl/utils/infra.py): it was
        unreachable, timed out, answered 429/5xx or something that is not JSON. A 4xx
        answers what was sent (e.g. the model's arguments)."""
        return self.retryable or self.kind in ("timeout", "bad_response")


class JSONClient:
    """POST/GET JSON with a per-loop httpx client, a concurrency limit and retries."""

    def __init__(self, timeout: float, max_concurrent: int = 64,
                 retry: RetryPolicy | None = None):
        self.timeout = timeout
        self.max_concurrent = max_concurrent
        self.retry = retry or RetryPolicy()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: list[httpx.AsyncClient] = []
        self._busy: list[int] = []  # requests in flight per client
        self._semaphore: asyncio.Semaphore | None = None

    def _session(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._loop is not loop:
            self._loop, self._clients, self._busy = loop, [], []
            self._semaphore = asyncio.Semaphore(self.max_concurrent)
        return self._semaphore

    def _least_busy(self) -> int:
        """The index of the pool for the next request, making one when all are full."""
        if not self._busy or min(self._busy) >= POOL_CONNECTIONS:
            size = min(self.max_concurrent, POOL_CONNECTIONS)
            self._clients.append(httpx.AsyncClient(
                timeout=self.timeout,
                limits=httpx.Limits(max_connections=size, keepalive_expiry=KEEPALIVE_EXPIRY_S)))
            self._busy.append(0)
            return len(self._busy) - 1
        return self._busy.index(min(self._busy))

    async def aclose(self) -> None:
        """Close the HTTP clients (if they were made in the running loop)."""
        clients, self._clients, self._busy, self._semaphore = self._clients, [], [], None
        if clients and self._loop is asyncio.get_running_loop():
            await asyncio.gather(*(client.aclose() for client in clients))

    async def _send(self, method: str, url: str, payload: Any) -> httpx.Response:
        """One request on the least busy pool."""
        index = self._least_busy()
        busy, clients = self._busy, self._clients  # this loop's, even if another loop starts
        busy[index] += 1
        try:
            return await clients[index].request(method, url, json=payload)
        finally:
            busy[index] -= 1

    async def post_json(self, url: str, payload: Any) -> tuple[Any, int]:
        """POST `payload` as JSON; returns (decoded answer, retries used)."""
        return await self.request_json("POST", url, payload)

    async def get_json(self, url: str) -> tuple[Any, int]:
        """GET; returns (decoded answer, retries used)."""
        return await self.request_json("GET", url)

    async def request_json(self, method: str, url: str, payload: Any = None) -> tuple[Any, int]:
        """One call with retries; raises HTTPCallError (see the module docstring)."""
        semaphore = self._session()
        last = HTTPCallError("connection", f"{url}: no attempt made")
        for attempt in range(self.retry.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.retry.delay(attempt))
            try:
                async with semaphore:
                    response = await self._send(method, url, payload)
            except RETRYABLE_ERRORS as err:
                last = HTTPCallError("connection",
                                     f"cannot connect to {url}: {type(err).__name__}")
                continue
            except httpx.TimeoutException as err:
                raise HTTPCallError("timeout", f"{url} timed out after {self.timeout:g} s "
                                               f"({type(err).__name__})") from err
            except httpx.HTTPError as err:
                raise HTTPCallError("connection", f"{url}: {type(err).__name__}: {err}") from err
            code = response.status_code
            if code == 429 or code >= 500:
                last = HTTPCallError("http_status", f"{url} answered HTTP {code}", code)
                continue
            if code >= 400:
                raise HTTPCallError("http_status",
                                    f"{url} answered HTTP {code}: {response.text[:300]}", code)
            try:
                return response.json(), attempt
            except ValueError as err:
                raise HTTPCallError("bad_response", f"{url} did not answer JSON") from err
        raise HTTPCallError(last.kind, f"{last} (after {self.retry.max_retries} retries)",
                            last.status_code)
