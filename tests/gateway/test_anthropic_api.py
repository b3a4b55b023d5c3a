"""Anthropic's Messages API on the gateway, through the official anthropic client: the tool
loop records the same token-exact trajectory as the chat API, streaming, stop sequences,
and Anthropic-shaped errors naming the field."""

from __future__ import annotations

import json

import httpx
import pytest

from agentrl.gateway import create_app
from agentrl.testing.rollout import ConversationScriptBackend, call_text
from agentrl.utils.serving import serve_in_thread

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

CALCULATOR = {"name": "calculator", "description": "Evaluate an arithmetic expression.",
              "input_schema": {"type": "object", "properties": {"text": {"type": "string"}},
                               "required": ["text"]}}
SCRIPTS = {0: [call_text("calculator", "6*7") + "<|im_end|>", "It is 42.<|im_end|>"],
           1: ["Sure. STOP here<|im_end|>"]}


@pytest.fixture
def gateway(tiny_tokenizer):
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    with serve_in_thread(create_app(backend, tiny_tokenizer, model_name="policy")) as url:
        yield url, backend


def _client(url, session):
    return anthropic.Anthropic(base_url=f"{url}/sessions/{session}", api_key="unused",
                               max_retries=0)


def _tool_loop(client):
    messages = [{"role": "user", "content": "What is 6*7? conv-0"}]
    first = client.messages.create(model="policy", max_tokens=64, system="Be brief.",
                                   messages=messages, tools=[CALCULATOR])
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "calculator" and use.input == {"text": "6*7"}
    messages += [{"role": "assistant", "content": first.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "42"}]}]
    return first, client.messages.create(model="policy", max_tokens=64, system="Be brief.",
                                         messages=messages, tools=[CALCULATOR])


def test_the_tool_loop_records_what_the_chat_api_records(gateway):
    url, _ = gateway
    first, second = _tool_loop(_client(url, "a"))
    assert second.stop_reason == "end_turn"
    assert [b.type for b in second.content] == ["text"] and second.content[0].text == "It is 42."
    assert first.usage.output_tokens > 0 and second.usage.input_tokens > first.usage.input_tokens
    # the same episode through the chat API
    chat = openai.OpenAI(base_url=f"{url}/sessions/c/v1", api_key="unused")
    tool = {"type": "function", "function": {"name": "calculator",
                                             "description": CALCULATOR["description"],
                                             "parameters": CALCULATOR["input_schema"]}}
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 6*7? conv-0"}]
    reply = chat.chat.completions.create(model="policy", messages=messages, tools=[tool])
    call = reply.choices[0].message.tool_calls[0]
    messages += [reply.choices[0].message,
                 {"role": "tool", "tool_call_id": call.id, "content": "42"}]
    chat.chat.completions.create(model="policy", messages=messages, tools=[tool])
    via_anthropic = httpx.get(f"{url}/sessions/a").json()
    via_chat = httpx.get(f"{url}/sessions/c").json()
    assert via_anthropic["rewrites"] == 0 and len(via_anthropic["trajectories"]) == 1
    for key in ("token_ids", "loss_mask", "prompt_length"):
        assert via_anthropic["trajectories"][0][key] == via_chat["trajectories"][0][key], key


def test_streaming_gives_the_same_message(gateway):
    url, _ = gateway
    client = _client(url, "s")
    with client.messages.stream(model="policy", max_tokens=64, tools=[CALCULATOR],
                                messages=[{"role": "user", "content": "6*7? conv-0"}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [
        ("tool_use", {"text": "6*7"})]


def test_a_stop_sequence_is_reported(gateway):
    url, _ = gateway
    reply = _client(url, "t").messages.create(
        model="policy", max_tokens=64, stop_sequences=["STOP"],
        messages=[{"role": "user", "content": [{"type": "text", "text": "go conv-1"}]}])
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == "STOP"
    assert reply.content[0].text == "Sure. "


@pytest.mark.parametrize(("request_", "named"), [
    ({"messages": [{"role": "user", "content": "x conv-1"}]}, "max_tokens"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "AA=="}}]}]}, "messages[0].content[0]"),
    ({"max_tokens": 8, "tool_choice": {"type": "any"},
      "messages": [{"role": "user", "content": "x conv-1"}]}, "tool_choice"),
])  # fmt: skip
def test_unsupported_requests_get_anthropic_errors_naming_the_field(gateway, request_, named):
    url, _ = gateway
    reply = httpx.post(f"{url}/sessions/e/v1/messages", json={"model": "policy", **request_})
    assert reply.status_code == 400
    body = reply.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert named in body["error"]["message"]


