"""The rollout's tools through the gateway (agentrl/gateway/tools.py): agents list and call
them per session under the engine's policy (one instance per session with the row's
create_kwargs, schema check, timeout, errors as answers, release at the session's end), MCP
servers included; in agent mode an agent function calls them with its own client."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

from agentrl.gateway import create_app
from agentrl.gateway.agent_rollout import AgentRollout
from agentrl.gateway.agent_settings import AgentSettings
from agentrl.rollout.engine_config import RolloutConfig
from agentrl.testing.rollout import (
    ConversationScriptBackend,
    RecordingTool,
    prompts_batch,
    rollout_config,
)
from agentrl.tools.loader import load_tools
from agentrl.utils.serving import serve_in_thread

openai = pytest.importorskip("openai")
MCP_SERVER = Path(__file__).resolve().parents[1] / "tools" / "mcp_server.py"


async def _slow(text: str) -> str:
    await asyncio.sleep(30)
    return text


def _tools() -> dict:
    return {"echo": RecordingTool("echo", respond=str.upper, final_reward=0.5),
            "slow": RecordingTool("slow", respond=_slow)}


def test_agents_list_and_call_the_tools_per_session(tiny_tokenizer):
    tools = _tools()
    multi_turn = RolloutConfig.from_config(rollout_config(
        "multi_turn.tool_timeout=0.5", "multi_turn.max_tool_response_length=40")).multi_turn
    app = create_app(ConversationScriptBackend(tiny_tokenizer, {}), tiny_tokenizer, tools=tools,
                     multi_turn=multi_turn)
    with serve_in_thread(app) as url:
        base = f"{url}/sessions/ep-1/v1"
        listed = httpx.get(f"{base}/tools").json()["data"]
        assert [t["function"]["name"] for t in listed] == ["echo", "slow"]
        answer = httpx.post(f"{base}/tools/echo", json={"arguments": {"text": "ab" * 30}}).json()
        # the engine's truncation (max_tool_response_length=40) applies
        truncated = "AB" * 10 + "...(truncated)" + "AB" * 10
        assert answer == {"content": truncated, "reward": 0.0, "error": None}
        # JSON-string arguments (as in an OpenAI tool call) work too
        assert httpx.post(f"{base}/tools/echo", json={"arguments": '{"text": "ab"}'}
                          ).json()["content"] == "AB"
        bad = httpx.post(f"{base}/tools/echo", json={"arguments": {"txt": 1}}).json()
        assert bad["error"] == "invalid_arguments" and bad["content"].startswith("Error:")
        slow = httpx.post(f"{base}/tools/slow", json={"arguments": {"text": "x"}},
                          timeout=10).json()
        assert slow["error"] == "timeout" and slow["content"].startswith("Error:")
        missing = httpx.post(f"{base}/tools/nope", json={"arguments": {}})
        assert missing.status_code == 404 and missing.json()["error"]["param"] == "name"
        # one instance per tool and session, created once, released when it is deleted
        assert tools["echo"].instances("create") == ["ep-1"]
        assert tools["echo"].instances("release") == []
        assert httpx.delete(f"{url}/sessions/ep-1").status_code == 200
        assert tools["echo"].instances("calc_reward") == ["ep-1"]
        assert tools["echo"].instances("release") == ["ep-1"]
        assert tools["slow"].instances("release") == ["ep-1"]
        assert httpx.delete(f"{url}/sessions/ep-1").status_code == 404


def test_an_mcp_servers_tools_reach_agents_and_its_death_is_a_tool_error(tiny_tokenizer):
    pytest.importorskip("mcp")
    tools = load_tools({"tools": [{"type": "mcp", "command": [sys.executable, str(MCP_SERVER)],
                                   "timeout": 30}]})
    app = create_app(ConversationScriptBackend(tiny_tokenizer, {}), tiny_tokenizer, tools=tools,
                     multi_turn=RolloutConfig.from_config(rollout_config()).multi_turn)
    try:
        with serve_in_thread(app) as url:
            base = f"{url}/sessions/ep-2/v1"
            names = {t["function"]["name"] for t in httpx.get(f"{base}/tools").json()["data"]}
            assert names == {"add", "crash"}
            add = httpx.post(f"{base}/tools/add", json={"arguments": {"a": 2, "b": 3}},
                             timeout=60).json()
            assert add == {"content": "5", "reward": 0.0, "error": None}
            crash = httpx.post(f"{base}/tools/crash", json={"arguments": {}}, timeout=60).json()
            assert crash["error"] == "mcp_server" and crash["content"].startswith("Error:")
            again = httpx.post(f"{base}/tools/add", json={"arguments": {"a": 1, "b": 1}},
                               timeout=60).json()
            assert again["content"] == "2"  # the next call got a new server
            assert httpx.delete(f"{url}/sessions/ep-2").status_code == 200
    finally:
        async def close():
            for tool in tools.values():
                await tool.aclose()
        asyncio.run(close())


async def _tool_agent(task: dict, client) -> float:
    """Lists the tools, calls one with the OpenAI client it was given, asks the model."""
    listed = await client.get("/tools", cast_to=object)
    name = listed["data"][0]["function"]["name"]
    answer = await client.post(f"/tools/{name}", body={"arguments": {"text": "hi"}},
                               cast_to=object)
    await client.chat.completions.create(model="policy", messages=[
        *task["raw_prompt"], {"role": "user", "content": answer["content"]}])
    return 1.0 if answer["content"] == "HI" else 0.0


def test_agent_mode_gives_agents_the_rollouts_tools(tiny_tokenizer):
    tools = _tools()
    backend = ConversationScriptBackend(tiny_tokenizer, {0: ["ok<|im_end|>"], 1: ["ok<|im_end|>"]})
    rollout = AgentRollout(AgentSettings.from_config(rollout_config()), tiny_tokenizer, backend, _tool_agent, tools=tools)
    seen = []
    create = tools["echo"].create

    async def recording_create(instance_id=None, **kwargs):
        seen.append(kwargs)
        return await create(instance_id, **kwargs)

    tools["echo"].create = recording_create
    batch = prompts_batch(2, tools_kwargs={"echo": {"create_kwargs": {"seed": 7}}})
    out = asyncio.run(rollout.agenerate_sequences(batch))
    assert seen == [{"seed": 7}, {"seed": 7}]  # the row's create_kwargs
    assert out.batch["rm_scores"].sum(-1).tolist() == [1.0, 1.0]
    created = tools["echo"].instances("create")
    assert len(created) == 2 and sorted(created) == sorted(tools["echo"].instances("release"))
    # the tools' final rewards reach the trajectory's reward_scores, as in the engine
    scores = out.non_tensor_batch["reward_scores"]
    assert [s["echo"] for s in scores] == [0.5, 0.5]
    # every tool of the session is created at its first call and released at its end,
    # as the engine does for a sample's tools
    assert sorted(tools["slow"].instances("create")) == sorted(created)
    assert sorted(tools["slow"].instances("release")) == sorted(created)
    assert out.meta_info["metrics"]["rollout/agent_errors"] == 0.0
