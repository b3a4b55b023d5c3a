"""OpenAI's Responses API on the gateway, through the official openai client: a tool loop
chained by previous_response_id records one token-exact trajectory, as the chat API does;
streaming events; incomplete answers; errors naming the field."""

from __future__ import annotations

import httpx
import pytest

from agentrl.gateway import create_app
from agentrl.testing.rollout import ScriptedBackend, call_text
from agentrl.utils.serving import serve_in_thread

openai = pytest.importorskip("openai")

CALCULATOR = {"type": "function", "name": "calculator",
              "description": "Evaluate an arithmetic expression.",
              "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                             "required": ["text"]}}
SCRIPTS = {0: [call_text("calculator", "6*7") + "<|im_end|>", "It is 42.<|im_end|>"],
           1: ["Sure, a long answer that goes on.<|im_end|>"]}


@pytest.fixture
def gateway(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer, SCRIPTS)
    with serve_in_thread(create_app(backend, tiny_tokenizer, model_name="policy")) as url:
        yield url, backend


def _client(url, session):
    return openai.OpenAI(base_url=f"{url}/sessions/{session}/v1", api_key="unused",
                         max_retries=0)


def test_a_chained_tool_loop_is_one_trajectory_like_the_chat_apis(gateway):
    url, backend = gateway
    client = _client(url, "r")
    first = client.responses.create(model="policy", instructions="Be brief.",
                                    input="What is 6*7? conv-0", tools=[CALCULATOR])
    assert first.status == "completed"
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "calculator" and call.arguments == '{"text": "6*7"}'
    second = client.responses.create(
        model="policy", instructions="Be brief.", previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "42"}],
        tools=[CALCULATOR])
    assert second.output_text == "It is 42." and second.previous_response_id == first.id
    assert second.usage.output_tokens > 0
    # the same episode through the chat API
    chat = openai.OpenAI(base_url=f"{url}/sessions/c/v1", api_key="unused")
    tool = {"type": "function", "function": {k: CALCULATOR[k]
                                             for k in ("name", "description", "parameters")}}
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 6*7? conv-0"}]
    reply = chat.chat.completions.create(model="policy", messages=messages, tools=[tool])
    messages += [reply.choices[0].message, {"role": "tool", "content": "42",
                                            "tool_call_id": reply.choices[0].message.tool_calls[0].id}]
    chat.chat.completions.create(model="policy", messages=messages, tools=[tool])
    via_responses = httpx.get(f"{url}/sessions/r").json()
    via_chat = httpx.get(f"{url}/sessions/c").json()
    assert via_responses["rewrites"] == 0 and len(via_responses["trajectories"]) == 1
    for key in ("token_ids", "loss_mask", "prompt_length"):
        assert via_responses["trajectories"][0][key] == via_chat["trajectories"][0][key], key


def test_the_input_may_carry_the_whole_history_instead(gateway):
    url, _ = gateway
    client = _client(url, "h")
    first = client.responses.create(model="policy", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "6*7? conv-0"}]}],
        tools=[CALCULATOR])
    call = first.output[-1]
    second = client.responses.create(model="policy", tools=[CALCULATOR], input=[
        {"role": "user", "content": "6*7? conv-0"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name,
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "42"}])
    assert second.output_text == "It is 42."
    assert httpx.get(f"{url}/sessions/h").json()["rewrites"] == 0


def test_streaming_events_end_with_the_completed_response(gateway):
    url, _ = gateway
    events = list(_client(url, "s").responses.create(model="policy", input="hi conv-1",
                                                     stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text == "Sure, a long answer that goes on."


def test_a_cut_answer_is_incomplete(tiny_tokenizer):
    backend = ScriptedBackend(tiny_tokenizer, SCRIPTS, finish_reason="length")  # cut at 3
    with serve_in_thread(create_app(backend, tiny_tokenizer, model_name="policy")) as url:
        reply = _client(url, "i").responses.create(model="policy", input="hi conv-1",
                                                   max_output_tokens=3)
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage.output_tokens == 3


@pytest.mark.parametrize(("request_", "named"), [
    ({"input": "x conv-1", "previous_response_id": "resp_nope"}, "previous_response_id"),
    ({"input": "x conv-1", "tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0]"),
    ({"input": "x conv-1", "tool_choice": "required"}, "tool_choice"),
])  # fmt: skip
def test_unsupported_requests_are_refused_naming_the_field(gateway, request_, named):
    url, _ = gateway
    with pytest.raises(openai.BadRequestError) as err:
        _client(url, "e").responses.create(model="policy", **request_)
    assert err.value.body["param"] == named