# --- requests shaped like Claude Code's (docs/../shared agent_clis.md: 2.1.197) -------------

BASH = {"name": "Bash", "description": "execute shell commands", "input_schema": {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
    "properties": {"command": {"type": "string"}}, "required": ["command"],
    "additionalProperties": False}}
CLAUDE_FIELDS = {"model": "policy", "max_tokens": 32000, "stream": True,
                 "thinking": {"type": "adaptive"},
                 "context_management": {"edits": [{"type": "clear_thinking_20251015",
                                                   "keep": "all"}]},
                 "output_config": {"effort": "high"},
                 "metadata": {"user_id": '{"device_id":"d","session_id":"s"}'}}
SYSTEM = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
          {"type": "text", "text": "You are a Claude agent.",
           "cache_control": {"type": "ephemeral"}}]


def _bash_call(command: str) -> str:
    return call_text("Bash", "").replace('{"text": ""}', json.dumps({"command": command}))


def _events(reply) -> list[dict]:
    """The data of each server-sent event of a streamed answer."""
    assert reply.status_code == 200, reply.text
    return [json.loads(line[len("data: "):]) for line in reply.text.splitlines()
            if line.startswith("data: ")]


def _message_of(events: list[dict]) -> dict:
    """The assistant message a streaming client assembles from the events."""
    blocks: list[dict] = []
    for event in events:
        if event["type"] == "content_block_start":
            blocks.append(dict(event["content_block"]))
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                blocks[event["index"]]["text"] += delta["text"]
            else:
                blocks[event["index"]]["input"] = json.loads(delta["partial_json"])
    return {"role": "assistant", "content": blocks}


@pytest.fixture
def scripted_gateway(tiny_tokenizer):
    """The gateway over the scripted backend (rollout.name=scripted): the k-th call of an
    episode gets replies[k]."""
    from agentrl.rollout.backends.scripted import ScriptedBackend as Replies

    def start(replies):
        backend = Replies(replies, tiny_tokenizer)
        return backend, serve_in_thread(create_app(backend, tiny_tokenizer, model_name="policy"))
    return start


def _trained(trajectory: dict) -> list[int]:
    return [t for t, m in zip(trajectory["token_ids"], trajectory["loss_mask"], strict=True) if m]


def test_a_claude_code_episode_is_recorded_token_exact(scripted_gateway, tiny_tokenizer):
    backend, serving = scripted_gateway([_bash_call("echo hello"), "done"])
    with serving as url:
        assert httpx.head(url).status_code == 200  # Claude Code's first request
        assert httpx.head(f"{url}/sessions/cc").status_code == 200
        target = f"{url}/sessions/cc/v1/messages?beta=true"
        user = {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>date</system-reminder>"},
            {"type": "text", "text": "Say hello", "cache_control": {"type": "ephemeral"}}]}
        agents = {"role": "system", "content": "Available agent types: none"}
        first = _message_of(_events(httpx.post(target, json={
            **CLAUDE_FIELDS, "system": SYSTEM, "tools": [BASH], "messages": [user, agents]})))
        (call,) = first["content"]
        assert call["type"] == "tool_use" and call["input"] == {"command": "echo hello"}
        result = {"role": "user", "content": [
            {"tool_use_id": call["id"], "type": "tool_result", "content": "hello",
             "is_error": False, "cache_control": {"type": "ephemeral"}}]}
        user["content"][1].pop("cache_control")  # Claude Code moves the marker forward
        events = _events(httpx.post(target, json={
            **CLAUDE_FIELDS, "system": SYSTEM, "tools": [BASH],
            "messages": [user, agents, first, result]}))
        assert _message_of(events)["content"] == [{"type": "text", "text": "done"}]
        assert events[-2]["delta"]["stop_reason"] == "end_turn"
        record = httpx.get(f"{url}/sessions/cc").json()
    assert record["rewrites"] == 0 and record["forks"] == [] and record["side_calls"] == []
    (trajectory,) = record["trajectories"]
    outputs = [ids for _, ids in backend.outputs]
    assert [rid for rid, _ in backend.outputs] == ["cc-t0-a0", "cc-t1-a0"]
    assert _trained(trajectory) == outputs[0] + outputs[1]
    prompt = tiny_tokenizer.decode(trajectory["token_ids"][:trajectory["prompt_length"]])
    assert "Available agent types: none" in prompt and "You are a Claude agent." in prompt
    start = trajectory["prompt_length"] + len(outputs[0])
    tool_span = trajectory["token_ids"][start:len(trajectory["token_ids"]) - len(outputs[1])]
    assert "hello" in tiny_tokenizer.decode(tool_span)
    assert set(trajectory["loss_mask"][start:start + len(tool_span)]) == {0}


