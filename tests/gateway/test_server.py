"""The gateway with the official openai client against a scripted backend: token-exact
recording, tool responses masked out, history rewrites, streaming, OpenAI-style errors."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from agentrl.gateway import create_app
from agentrl.models.chat import ChatRenderer
from agentrl.testing.rollout import ConversationScriptBackend, call_text
from agentrl.utils.serving import serve_in_thread

openai = pytest.importorskip("openai")
TOOLS = Path(__file__).resolve().parents[2] / "recipes" / "quickstart" / "calculator_tool.yaml"

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                   "required": ["text"]}}}
# conversation 0: a tool call, then the answer
SCRIPTS = {0: [call_text("calculator", "6*7") + "<|im_end|>", "It is 42.<|im_end|>"],
           1: ["Sure.<|im_end|>"]}


@pytest.fixture
def gateway(tiny_tokenizer):
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    app = create_app(backend, tiny_tokenizer, model_name="policy")
    with serve_in_thread(app) as url:
        yield url, backend


def _outputs(backend, conversation: int) -> list[list[int]]:
    """The backend's output ids for a conversation, in call order."""
    return [ids for (k, _), calls in backend.outputs.items() if k == conversation
            for ids in calls]


def _client(url: str, session: str):
    return openai.OpenAI(base_url=f"{url}/sessions/{session}/v1", api_key="unused")


def test_a_tool_loop_through_the_openai_client_is_recorded_token_exact(gateway):
    url, backend = gateway
    client = _client(url, "ep-1")
    assert [m.id for m in client.models.list().data] == ["policy"]
    messages = [{"role": "user", "content": "What is 6*7? conv-0"}]
    first = client.chat.completions.create(model="policy", messages=messages,
                                           tools=[CALCULATOR])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "calculator"
    assert json.loads(call.function.arguments) == {"text": "6*7"}
    messages.append(choice.message)  # the SDK's own message object, as agents do
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "42"})
    second = client.chat.completions.create(model="policy", messages=messages,
                                            tools=[CALCULATOR])
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "It is 42."
    assert second.usage.completion_tokens == len(_outputs(backend, 0)[1])
    httpx.post(f"{url}/sessions/ep-1/reward", json={"reward": 1.0}).raise_for_status()

    recorded = httpx.get(f"{url}/sessions/ep-1").json()
    assert recorded["reward"] == 1.0 and recorded["rewrites"] == 0
    (trajectory,) = recorded["trajectories"]
    ids, mask = trajectory["token_ids"], trajectory["loss_mask"]
    trained = [t for t, m in zip(ids, mask, strict=True) if m == 1]
    outputs = _outputs(backend, 0)  # exactly the backend's output ids, in order
    assert trained == outputs[0] + outputs[1]
    # the tool response is in the trajectory, masked out
    tool_span = [t for t, m in zip(ids[trajectory["prompt_length"]:],
                                   mask[trajectory["prompt_length"]:], strict=True) if m == 0]
    assert "42" in backend.tokenizer.decode(tool_span)
    assert len(trajectory["log_probs"]) == len(ids)


def test_a_history_rewrite_starts_a_new_segment(gateway):
    url, _ = gateway
    client = _client(url, "ep-2")
    messages = [{"role": "user", "content": "Hello conv-1"}]
    reply = client.chat.completions.create(model="policy", messages=messages)
    # the agent edits its earlier message instead of extending the conversation
    edited = [{"role": "user", "content": "Hello again conv-1"}, reply.choices[0].message,
              {"role": "user", "content": "and now? conv-1"}]
    client.chat.completions.create(model="policy", messages=edited)
    recorded = httpx.get(f"{url}/sessions/ep-2").json()
    assert recorded["rewrites"] == 1 and len(recorded["trajectories"]) == 2


def test_streaming_answers_with_chunks(gateway):
    url, _ = gateway
    client = _client(url, "ep-3")
    stream = client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "Hi conv-1"}], stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Sure."
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stop_sequences_cut_the_answer_and_reach_the_backend(gateway):
    url, backend = gateway
    client = _client(url, "ep-7")
    # text parts and a plain string render alike
    messages = [{"role": "user", "content": [{"type": "text", "text": "What now? conv-0"}]}]
    strict = {**CALCULATOR, "function": {**CALCULATOR["function"], "strict": True}}
    reply = client.chat.completions.create(model="policy", messages=messages,
                                           tools=[strict], stop='"arguments"')
    choice = reply.choices[0]
    assert backend.calls[-1]["stop"] == ['"arguments"']
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content == call_text("calculator", "6*7").split('"arguments"')[0]
    (trajectory,) = httpx.get(f"{url}/sessions/ep-7").json()["trajectories"]
    # the trajectory keeps the model's tokens; the prompt shows the tool without "strict"
    assert trajectory["token_ids"][trajectory["prompt_length"]:] == _outputs(backend, 0)[-1]
    renderer = ChatRenderer(backend.tokenizer)
    plain = [{"role": "user", "content": "What now? conv-0"}]
    assert trajectory["token_ids"][:trajectory["prompt_length"]] == renderer.prompt_ids(
        plain, [CALCULATOR])
    # the agent replays the cut answer: the same segment goes on
    messages += [choice.message, {"role": "user", "content": "go on conv-0"}]
    client.chat.completions.create(model="policy", messages=messages, tools=[strict])
    assert httpx.get(f"{url}/sessions/ep-7").json()["rewrites"] == 0


