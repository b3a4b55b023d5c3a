"""The OpenAI-compatible gateway: any agent code that speaks the OpenAI chat API runs
against the training policy, and every call is recorded token-exact for training.

    app = create_app(backend, tokenizer, model_name="policy")   # uvicorn.run(app, port=...)
    client = openai.AsyncOpenAI(base_url=f"{url}/sessions/episode-1/v1", api_key="x")

Routes (the session id is part of the base URL, so unmodified clients work):

- ``POST /sessions/{id}/v1/chat/completions``: ``messages`` (``content`` a string or text
  parts), ``tools`` (function tools; the template sees their name, description and
  parameters, not API directives such as ``strict``), ``tool_choice`` (``auto`` | ``none``),
  ``temperature``, ``top_p``, ``max_tokens`` / ``max_completion_tokens``, ``stop`` (up to 4
  sequences: the backend stops there, the answer leaves the sequence out, the trajectory
  keeps every token the model produced), ``stream``. The gateway renders the chat template
  itself, calls the backend with token ids, parses tool calls with the rollout engine's
  parser (``multi_turn.format``) and answers in OpenAI's format: ``tool_calls`` with ids,
  ``finish_reason`` ``tool_calls`` / ``stop`` / ``length``, ``usage``. With ``stream`` the
  answer comes as server-sent events (one content chunk, then the finish).
- ``POST /sessions/{id}/v1/messages``: Anthropic's Messages API and ``POST
  /sessions/{id}/v1/responses``: OpenAI's Responses API (``previous_response_id`` chains
  within the session), both translated to the chat form above, so every dialect records the
  same trajectory (agentrl/gateway/anthropic_api.py, responses_api.py).
- ``GET /sessions/{id}/v1/models``: the served model.
- ``GET /sessions/{id}``: ``{"trajectories": [{"token_ids", "loss_mask", "log_probs",
  "prompt_length"}], "reward", "rewrites"}`` (agentrl/gateway/sessions.py).
- ``POST /sessions/{id}/reward``: ``{"reward": R}``.
- ``GET /sessions/{id}/v1/tools``, ``POST /sessions/{id}/v1/tools/{name}``: the rollout's
  tools (``multi_turn.tool_config_path``, MCP servers included) for agents to call, under
  the engine's timeout, error and release policy (agentrl/gateway/tools.py).
- ``DELETE /sessions/{id}``: the session's record (as ``GET``), then it is forgotten: a
  long-lived gateway keeps every session until it is deleted (agent mode deletes its own).
  Its tool instances are released (``calc_reward``, then ``release``).

With ``max_body_bytes`` (``agentrl gateway`` sets it) a request body above it gets a 413
and one that does not arrive within ``body_timeout`` seconds a 408
(agentrl/utils/http_limits.py, as the sandbox and the retriever).

Not supported yet, refused with a 400 naming the field: ``n`` > 1, a ``tool_choice`` other
than ``auto`` / ``none``, tools other than functions, content parts other than text.
Malformed requests get OpenAI-style errors ``{"error": {"message", "type":
"invalid_request_error", "param"}}``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrl.data.rows import CHAT_ROLES
from agentrl.gateway import anthropic_api, responses_api
from agentrl.gateway.sessions import Session, comparable_message
from agentrl.gateway.tools import SessionTools
from agentrl.models.chat import ChatRenderer
from agentrl.rollout.parsers import ParseResult, get_tool_parser
from agentrl.utils.http_limits import BodyLimitMiddleware

DEFAULT_MAX_TOKENS = 512
MAX_STOPS = 4  # OpenAI's limit on stop sequences
ROLES = CHAT_ROLES


class ChatRequest(BaseModel):
    """The fields of OpenAI's chat-completions request that the gateway reads."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    stream: bool = False
    n: int = 1


def _openai_error(message: str, param: str | None = None, status: int = 400) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": None}})


class _Refused(HTTPException):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(400, detail={"message": message, "param": param})


