"""JSONClient against a real server on loopback: what is retried, what fails at once."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from fastapi import FastAPI, Request, Response

from agentrl.utils.http import KEEPALIVE_EXPIRY_S, HTTPCallError, JSONClient, RetryPolicy
from agentrl.utils.serving import serve_in_thread

FAST = RetryPolicy(max_retries=2, backoff=0.01, backoff_max=0.02)


@pytest.fixture(scope="module")
def server():
    app = FastAPI()
    hits: dict[str, int] = {}

    def count(name: str) -> int:
        hits[name] = hits.get(name, 0) + 1
        return hits[name]

    @app.post("/flaky")
    async def flaky(body: dict):
        if count("flaky") <= 2:
            return Response("busy", status_code=503)
        return {"echo": body}

    @app.post("/busy")
    async def busy():
        count("busy")
        return Response("slow down", status_code=429)

    @app.post("/bad")
    async def bad():
        count("bad")
        return Response("no such thing", status_code=400)

    @app.get("/garbage")
    async def garbage():
        return Response("<html>", media_type="text/html")

    @app.get("/slow")
    async def slow():
        await asyncio.sleep(2)
        return {}

    @app.get("/peer")
    async def peer(request: Request):
        return {"port": request.client.port}  # the client's end: one per connection

    @app.post("/pause")
    async def pause(body: dict):
        await asyncio.sleep(0.3)
        return body

    with serve_in_thread(app) as url:
        yield url, hits


def _run(coro_fn):
    async def go():
        client = JSONClient(timeout=0.5, retry=FAST)
        try:
            return await coro_fn(client)
        finally:
            await client.aclose()
    return asyncio.run(go())


def test_5xx_is_retried_until_it_succeeds(server):
    url, hits = server
    body, retries = _run(lambda c: c.post_json(f"{url}/flaky", {"a": 1}))
    assert body == {"echo": {"a": 1}} and retries == 2 and hits["flaky"] == 3


def test_429_is_retried_up_to_the_bound(server):
    url, hits = server
    with pytest.raises(HTTPCallError) as err:
        _run(lambda c: c.post_json(f"{url}/busy", {}))
    assert str(err.value) == f"{url}/busy answered HTTP 429 (after 2 retries)"
    assert (err.value.kind, err.value.status_code, err.value.retryable) == ("http_status", 429, True)
    assert hits["busy"] == 3


def test_4xx_fails_at_once(server):
    url, hits = server
    with pytest.raises(HTTPCallError) as err:
        _run(lambda c: c.post_json(f"{url}/bad", {}))
    assert str(err.value) == f"{url}/bad answered HTTP 400: no such thing"
    assert not err.value.retryable and hits["bad"] == 1


def test_non_json_and_timeouts(server):
    url, _ = server
    with pytest.raises(HTTPCallError, match="did not answer JSON") as err:
        _run(lambda c: c.get_json(f"{url}/garbage"))
    assert err.value.kind == "bad_response"
    with pytest.raises(HTTPCallError, match=r"timed out after 0.5 s \(ReadTimeout\)") as err:
        _run(lambda c: c.get_json(f"{url}/slow"))
    assert err.value.kind == "timeout"


def test_dead_server_is_a_connection_error_after_retries():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(HTTPCallError) as err:
        _run(lambda c: c.get_json(f"http://127.0.0.1:{port}/x"))
    assert time.monotonic() - start < 5
    assert str(err.value) == f"cannot connect to http://127.0.0.1:{port}/x: ConnectError (after 2 retries)"
    assert err.value.kind == "connection" and err.value.retryable


def test_backoff_doubles_and_is_capped():
    policy = RetryPolicy(max_retries=5, backoff=0.5, backoff_max=3.0)
    assert [policy.delay(a) for a in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_requests_spread_over_pools_made_only_when_all_are_full(server):
    from agentrl.utils.http import POOL_CONNECTIONS

    url, _ = server
    n = POOL_CONNECTIONS * 2 + 5  # needs three pools at once

    async def go():
        client = JSONClient(timeout=10, max_concurrent=4 * POOL_CONNECTIONS, retry=FAST)
        try:
            await client.post_json(f"{url}/pause", {"i": -1})
            assert len(client._clients) == 1  # one request: one pool
            peak = []

            async def one(i):
                await asyncio.sleep(0)
                peak.append(max(client._busy))
                return (await client.post_json(f"{url}/pause", {"i": i}))[0]

            answers = await asyncio.gather(*(one(i) for i in range(n)))
            assert answers == [{"i": i} for i in range(n)]
            assert len(client._clients) == 3 and max(peak) <= POOL_CONNECTIONS
            assert client._busy == [0, 0, 0]
        finally:
            await client.aclose()
        assert client._clients == [] and client._busy == []

    asyncio.run(go())


def test_an_idle_connection_is_dropped_before_the_server_would_close_it(server):
    # uvicorn (the servers' HTTP layer) closes a connection idle for timeout_keep_alive; a
    # client keeping it as long races that close and a request on it fails (ReadError)
    import uvicorn

    server_keep_alive = uvicorn.Config(FastAPI()).timeout_keep_alive
    assert server_keep_alive >= 2 * KEEPALIVE_EXPIRY_S
    url, _ = server

    async def calls(client):
        first = (await client.get_json(url + "/peer"))[0]["port"]
        again = (await client.get_json(url + "/peer"))[0]["port"]
        await asyncio.sleep(KEEPALIVE_EXPIRY_S + 0.5)
        later = (await client.get_json(url + "/peer"))[0]["port"]
        return first, again, later

    first, again, later = _run(calls)
    assert again == first  # reused while fresh
    assert later != first  # a new connection after the expiry, not the one the server may close
