"""Anthropic's Messages API on the gateway, through the official anthropic client: the tool
loop records the same token-exact trajectory as the chat API, streaming, stop sequences,
and Anthropic-shaped errors naming the field."""

from __future__ import annotations

import httpx
import pytest

from agentrl.gateway import create_app
from agentrl.testing.rollout import ScriptedBackend, call_text
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
    backend = ScriptedBackend(tiny_tokenizer, SCRIPTS)
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
