"""The relay: a CLI's calls on the unix socket reach the client's session unchanged (path,
query, body), ``HEAD /`` the session's root, and the call after the turn budget is refused
with the budget flagged."""

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


def test_a_client_without_a_session_is_refused():
    import pytest

    with pytest.raises(TypeError, match="SDK client"):
        session_root(object())