def create_app(
    backend: Any,
    tokenizer: Any,
    *,
    model_name: str = "agentrl-policy",
    tool_format: str = "hermes",
    chat_template_kwargs: dict[str, Any] | None = None,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    max_body_bytes: int | None = None,
    body_timeout: float | None = None,
    tools: Mapping[str, Any] | None = None,
    multi_turn: Any = None,
) -> FastAPI:
    """The gateway app in front of ``backend`` (an agentrl ``GenerationBackend``); with
    ``tools`` (``{name: BaseTool}``) and the rollout's ``multi_turn`` config the agents may
    list and call them (agentrl/gateway/tools.py)."""
    renderer = ChatRenderer(tokenizer, dict(chat_template_kwargs or {}))
    sessions: dict[str, Session] = {}
    app = FastAPI(title="agentrl gateway")
    app.state.sessions = sessions
    if tools and multi_turn is None:
        raise ValueError("create_app: tools need the rollout's multi_turn config (their "
                         "timeout, concurrency and truncation)")
    app.state.tools = session_tools = SessionTools(tools, multi_turn) if tools else None
    if max_body_bytes is not None:  # its errors stay OpenAI-shaped: only the body limits
        app.add_middleware(BodyLimitMiddleware, max_body_bytes=max_body_bytes,
                           body_timeout=body_timeout)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Any, exc: RequestValidationError) -> JSONResponse:
        error = exc.errors()[0] if exc.errors() else {}
        param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                        for p in error.get("loc", ()) if p != "body").lstrip(".")
        return _openai_error(f"{param or 'body'}: {error.get('msg', 'invalid')}",
                             param or None)

    @app.exception_handler(_Refused)
    async def _refused(_: Any, exc: _Refused) -> JSONResponse:
        return _openai_error(exc.detail["message"], exc.detail["param"])

    @app.head("/")
    @app.head("/sessions/{session_id}")
    async def reachable(session_id: str = "") -> Response:
        """Claude Code's connectivity check (``HEAD`` of its base URL): 200, no body."""
        return Response(status_code=200)

    @app.get("/sessions/{session_id}/v1/models")
    async def models(session_id: str) -> dict:
        return {"object": "list", "data": [
            {"id": model_name, "object": "model", "created": 0, "owned_by": "agentrl"}]}

    @app.get("/sessions/{session_id}")
    async def get_session(session_id: str) -> dict:
        if session_id not in sessions:
            raise HTTPException(404, detail=f"no session {session_id!r}")
        return sessions[session_id].as_dict()

    @app.delete("/sessions/{session_id}")
    async def delete_session(session_id: str) -> dict:
        session = sessions.pop(session_id, None)
        used_tools = session_tools is not None and await session_tools.close(session_id)
        if session is None and not used_tools:
            raise HTTPException(404, detail=f"no session {session_id!r}")
        return (session or Session(session_id)).as_dict()

    @app.get("/sessions/{session_id}/v1/tools")
    async def list_tools(session_id: str) -> dict:
        schemas = session_tools.schemas() if session_tools is not None else []
        return {"object": "list", "data": schemas}

    @app.post("/sessions/{session_id}/v1/tools/{name}")
    async def call_tool(session_id: str, name: str, body: dict[str, Any]) -> Any:
        if session_tools is None or name not in session_tools.tools:
            served = ", ".join(session_tools.tools) if session_tools is not None else "none"
            return _openai_error(f"no tool {name!r} here (tools: {served})", "name", 404)
        arguments = body.get("arguments", {})
        if not isinstance(arguments, dict | str):
            return _openai_error("arguments must be an object or a JSON string", "arguments")
        return await session_tools.call(session_id, name, arguments)

    @app.post("/sessions/{session_id}/reward")
    async def set_reward(session_id: str, body: dict[str, Any]) -> dict:
        reward = body.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            return _openai_error("reward must be a number", "reward")
        sessions.setdefault(session_id, Session(session_id)).reward = float(reward)
        return {"reward": float(reward)}

    @app.post("/sessions/{session_id}/v1/chat/completions")
    async def chat(session_id: str, request: ChatRequest) -> Any:
        _check(request)
        completion, _ = await _complete_in(session_id, request)
        if request.stream:
            return StreamingResponse(_stream(completion), media_type="text/event-stream")
        return completion

    @app.post("/sessions/{session_id}/v1/messages")
    async def messages(session_id: str, body: dict[str, Any]) -> Any:
        """Anthropic's Messages API (agentrl/gateway/anthropic_api.py)."""
        try:
            request = ChatRequest.model_validate(anthropic_api.messages_to_chat_request(body))
            _check(request)
        except anthropic_api.MessagesRequestError as err:
            return JSONResponse(status_code=400, content=anthropic_api.error_body(
                f"{err.param}: {err}"))
        except (_Refused, ValidationError) as err:
            text = err.detail["message"] if isinstance(err, _Refused) else str(err)
            return JSONResponse(status_code=400, content=anthropic_api.error_body(text))
        session = sessions.setdefault(session_id, Session(session_id))
        side = anthropic_api.is_side_call(body, session.episode_tools)
        completion, stop_sequence = await _complete_in(session_id, request, side=side)
        message = anthropic_api.to_message(completion, stop_sequence)
        if body.get("stream"):
            return StreamingResponse(anthropic_api.message_stream_events(message),
                                     media_type="text/event-stream")
        return message

    @app.post("/sessions/{session_id}/v1/responses")
    async def responses(session_id: str, body: dict[str, Any]) -> Any:
        """OpenAI's Responses API (agentrl/gateway/responses_api.py)."""
        session = sessions.setdefault(session_id, Session(session_id))
        previous = body.get("previous_response_id")
        if previous is not None and previous not in session.responses:
            return _openai_error(f"no response {previous!r} in session {session_id!r}",
                                 "previous_response_id")
        try:
            history = session.responses.get(previous, [])
            chat = responses_api.responses_to_chat_request(body, history)
            request = ChatRequest.model_validate(chat)
            _check(request)
        except responses_api.ResponsesRequestError as err:
            return _openai_error(f"{err.param}: {err}", err.param)
        except ValidationError as err:
            return _openai_error(str(err), None)
        completion, _ = await _complete_in(session_id, request)
        response = responses_api.to_response(completion, body)
        session.responses[response["id"]] = responses_api.conversation_after(
            chat["messages"], completion, body.get("instructions"))
        if body.get("stream"):
            return StreamingResponse(responses_api.response_stream_events(response),
                                     media_type="text/event-stream")
        return response

    async def _complete_in(session_id: str, request: ChatRequest,
                           side: bool = False) -> tuple[dict, str | None]:  # fmt: skip
        """One model call of a session, the session's calls one at a time."""
        session = sessions.setdefault(session_id, Session(session_id))
        async with session.lock:
            return await _complete(session, request, side)

    async def _complete(session: Session, request: ChatRequest,
                        side: bool = False) -> tuple[dict, str | None]:  # fmt: skip
        """The chat completion, and the stop sequence that ended it (None if none did).
        The backend's call id has the rollout engine's shape, ``{trajectory}-t{k}-a0``: the
        episode's k-th call ``{session_id}-t{k}-a0``, its k-th side call
        ``{session_id}~side-t{k}-a0`` (routing keeps a trajectory on one server, the
        scripted backend reads its k-th reply)."""
        schemas = [_rendered_tool(t) for t in request.tools or []
                   if isinstance(t, dict) and t.get("type") == "function"]
        if side:
            call_id = f"{session.session_id}~side-t{len(session.side)}-a0"
        else:
            call_id = f"{session.session_id}-t{session.calls}-a0"
        segment = session.prepare(renderer, request.messages, schemas, side=side)
        if not side:
            session.calls += 1
        prompt_tokens = len(segment.token_ids)
        max_new = request.max_completion_tokens or request.max_tokens or default_max_tokens
        greedy = request.temperature == 0
        params: dict[str, Any] = {
            "temperature": 0.0 if greedy else request.temperature,
            "top_p": 1.0 if greedy else request.top_p, "top_k": -1,
            "max_new_tokens": int(max_new), "skip_special_tokens": False, "no_stop_trim": True,
        }
        if tokenizer.eos_token_id is not None:
            params["stop_token_ids"] = [tokenizer.eos_token_id]
        stops = _stops(request.stop)
        if stops:
            params["stop"] = stops
        out = await backend.generate(list(segment.token_ids), params, call_id)
        content = segment.add_model_output(renderer, list(out.output_ids), out.output_log_probs,
                                           out.token_weight_versions)  # fmt: skip
        content, stop_sequence = _cut_at_stop(content, stops)
        stopped = stop_sequence is not None
        parsed = (get_tool_parser(tool_format, schemas).parse(content)
                  if schemas and request.tool_choice != "none" else ParseResult(content, []))
        calls = [c for c in parsed.calls if c.error is None]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            text = parsed.normal_text
            message["content"] = (text[:-1] if text.endswith("\n") else text) or None
            message["tool_calls"] = [
                {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in calls
            ]
        segment.messages = [*segment.messages, comparable_message(message)]
        finish = "length" if out.finish_reason == "length" and not stopped else (
            "tool_calls" if calls else "stop")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
            "created": int(time.time()), "model": model_name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens,
                      "completion_tokens": len(out.output_ids),
                      "total_tokens": prompt_tokens + len(out.output_ids)},
        }, stop_sequence

    return app


