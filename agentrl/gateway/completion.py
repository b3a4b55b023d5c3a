"""One model call of a gateway session, in OpenAI's chat-completions form.

``SessionCompleter.complete_in(session_id, request)`` renders the request's messages and
tools with the chat template, extends the session's recorded trajectory
(agentrl/gateway/sessions.py), calls the backend with token ids, parses tool calls with the
rollout engine's parser (``multi_turn.format``) and answers as OpenAI does: ``tool_calls``
with ids, ``finish_reason`` ``tool_calls`` / ``stop`` / ``length``, ``usage``. Every route
that calls the model (chat completions, Anthropic's Messages, OpenAI's Responses:
agentrl/gateway/chat_routes.py) goes through it, so every dialect records the same
trajectory.

``check_chat_request`` refuses what the gateway does not serve yet with a
``RefusedRequest`` naming the field (the server answers it in OpenAI's error shape,
``openai_error``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from agentrl.data.rows import CHAT_ROLES
from agentrl.gateway.sessions import Session, comparable_message
from agentrl.models.chat import ChatRenderer
from agentrl.rollout.backends.base import GenerationBackend
from agentrl.rollout.parsers import ParseResult, get_tool_parser

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


def openai_error(message: str, param: str | None = None, status: int = 400) -> JSONResponse:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": None}})


class RefusedRequest(HTTPException):
    """A request the gateway does not serve; ``detail`` holds the message and the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(400, detail={"message": message, "param": param})


@dataclass
class SessionCompleter:
    """The model calls of the gateway's sessions: ``sessions`` is the app's record,
    ``{session_id: Session}``."""

    backend: GenerationBackend
    tokenizer: Any
    renderer: ChatRenderer
    sessions: dict[str, Session]
    model_name: str
    tool_format: str
    default_max_tokens: int

    def session(self, session_id: str) -> Session:
        """The session of that id, started on its first use."""
        return self.sessions.setdefault(session_id, Session(session_id))

    async def complete_in(self, session_id: str, request: ChatRequest,
                          side: bool = False) -> tuple[dict, str | None]:  # fmt: skip
        """One model call of a session, the session's calls one at a time."""
        session = self.session(session_id)
        async with session.lock:
            return await self.complete(session, request, side)

    async def complete(self, session: Session, request: ChatRequest,
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
        segment = session.prepare(self.renderer, request.messages, schemas, side=side)
        if not side:
            session.calls += 1
        prompt_tokens = len(segment.token_ids)
        stops = _stops(request.stop)
        params = self._sampling_params(request, stops)
        out = await self.backend.generate(list(segment.token_ids), params, call_id)
        content = segment.add_model_output(self.renderer, list(out.output_ids),
                                           out.output_log_probs, out.token_weight_versions)
        content, stop_sequence = _cut_at_stop(content, stops)
        stopped = stop_sequence is not None
        parsed = (get_tool_parser(self.tool_format, schemas).parse(content)
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
            "created": int(time.time()), "model": self.model_name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens,
                      "completion_tokens": len(out.output_ids),
                      "total_tokens": prompt_tokens + len(out.output_ids)},
        }, stop_sequence

    def _sampling_params(self, request: ChatRequest, stops: list[str]) -> dict[str, Any]:
        """The backend's sampling parameters for the request (temperature 0 is greedy)."""
        max_new = (request.max_completion_tokens or request.max_tokens
                   or self.default_max_tokens)  # fmt: skip
        greedy = request.temperature == 0
        params: dict[str, Any] = {
            "temperature": 0.0 if greedy else request.temperature,
            "top_p": 1.0 if greedy else request.top_p, "top_k": -1,
            "max_new_tokens": int(max_new), "skip_special_tokens": False, "no_stop_trim": True,
        }
        if self.tokenizer.eos_token_id is not None:
            params["stop_token_ids"] = [self.tokenizer.eos_token_id]
        if stops:
            params["stop"] = stops
        return params


def _rendered_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A function tool as the chat template sees it: name, description and parameters.
    API directives (OpenAI's ``strict``, which the Agents SDK always sends) are not part of
    the function's description and stay out of the prompt, as in vLLM and SGLang."""
    function = tool.get("function") or {}
    return {"type": "function", "function": {
        key: function[key] for key in ("name", "description", "parameters") if key in function}}


def check_chat_request(request: ChatRequest) -> None:
    """Raise ``RefusedRequest`` naming the field the gateway does not serve yet."""
    if request.n != 1:
        raise RefusedRequest("n > 1 is not supported: make n requests", "n")
    stops = _stops(request.stop)
    if len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise RefusedRequest(f"stop must be up to {MAX_STOPS} non-empty strings", "stop")
    for i, message in enumerate(request.messages):
        _check_message(message, f"messages[{i}]")
    for i, tool in enumerate(request.tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise RefusedRequest("only function tools are supported", f"tools[{i}].type")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                or not function["name"]:
            raise RefusedRequest("a function tool needs a function.name",
                                 f"tools[{i}].function.name")
    if request.tool_choice not in (None, "auto", "none"):
        raise RefusedRequest("tool_choice must be auto or none here", "tool_choice")


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise RefusedRequest("a message must be an object", where)
    if message.get("role") not in ROLES:
        raise RefusedRequest(
            f"role must be one of {', '.join(ROLES)}, got {message.get('role')!r}",
            f"{where}.role")
    content = message.get("content")
    if isinstance(content, list):
        for k, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise RefusedRequest("only text content parts are supported",
                                     f"{where}.content[{k}]")
    elif content is not None and not isinstance(content, str):
        raise RefusedRequest("content must be a string, a list of text parts or null",
                             f"{where}.content")


def _stops(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


def _cut_at_stop(text: str, stops: list[str]) -> tuple[str, str | None]:
    """``text`` up to the first stop sequence (OpenAI leaves it out of the answer), and
    that sequence (None if none is in it); the trajectory keeps every token the model
    produced, the stop sequence's included."""
    cuts = sorted((text.find(s), s) for s in stops if s in text)
    return (text[: cuts[0][0]], cuts[0][1]) if cuts else (text, None)


async def chat_completion_stream(completion: dict[str, Any]) -> AsyncIterator[str]:
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