def test_delete_returns_the_record_and_forgets_the_session(gateway):
    url, _ = gateway
    _client(url, "ep-5").chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "Hi conv-1"}])
    record = httpx.get(f"{url}/sessions/ep-5").json()
    deleted = httpx.delete(f"{url}/sessions/ep-5")
    assert deleted.status_code == 200 and deleted.json() == record
    assert httpx.get(f"{url}/sessions/ep-5").status_code == 404
    assert httpx.delete(f"{url}/sessions/ep-5").status_code == 404


# every route of the module docstring, in the order the app matches them (the handlers live
# in agentrl/gateway/session_routes.py and chat_routes.py)
ROUTES = [
    ("/sessions/{session_id}", {"HEAD"}), ("/", {"HEAD"}),
    ("/sessions/{session_id}/v1/models", {"GET"}), ("/sessions/{session_id}", {"GET"}),
    ("/sessions/{session_id}", {"DELETE"}), ("/sessions/{session_id}/v1/tools", {"GET"}),
    ("/sessions/{session_id}/v1/tools/{name}", {"POST"}),
    ("/sessions/{session_id}/reward", {"POST"}),
    ("/sessions/{session_id}/v1/chat/completions", {"POST"}),
    ("/sessions/{session_id}/v1/messages", {"POST"}),
    ("/sessions/{session_id}/v1/responses", {"POST"}),
]


def test_the_app_serves_every_route_of_the_docstring(tiny_tokenizer):
    app = create_app(ConversationScriptBackend(tiny_tokenizer, SCRIPTS), tiny_tokenizer)
    own = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url}
    assert [(r.path, r.methods) for r in app.routes if r.path not in own] == ROUTES


def test_body_limits_answer_413_and_keep_openai_errors(tiny_tokenizer):
    backend = ConversationScriptBackend(tiny_tokenizer, SCRIPTS)
    app = create_app(backend, tiny_tokenizer, max_body_bytes=4096, body_timeout=5.0)
    with serve_in_thread(app) as url:
        big = {"messages": [{"role": "user", "content": "x" * 8192}]}
        resp = httpx.post(f"{url}/sessions/ep-6/v1/chat/completions", json=big)
        assert resp.status_code == 413
        resp = httpx.post(f"{url}/sessions/ep-6/v1/chat/completions", json={"messages": []})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages"
        assert "ep-6" not in app.state.sessions  # a refused body opens no session


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": -1}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": ["a", "b", "c", "d", "e"]},
     "stop"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": [""]}, "stop"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "x"}, "hi"]}, "messages[1]"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search"}]},
     "tools[0].type"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
     "tools[0].function.name"),
])
def test_bad_requests_get_openai_style_errors(gateway, body, param):
    url, _ = gateway
    resp = httpx.post(f"{url}/sessions/ep-4/v1/chat/completions", json=body)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert httpx.get(f"{url}/sessions/nope").status_code == 404


@pytest.mark.slow
def test_the_gateway_command_serves_the_model(tiny_model_dir, tmp_path):
    import subprocess
    import sys
    import time

    from agentrl.rollout.backends.launcher import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.cli", "--log-level", "WARNING",
                             "gateway", "--model", str(tiny_model_dir), "--port", str(port),
                             "data.max_response_length=8",
                             f"actor_rollout_ref.rollout.multi_turn.tool_config_path={TOOLS}"],
                            stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/sessions/x/v1/models", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline
                time.sleep(0.2)
        reply = _client(url, "cli").chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], temperature=0)
        assert reply.usage.completion_tokens <= 8
        (trajectory,) = httpx.get(f"{url}/sessions/cli").json()["trajectories"]
        assert sum(trajectory["loss_mask"]) == reply.usage.completion_tokens
        # the configured tools reach agents
        answer = httpx.post(f"{url}/sessions/cli/v1/tools/calculator",
                            json={"arguments": {"expression": "6*7"}}, timeout=30).json()
        assert answer == {"content": "42", "reward": 0.0, "error": None}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()