def _rendered_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A function tool as the chat template sees it: name, description and parameters.
    API directives (OpenAI's ``strict``, which the Agents SDK always sends) are not part of
    the function's description and stay out of the prompt, as in vLLM and SGLang."""
    function = tool.get("function") or {}
    return {"type": "function", "function": {
        key: function[key] for key in ("name", "description", "parameters") if key in function}}


def _check(request: ChatRequest) -> None:
    if request.n != 1:
        raise _Refused("n > 1 is not supported: make n requests", "n")
    stops = _stops(request.stop)
    if len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise _Refused(f"stop must be up to {MAX_STOPS} non-empty strings", "stop")
    for i, message in enumerate(request.messages):
        _check_message(message, f"messages[{i}]")
    for i, tool in enumerate(request.tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise _Refused("only function tools are supported", f"tools[{i}].type")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                or not function["name"]:
            raise _Refused("a function tool needs a function.name", f"tools[{i}].function.name")
    if request.tool_choice not in (None, "auto", "none"):
        raise _Refused("tool_choice must be auto or none here", "tool_choice")


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise _Refused("a message must be an object", where)
    if message.get("role") not in ROLES:
        raise _Refused(f"role must be one of {', '.join(ROLES)}, got {message.get('role')!r}",
                       f"{where}.role")
    content = message.get("content")
    if isinstance(content, list):
        for k, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise _Refused("only text content parts are supported",
                               f"{where}.content[{k}]")
    elif content is not None and not isinstance(content, str):
        raise _Refused("content must be a string, a list of text parts or null",
                       f"{where}.content")


def _stops(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


def _cut_at_stop(text: str, stops: list[str]) -> tuple[str, str | None]:
    """``text`` up to the first stop sequence (OpenAI leaves it out of the answer), and
    that sequence (None if none is in it); the trajectory keeps every token the model
    produced, the stop sequence's included."""
    cuts = sorted((text.find(s), s) for s in stops if s in text)
    return (text[: cuts[0][0]], cuts[0][1]) if cuts else (text, None)


async def _stream(completion: dict[str, Any]):
    """The completion as OpenAI's server-sent chunks: the whole delta, then the finish."""
    choice = completion["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(message["tool_calls"])]
    base = {k: completion[k] for k in ("id", "created", "model")}
    for chunk in (
        {**base, "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
         "usage": completion["usage"]},
    ):
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


__all__ = ["ChatRequest", "create_app"]
