"""OpenAI's Responses API on the gateway, through the official openai client: a tool loop
chained by previous_response_id records one token-exact trajectory, as the chat API does;
streaming events; incomplete answers; errors naming the field."""

from __future__ import annotations

import json

import httpx
import pytest

from agentrl.gateway import create_app
from agentrl.testing.rollout import ConversationScriptBackend, call_text
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
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
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
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS, finish_reason="length")  # cut at 3
    with serve_in_thread(create_app(backend, tiny_tokenizer, model_name="policy")) as url:
        reply = _client(url, "i").responses.create(model="policy", input="hi conv-1",
                                                   max_output_tokens=3)
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage.output_tokens == 3


@pytest.mark.parametrize(("request_", "named"), [
    ({"input": "x conv-1", "previous_response_id": "resp_nope"}, "previous_response_id"),
    ({"input": "x conv-1", "tools": [{"type": "custom", "name": "x"}]}, "tools[0]"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0]"),
    ({"input": "x conv-1", "tool_choice": "required"}, "tool_choice"),
])  # fmt: skip
def test_unsupported_requests_are_refused_naming_the_field(gateway, request_, named):
    url, _ = gateway
    with pytest.raises(openai.BadRequestError) as err:
        _client(url, "e").responses.create(model="policy", **request_)
    assert err.value.body["param"] == named


# --- requests shaped like the Codex CLI's (0.171.0, exec --json) ---------------------------

EXEC = {"type": "function", "name": "exec_command", "description": "Runs a command.",
        "strict": False, "parameters": {"type": "object", "properties": {
            "cmd": {"type": "string"}}, "required": ["cmd"], "additionalProperties": False}}
CODEX_FIELDS = {
    "model": "policy", "stream": True, "store": False, "parallel_tool_calls": True,
    "tool_choice": "auto", "reasoning": {"summary": "auto"},
    "include": ["reasoning.encrypted_content"], "prompt_cache_key": "01a2",
    "client_metadata": {"x-codex-installation-id": "a6e7"}, "instructions": "",
    "tools": [EXEC, {"type": "namespace", "name": "multi_agent_v1", "description": "agents",
                     "tools": [{**EXEC, "name": "close_agent"}]},
              {"type": "web_search", "external_web_access": True}],
}
CODEX_INPUT = [
    {"type": "message", "id": "msg_1", "role": "developer",
     "content": [{"type": "input_text", "text": "You are a coding agent running in Codex."}]},
    {"type": "message", "id": "msg_2", "role": "developer",
     "content": [{"type": "input_text", "text": "<skills_instructions>none"}]},
    {"type": "message", "role": "user",
     "content": [{"type": "input_text", "text": "<environment_context>/tmp/w"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
]


def _exec_call(cmd: str) -> str:
    return call_text("exec_command", "").replace('{"text": ""}', json.dumps({"cmd": cmd}))


def _done_items(reply) -> list[dict]:
    """The output items of a streamed answer, as Codex reads them (output_item.done)."""
    assert reply.status_code == 200, reply.text
    events = [json.loads(line[len("data: "):]) for line in reply.text.splitlines()
              if line.startswith("data: ")]
    assert events[-1]["type"] == "response.completed"
    return [e["item"] for e in events if e["type"] == "response.output_item.done"]


def test_a_codex_episode_with_parallel_calls_is_recorded_token_exact(tiny_tokenizer):
    from agentrl.rollout.backends.scripted import ScriptedBackend as Replies

    backend = Replies([_exec_call("echo a") + "\n" + _exec_call("ls"), "done"], tiny_tokenizer)
    with serve_in_thread(create_app(backend, tiny_tokenizer, model_name="policy")) as url:
        target = f"{url}/sessions/cx/v1/responses"
        calls = _done_items(httpx.post(target, json={**CODEX_FIELDS, "input": CODEX_INPUT}))
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
            ("exec_command", {"cmd": "echo a"}), ("exec_command", {"cmd": "ls"})]
        outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": out}
                   for c, out in zip(calls, ["a", "f.txt"], strict=True)]
        replayed = [{k: c[k] for k in ("type", "name", "arguments", "call_id")} for c in calls]
        (answer,) = _done_items(httpx.post(target, json={
            **CODEX_FIELDS, "input": [*CODEX_INPUT, *replayed, *outputs]}))
        record = httpx.get(f"{url}/sessions/cx").json()
    assert answer["content"][0]["text"] == "done"
    assert record["rewrites"] == 0 and record["forks"] == []
    (trajectory,) = record["trajectories"]
    ids, mask = trajectory["token_ids"], trajectory["loss_mask"]
    assert [t for t, m in zip(ids, mask, strict=True) if m] == [
        t for _, out in backend.outputs for t in out]
    prompt = tiny_tokenizer.decode(ids[:trajectory["prompt_length"]])
    assert "You are a coding agent running in Codex." in prompt
    assert "web_search" not in prompt  # a hosted tool: left out
    assert "close_agent" in prompt  # a namespace group's tool: Codex runs it
    tool_span = ids[trajectory["prompt_length"] + len(backend.outputs[0][1]):
                    len(ids) - len(backend.outputs[1][1])]
    assert "f.txt" in tiny_tokenizer.decode(tool_span)


def test_a_namespace_groups_tool_is_offered_and_its_call_names_the_namespace(tiny_tokenizer):
    """Codex runs a group's tool (its subagent tools) only when the call names the group."""
    from agentrl.rollout.backends.scripted import ScriptedBackend as Replies

    close = call_text("close_agent", "").replace('{"text": ""}', json.dumps({"cmd": "a1"}))
    backend = Replies([close + "\n" + _exec_call("ls")], tiny_tokenizer)
    with serve_in_thread(create_app(backend, tiny_tokenizer, model_name="policy")) as url:
        calls = _done_items(httpx.post(f"{url}/sessions/ns/v1/responses",
                                       json={**CODEX_FIELDS, "input": CODEX_INPUT}))
    assert [(c["name"], c.get("namespace")) for c in calls] == [
        ("close_agent", "multi_agent_v1"), ("exec_command", None)]
