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

The routes live in agentrl/gateway/chat_routes.py (the model calls, through
agentrl/gateway/completion.py) and agentrl/gateway/session_routes.py (the rest).

Not supported yet, refused with a 400 naming the field: ``n`` > 1, a ``tool_choice`` other
than ``auto`` / ``none``, tools other than functions, content parts other than text.
Malformed requests get OpenAI-style errors ``{"error": {"message", "type":
"invalid_request_error", "param"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from agentrl.gateway.chat_routes import add_chat_routes
from agentrl.gateway.completion import (
    DEFAULT_MAX_TOKENS,
    RefusedRequest,
    SessionCompleter,
    openai_error,
)
from agentrl.gateway.session_routes import add_session_routes
from agentrl.gateway.sessions import Session
from agentrl.gateway.tools import SessionTools
from agentrl.models.chat import ChatRenderer
from agentrl.rollout.engine_config import MultiTurnConfig
from agentrl.utils.http_limits import BodyLimitMiddleware


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
    multi_turn: MultiTurnConfig | None = None,
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
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(RefusedRequest, _refused)
    add_session_routes(app, sessions, session_tools, model_name)
    add_chat_routes(app, SessionCompleter(
        backend=backend, tokenizer=tokenizer, renderer=renderer, sessions=sessions,
        model_name=model_name, tool_format=tool_format, default_max_tokens=default_max_tokens))
    return app


async def _invalid(_: Any, exc: RequestValidationError) -> JSONResponse:
    """A request body that fails ``ChatRequest``'s schema, in OpenAI's error shape."""
    error = exc.errors()[0] if exc.errors() else {}
    param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                    for p in error.get("loc", ()) if p != "body").lstrip(".")
    return openai_error(f"{param or 'body'}: {error.get('msg', 'invalid')}", param or None)


async def _refused(_: Any, exc: RefusedRequest) -> JSONResponse:
    return openai_error(exc.detail["message"], exc.detail["param"])


__all__ = ["create_app"]
