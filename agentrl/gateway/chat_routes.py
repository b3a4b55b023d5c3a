"""The gateway's model-call routes, one per API dialect, each translated to one chat
completion of the session (agentrl/gateway/completion.py), so every dialect records the
same trajectory (agentrl/gateway/server.py lists every route):

- ``POST /sessions/{id}/v1/chat/completions``: OpenAI's chat completions (``stream``: the
  answer as server-sent chunks).
- ``POST /sessions/{id}/v1/messages``: Anthropic's Messages API
  (agentrl/gateway/anthropic_api.py), errors in Anthropic's shape.
- ``POST /sessions/{id}/v1/responses``: OpenAI's Responses API
  (agentrl/gateway/responses_api.py; ``previous_response_id`` chains within the session).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from agentrl.gateway import anthropic_api, responses_api
from agentrl.gateway.completion import (
    ChatRequest,
    RefusedRequest,
    SessionCompleter,
    chat_completion_stream,
    check_chat_request,
    openai_error,
)


def add_chat_routes(app: FastAPI, completer: SessionCompleter) -> None:
    """The model-call routes on ``app``, each answered by ``completer``."""

    @app.post("/sessions/{session_id}/v1/chat/completions")
    async def chat(session_id: str, request: ChatRequest) -> Any:
        check_chat_request(request)
        completion, _ = await completer.complete_in(session_id, request)
        if request.stream:
            return StreamingResponse(chat_completion_stream(completion),
                                     media_type="text/event-stream")
        return completion

    @app.post("/sessions/{session_id}/v1/messages")
    async def messages(session_id: str, body: dict[str, Any]) -> Any:
        """Anthropic's Messages API (agentrl/gateway/anthropic_api.py)."""
        try:
            request = ChatRequest.model_validate(anthropic_api.messages_to_chat_request(body))
            check_chat_request(request)
        except anthropic_api.MessagesRequestError as err:
            return JSONResponse(status_code=400, content=anthropic_api.error_body(
                f"{err.param}: {err}"))
        except (RefusedRequest, ValidationError) as err:
            text = err.detail["message"] if isinstance(err, RefusedRequest) else str(err)
            return JSONResponse(status_code=400, content=anthropic_api.error_body(text))
        session = completer.session(session_id)
        side = anthropic_api.is_side_call(body, session.episode_tools)
        completion, stop_sequence = await completer.complete_in(session_id, request, side=side)
        message = anthropic_api.to_message(completion, stop_sequence)
        if body.get("stream"):
            return StreamingResponse(anthropic_api.message_stream_events(message),
                                     media_type="text/event-stream")
        return message

    @app.post("/sessions/{session_id}/v1/responses")
    async def responses(session_id: str, body: dict[str, Any]) -> Any:
        """OpenAI's Responses API (agentrl/gateway/responses_api.py)."""
        session = completer.session(session_id)
        previous = body.get("previous_response_id")
        if previous is not None and previous not in session.responses:
            return openai_error(f"no response {previous!r} in session {session_id!r}",
                                "previous_response_id")
        try:
            history = session.responses.get(previous, [])
            chat = responses_api.responses_to_chat_request(body, history)
            request = ChatRequest.model_validate(chat)
            check_chat_request(request)
        except responses_api.ResponsesRequestError as err:
            return openai_error(f"{err.param}: {err}", err.param)
        except ValidationError as err:
            return openai_error(str(err), None)
        completion, _ = await completer.complete_in(session_id, request)
        response = responses_api.to_response(completion, body)
        session.responses[response["id"]] = responses_api.conversation_after(
            chat["messages"], completion, body.get("instructions"))
        if body.get("stream"):
            return StreamingResponse(responses_api.response_stream_events(response),
                                     media_type="text/event-stream")
        return response
