"""MCP servers as tools (agentrl/tools/mcp.py): a server the test starts serves a tool the
rollout calls; a server that dies mid-episode is a tool error, and the next call reconnects."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from agentrl.rollout import AsyncRolloutEngine
from agentrl.testing.rollout import ConversationScriptBackend, prompts_batch, rollout_config
from agentrl.tools.loader import ToolConfigError, load_tool_schemas, load_tools

pytest.importorskip("mcp")
SERVER = Path(__file__).with_name("mcp_server.py")
CONFIG = {"tools": [{"type": "mcp", "command": [sys.executable, str(SERVER)], "timeout": 30}]}


def _call(name: str, arguments: dict) -> str:
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<tool_call>\n{body}\n</tool_call><|im_end|>"


def test_the_servers_tools_are_listed_as_openai_schemas():
    schemas = {s["function"]["name"]: s for s in load_tool_schemas(CONFIG)}
    assert set(schemas) == {"add", "crash"}
    add = schemas["add"]["function"]
    assert add["description"] == "Add two integers."
    assert add["parameters"]["required"] == ["a", "b"]
    only = load_tool_schemas({"tools": [{**CONFIG["tools"][0], "tools": ["add"]}]})
    assert [s["function"]["name"] for s in only] == ["add"]
    with pytest.raises(ToolConfigError, match="has no tools"):
        load_tool_schemas({"tools": [{**CONFIG["tools"][0], "tools": ["nope"]}]})
    with pytest.raises(ToolConfigError, match="exactly one of"):
        load_tool_schemas({"tools": [{"type": "mcp"}]})


def test_a_rollout_calls_the_server_and_survives_its_death(tiny_tokenizer):
    tools = load_tools(CONFIG)
    scripts = {
        0: [_call("add", {"a": 2, "b": 3}), "five<|im_end|>"],
        1: [_call("crash", {}), _call("add", {"a": 1, "b": 1}), "done<|im_end|>"],
    }
    engine = AsyncRolloutEngine(rollout_config(), tiny_tokenizer,
                                ConversationScriptBackend(tiny_tokenizer, scripts), tools)

    async def go():
        first = await engine.agenerate_sequences(
            prompts_batch(1, tools_kwargs={"add": {}, "crash": {}}))
        second = await engine.agenerate_sequences(
            prompts_batch(2, tools_kwargs={"add": {}, "crash": {}})[1:])
        for tool in tools.values():
            await tool.aclose()
        return first, second

    first, second = asyncio.run(go())
    (messages,) = first.non_tensor_batch["messages"]
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["5"]
    (messages,) = second.non_tensor_batch["messages"]
    answers = [m["content"] for m in messages if m["role"] == "tool"]
    assert answers[0].startswith("Error:")  # the server died under the call
    assert answers[1] == "2"  # and the next call got a new server
    assert second.meta_info["metrics"]["rollout/tool_errors"] == 1


@pytest.mark.parametrize("stateless", [False, True], ids=["session-based", "stateless"])
def test_http_servers_of_both_protocol_revisions_serve_the_rollout(stateless, monkeypatch):
    """A streamable-HTTP server with sessions (the 2025 revisions: initialize handshake,
    Mcp-Session-Id) and a stateless one (the 2026-07-28 revision: every request self-
    describing, no session id) both list and call through the same tool config."""
    monkeypatch.syspath_prepend(str(SERVER.parent))
    import mcp_server

    from agentrl.utils.serving import serve_in_thread

    seen: list[dict[str, str]] = []
    app = mcp_server.server.streamable_http_app(stateless_http=stateless,
                                                json_response=stateless)

    async def recording(scope, receive, send):
        if scope["type"] == "http":
            seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    with serve_in_thread(recording, startup_timeout=30) as url:
        config = {"tools": [{"type": "mcp", "url": f"{url}/mcp", "tools": ["add"]}]}
        assert [s["function"]["name"] for s in load_tool_schemas(config)] == ["add"]
        tools = load_tools(config)

        async def call() -> str:
            instance, _ = await tools["add"].create("i")
            response, _, _ = await tools["add"].execute(instance, {"a": 2, "b": 40})
            await tools["add"].release(instance)
            await tools["add"].aclose()
            return response.text

        assert asyncio.run(call()) == "42"
    with_session = [h for h in seen if "mcp-session-id" in h]
    assert bool(with_session) is not stateless  # sessions only where the server keeps them
