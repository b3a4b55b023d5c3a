"""The relay: a CLI's calls on the unix socket reach the client's session unchanged (path,
query, body), ``HEAD /`` the session's root, and the call after the turn budget is refused
with the budget flagged; anything but the session's API (its record, its reward, a ``..``
out of the session, another method) is refused before it reaches the gateway."""

from __future__ import annotations

import asyncio

import httpx
import openai

from agentrl.agents.relay import SessionRelay, session_root
from agentrl.gateway.agent_rollout import in_process_http


def _gateway(seen: list):
    async def app(scope, receive, send):
        body = (await receive()).get("body", b"")
        seen.append((scope["method"], scope["path"], scope["query_string"].decode(), body))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: ok\n\n"})
    return app


def test_calls_reach_the_session_and_the_turn_budget_holds(tmp_path):
    seen: list = []

    async def main():
        async with in_process_http(openai, _gateway(seen), 10) as http:
            client = openai.AsyncOpenAI(base_url="http://gateway/sessions/s1/v1",
                                        api_key="x", http_client=http)
            assert session_root(client)[0] == "http://gateway/sessions/s1"
            sock = str(tmp_path / "gw.sock")
            async with SessionRelay(client, sock, max_turns=2) as relay:
                transport = httpx.AsyncHTTPTransport(uds=sock)
                async with httpx.AsyncClient(transport=transport, base_url="http://cli") as cli:
                    head = await cli.head("/")
                    replies = [await cli.post("/v1/messages?beta=true", content=b'{"a": 1}')
                               for _ in range(3)]
            return head, replies, relay

    head, replies, relay = asyncio.run(main())
    assert head.status_code == 200
    assert [r.status_code for r in replies] == [200, 200, 400]
    assert replies[0].text == "data: ok\n\n" and "turn budget" in replies[2].text
    assert relay.model_calls == 3 and relay.over_budget.is_set()
    assert seen == [("HEAD", "/sessions/s1", "", b"")] + [
        ("POST", "/sessions/s1/v1/messages", "beta=true", b'{"a": 1}')] * 2


def _raw(sock: str, request: bytes) -> bytes:
    """One request sent as bytes (httpx would resolve a ``..`` before sending it)."""
    import socket

    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(sock)
        conn.sendall(request)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return reply


def test_only_the_sessions_api_is_forwarded(tmp_path):
    seen: list = []

    async def main():
        async with in_process_http(openai, _gateway(seen), 10) as http:
            client = openai.AsyncOpenAI(base_url="http://gateway/sessions/s1/v1",
                                        api_key="x", http_client=http)
            sock = str(tmp_path / "gw.sock")
            async with SessionRelay(client, sock, max_turns=8) as relay:
                transport = httpx.AsyncHTTPTransport(uds=sock)
                async with httpx.AsyncClient(transport=transport, base_url="http://cli") as cli:
                    refused = [await cli.get("/"), await cli.post("/reward", json={"reward": 1}),
                               await cli.delete("/v1/messages"), await cli.get("/v1/a.b")]
                    allowed = [await cli.get("/v1/models"), await cli.post("/v1/tools/calc_1")]
                climbed = await asyncio.to_thread(
                    _raw, sock, b"GET /v1/../../s2 HTTP/1.1\r\nHost: x\r\n"
                                b"Connection: close\r\n\r\n")
            return refused, allowed, climbed, relay

    refused, allowed, climbed, relay = asyncio.run(main())
    assert [r.status_code for r in refused] == [403] * 4
    assert refused[0].json()["error"]["message"] == (
        "the relay forwards only the session's API (HEAD /, GET or POST /v1/...), not GET /")
    assert climbed.startswith(b"HTTP/1.1 403") and b"not GET /v1/../../s2" in climbed
    assert [r.status_code for r in allowed] == [200, 200]
    assert [(m, p) for m, p, _, _ in seen] == [("GET", "/sessions/s1/v1/models"),
                                               ("POST", "/sessions/s1/v1/tools/calc_1")]
    assert relay.model_calls == 0


def test_a_client_without_a_session_is_refused():
    import pytest

    with pytest.raises(TypeError, match="SDK client"):
        session_root(object())