def test_a_title_call_is_recorded_apart_and_takes_no_reply_of_the_episode(scripted_gateway):
    backend, serving = scripted_gateway(["Greeting", "ok"])
    title = {**CLAUDE_FIELDS, "system": SYSTEM,  # Claude Code's title call: no tools
             "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {
                 "type": "object", "properties": {"title": {"type": "string"}}}}},
             "messages": [{"role": "user", "content": "<session>\nSay hello\n</session>"}]}
    episode = {**CLAUDE_FIELDS, "system": SYSTEM, "tools": [BASH],
               "messages": [{"role": "user", "content": "Say hello"}]}
    with serving as url:
        target = f"{url}/sessions/t/v1/messages?beta=true"
        assert _message_of(_events(httpx.post(target, json=title)))["content"][0]["text"] \
            == "Greeting"
        first = _message_of(_events(httpx.post(target, json=episode)))
        # a tool-less call while the episode has tools is a side call too
        _events(httpx.post(target, json={**episode, "tools": [],
                                         "output_config": {"effort": "low"}}))
        record = httpx.get(f"{url}/sessions/t").json()
    assert first["content"] == [{"type": "text", "text": "Greeting"}]  # line 0, its own
    assert [rid for rid, _ in backend.outputs] == ["t~side-t0-a0", "t-t0-a0", "t~side-t1-a0"]
    assert record["rewrites"] == 0 and len(record["side_calls"]) == 2
    (trajectory,) = record["trajectories"]
    assert _trained(trajectory) == backend.outputs[1][1]


def test_parallel_tool_uses_round_trip_without_a_fork(scripted_gateway):
    backend, serving = scripted_gateway(
        [_bash_call("echo a") + "\n" + _bash_call("ls"), "both ran"])
    with serving as url:
        target = f"{url}/sessions/p/v1/messages?beta=true"
        messages = [{"role": "user", "content": "run two"}]
        first = _message_of(_events(httpx.post(target, json={
            **CLAUDE_FIELDS, "tools": [BASH], "messages": messages})))
        assert [b["input"] for b in first["content"]] == [{"command": "echo a"},
                                                          {"command": "ls"}]
        results = {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b["id"], "content": [
                {"type": "text", "text": out}]} for b, out in zip(first["content"],
                                                                 ["a", "f.txt"], strict=True)]}
        _events(httpx.post(target, json={**CLAUDE_FIELDS, "tools": [BASH],
                                         "messages": [*messages, first, results]}))
        record = httpx.get(f"{url}/sessions/p").json()
    assert record["rewrites"] == 0
    assert _trained(record["trajectories"][0]) == [t for _, ids in backend.outputs for t in ids]


def test_a_fork_is_counted_and_names_the_first_differing_message(scripted_gateway, caplog):
    backend, serving = scripted_gateway(["one", "two", "three"])
    with serving as url:
        target = f"{url}/sessions/f/v1/messages"
        base = {"model": "policy", "max_tokens": 16}
        httpx.post(target, json={**base, "messages": [{"role": "user", "content": "hi"}]})
        with caplog.at_level("WARNING", logger="agentrl.gateway.sessions"):
            httpx.post(target, json={**base, "messages": [
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "edited"},
                {"role": "user", "content": "and?"}]})
        record = httpx.get(f"{url}/sessions/f").json()
    assert record["rewrites"] == 1 and len(record["trajectories"]) == 2
    (fork,) = record["forks"]
    assert fork["call"] == 1 and fork["message"] == 1
    assert fork["recorded"]["content"] == "one" and fork["sent"]["content"] == "edited"
    assert "call 1 forks" in caplog.text and "message 1 differs" in caplog.text
