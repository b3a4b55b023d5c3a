"""Hardening for our small HTTP servers: a request-body size limit and deadline, and body
parse errors that say what is wrong.

    from agentrl.utils.http_limits import harden
    app = harden(FastAPI(...), max_body_bytes=8 * 2**20, body_timeout=30.0)

`BodyLimitMiddleware` is a pure ASGI middleware (no ``BaseHTTPMiddleware``, which wraps
every request in a task and a memory stream). Before the app runs it reads the whole body,
and answers by itself:

- 413 ``{"detail": "request body is N bytes, over the limit of M bytes (max_body_bytes)"}``
  when the declared Content-Length is over the limit (nothing is read), or when a body
  without one (chunked transfer) grows past it: it stops reading there, so it never holds
  more than ``max_body_bytes``;
- 408 when the body is not complete ``body_timeout`` seconds after the request started (a
  client that sends half a body and stalls would otherwise hold the connection forever).

Both answers carry ``Connection: close``: the rest of the body is never read, so the
connection cannot be reused. The app then gets the body it would have got, chunk by chunk.
This suits JSON APIs, whose handlers read the whole body anyway; it is not for apps that
stream uploads larger than the limit.

`install_json_error_handlers` replaces FastAPI's answers to bodies that do not parse. FastAPI
(0.165) answers invalid UTF-8 and too-deep nesting with a bare 400 "There was an error
parsing the body" (the cause is chained as ``__cause__``) and a JSON syntax error with a 422
whose ``loc`` is a character offset. Each becomes a 400 that says what is wrong: the byte
offset of the bad UTF-8, the line/column and message of the syntax error, or the nesting
limit. Field validation errors keep FastAPI's 422, whose ``loc`` names the field.
"""

from __future__ import annotations

import json
import logging
import sys
from collections import deque

import anyio
from fastapi import FastAPI, Request
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_BODY_TIMEOUT = 30.0

# FastAPI's detail when reading or decoding a JSON body raised something other than
# json.JSONDecodeError (fastapi/routing.py); the exception is chained as __cause__.
FASTAPI_PARSE_ERROR = "There was an error parsing the body"


class BodyLimitMiddleware:
    """Reject request bodies over ``max_body_bytes`` (413) or slower than ``body_timeout`` (408).

    Args:
        app: the ASGI app to protect.
        max_body_bytes: the largest request body accepted, in bytes.
        body_timeout: seconds from the start of a request until its body must be complete;
            None waits forever.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
    ) -> None:
        if max_body_bytes < 0:
            raise ValueError(f"max_body_bytes must be >= 0, got {max_body_bytes}")
        if body_timeout is not None and body_timeout <= 0:
            raise ValueError(f"body_timeout must be > 0 seconds or None, got {body_timeout}")
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await _reject(scope, send, 413, self._too_large(f"{declared} bytes"))
            return
        chunks: deque[bytes] = deque()
        received = 0
        with anyio.move_on_after(self.body_timeout) as deadline:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client is gone: nobody to answer
                body = message.get("body", b"")
                received += len(body)
                if received > self.max_body_bytes:
                    await _reject(scope, send, 413, self._too_large(f"at least {received} bytes"))
                    return
                chunks.append(body)
                if not message.get("more_body", False):
                    break
        if deadline.cancelled_caught:
            of = f" of {declared}" if declared is not None else ""
            detail = (
                f"request body not complete within {self.body_timeout:g} s (body_timeout): "
                f"got {received}{of} bytes"
            )
            await _reject(scope, send, 408, detail)
            return
        await self.app(scope, _replay(chunks, receive), send)

    def _too_large(self, size: str) -> str:
        return (
            f"request body is {size}, over the limit of {self.max_body_bytes} bytes "
            "(max_body_bytes)"
        )


def _replay(chunks: deque[bytes], receive: Receive) -> Receive:
    """A ``receive`` that hands out the buffered body, then defers to the server's."""

    async def replay() -> Message:
        if chunks:
            body = chunks.popleft()
            return {"type": "http.request", "body": body, "more_body": bool(chunks)}
        return await receive()  # after the body: waits for http.disconnect

    return replay


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:  # the server rejects a malformed length before us
                return None
    return None


async def _reject(scope: Scope, send: Send, status: int, detail: str) -> None:
    client = scope.get("client") or ("?", 0)
    logger.warning(
        "%s %s from %s:%s -> %d: %s",
        scope["method"],
        scope["path"],
        client[0],
        client[1],
        status,
        detail,
    )
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def json_syntax_detail(exc: RequestValidationError) -> str | None:
    """What is wrong with a body FastAPI could not decode as JSON; None for other errors.

    FastAPI reports ``json.JSONDecodeError`` as one error of type ``json_invalid`` at
    ``loc == ("body", char_offset)`` with the decoded text as ``exc.body``. (pydantic's
    ``Json`` fields also say ``json_invalid``, but at a field name, so they are left alone.)
    """
    errors = exc.errors()
    if len(errors) != 1 or errors[0].get("type") != "json_invalid":
        return None
    loc = tuple(errors[0].get("loc", ()))
    if len(loc) != 2 or loc[0] != "body" or not isinstance(loc[1], int):
        return None
    pos = loc[1]
    message = (errors[0].get("ctx") or {}).get("error", "invalid JSON")
    if not isinstance(exc.body, str):
        return f"request body is not valid JSON: {message} (char {pos})"
    line = exc.body.count("\n", 0, pos) + 1
    column = pos - exc.body.rfind("\n", 0, pos)
    return f"request body is not valid JSON: {message}: line {line} column {column} (char {pos})"


def parse_failure_detail(cause: BaseException) -> str:
    """What is wrong with a body whose decoding raised ``cause`` (not a JSON syntax error)."""
    if isinstance(cause, UnicodeDecodeError):
        encoding = cause.encoding.upper()
        return f"request body is not valid {encoding}: {cause.reason} at byte {cause.start}"
    if isinstance(cause, RecursionError):
        return (
            "request body is JSON nested deeper than the parser allows "
            f"(about {sys.getrecursionlimit()} levels, Python's recursion limit)"
        )
    return f"{FASTAPI_PARSE_ERROR}: {type(cause).__name__}: {cause}"


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    detail = json_syntax_detail(exc)
    if detail is None:
        return await request_validation_exception_handler(request, exc)
    logger.info("%s %s -> 400: %s", request.method, request.url.path, detail)
    return JSONResponse({"detail": detail}, status_code=400)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    cause = exc.__cause__
    if exc.status_code != 400 or exc.detail != FASTAPI_PARSE_ERROR or cause is None:
        return await http_exception_handler(request, exc)
    detail = parse_failure_detail(cause)
    logger.info("%s %s -> 400: %s", request.method, request.url.path, detail)
    return JSONResponse({"detail": detail}, status_code=400)


def install_json_error_handlers(app: FastAPI) -> None:
    """Answer bodies that do not parse with a 400 that says why (see the module docstring).

    Replaces the app's handlers for ``RequestValidationError`` and Starlette's
    ``HTTPException``; everything but a body parse error still gets FastAPI's default answer.
    """
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)


def harden(
    app: FastAPI,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
) -> FastAPI:
    """Install the body limit/deadline middleware and the parse error handlers on ``app``.

    Call before the app starts serving. Returns ``app``.
    """
    install_json_error_handlers(app)
    app.add_middleware(
        BodyLimitMiddleware, max_body_bytes=max_body_bytes, body_timeout=body_timeout
    )
    return app
