"""Outside the sandbox: a unix socket that forwards a CLI's HTTP calls to its gateway session.

    async with SessionRelay(client, "/tmp/ep/gateway.sock", max_turns=16) as relay:
        ...   # the CLI (through bridge.py) calls http://127.0.0.1:{port}/v1/messages
        relay.model_calls, relay.over_budget (an asyncio.Event)

The agent function gets an SDK client bound to the sample's session (``openai.AsyncOpenAI``
or ``anthropic.AsyncAnthropic``; in agent mode its HTTP client reaches the in-process gateway
without a socket). The relay serves on a unix socket in the same event loop and sends each
request, path and query unchanged, to the session's root (the client's base URL without a
trailing ``/v1``) through that HTTP client: ``POST /v1/messages?beta=true`` becomes
``POST /sessions/{id}/v1/messages?beta=true`` of the gateway. It counts the model calls
(``POST`` to ``.../messages``, ``.../responses``, ``.../chat/completions``); the call after
``max_turns`` is not forwarded: it gets a 400 and ``over_budget`` is set, so the harness
kills the CLI.

Only the session's API is forwarded: ``HEAD /`` (Claude Code's connectivity check) and
``GET`` / ``POST`` of paths under ``/v1/`` made of plain segments (letters, digits, ``-``,
``_``). Anything else (``GET /``, the session's record; ``/reward``; a ``..`` that would
climb out of the session to another one or to the gateway's other routes) gets a 403
naming what it asked: the policy is whatever sends these requests, and it must neither read
its own session's record nor post its reward nor touch another episode's session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from typing import Any

import uvicorn

logger = logging.getLogger(__name__)

MODEL_PATHS = ("/messages", "/responses", "/chat/completions")
SESSION_API = re.compile(r"/v1(/[A-Za-z0-9_-]+)+")  # what GET / POST may reach
REFUSED = "the relay forwards only the session's API (HEAD /, GET or POST /v1/...)"
_HOP_HEADERS = {b"host", b"content-length", b"connection", b"transfer-encoding",
                b"keep-alive", b"accept-encoding"}
_DROP_RESPONSE = {"content-length", "content-encoding", "transfer-encoding", "connection"}


def session_root(client: Any) -> tuple[str, Any]:
    """(the session's root URL, the HTTP client that reaches it) of an SDK client."""
    http = getattr(client, "_client", None)
    base = getattr(client, "base_url", None)
    if http is None or base is None:
        raise TypeError("the harness agents need the SDK client agent mode hands them "
                        f"(openai.AsyncOpenAI or anthropic.AsyncAnthropic), got {type(client)}")
    root = str(base).rstrip("/")
    return (root[: -len("/v1")] if root.endswith("/v1") else root), http


class _QuietServer(uvicorn.Server):
    """uvicorn in the caller's event loop; the process's signal handlers left alone."""

    def capture_signals(self):
        return contextlib.nullcontext()


class SessionRelay:
    """The unix-socket relay of one episode (the module docstring)."""

    def __init__(self, client: Any, socket_path: str, max_turns: int) -> None:
        self.root, self.http = session_root(client)
        self.socket_path = socket_path
        self.max_turns = max_turns
        self.model_calls = 0
        self.over_budget = asyncio.Event()
        config = uvicorn.Config(self._app, uds=socket_path, log_level="warning",
                                log_config=None, lifespan="off", interface="asgi3",
                                timeout_graceful_shutdown=2)
        self._server = _QuietServer(config)
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> SessionRelay:
        self._task = asyncio.ensure_future(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError(f"the relay did not start on {self.socket_path}")
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 5)

    async def _app(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path, method = scope["path"], scope["method"]
        if not _forwarded(method, path):
            logger.warning("relay refused %s %r from the sandbox", method, path[:200])
            message = f"{REFUSED}, not {method} {path[:200]}"
            await _respond(send, 403, [("content-type", "application/json")],
                           json.dumps({"error": {"type": "permission_error",
                                                 "message": message}}).encode())
            return
        if method == "POST" and path.endswith(MODEL_PATHS):
            self.model_calls += 1
            if self.model_calls > self.max_turns:
                self.over_budget.set()
                await _respond(send, 400, [("content-type", "application/json")],
                               b'{"error": {"type": "invalid_request_error", '
                               b'"message": "the episode\'s turn budget is spent"}}')
                return
        query = scope.get("query_string", b"").decode()
        url = self.root + (path if path != "/" else "") + (f"?{query}" if query else "")
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"]
                   if k.lower() not in _HOP_HEADERS]
        try:
            reply = await self.http.request(method, url, headers=headers, content=bytes(body))
        except Exception as err:  # the gateway went away: the CLI sees a 502
            logger.warning("relay %s %s failed: %s", method, path, err)
            await _respond(send, 502, [("content-type", "text/plain")], str(err).encode())
            return
        await _respond(send, reply.status_code,
                       [(k, v) for k, v in reply.headers.items()
                        if k.lower() not in _DROP_RESPONSE], reply.content)


def _forwarded(method: str, path: str) -> bool:
    """Whether a request from the sandbox reaches the gateway (the module docstring)."""
    if method == "HEAD" and path == "/":
        return True
    return method in ("GET", "POST") and SESSION_API.fullmatch(path) is not None


async def _respond(send: Any, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode(), v.encode()) for k, v in headers]
                + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


__all__ = ["MODEL_PATHS", "REFUSED", "SESSION_API", "SessionRelay", "session_root"]
