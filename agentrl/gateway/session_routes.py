"""The gateway's session routes: what a session recorded, its reward, its deletion, the
served model and the rollout's tools (agentrl/gateway/server.py lists every route).

- ``HEAD /`` and ``HEAD /sessions/{id}``: 200, no body (Claude Code's connectivity check).
- ``GET /sessions/{id}/v1/models``: the served model.
- ``GET /sessions/{id}``: the session's record (agentrl/gateway/sessions.py); ``DELETE``
  returns it and forgets the session, releasing its tool instances.
- ``GET /sessions/{id}/v1/tools``, ``POST /sessions/{id}/v1/tools/{name}``: the rollout's
  tools (agentrl/gateway/tools.py).
- ``POST /sessions/{id}/reward``: ``{"reward": R}``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import Response

from agentrl.gateway.completion import openai_error
from agentrl.gateway.sessions import Session
from agentrl.gateway.tools import SessionTools


def add_session_routes(app: FastAPI, sessions: dict[str, Session],
                       session_tools: SessionTools | None, model_name: str) -> None:  # fmt: skip
    """The session routes on ``app``, over its ``sessions`` record and the tools it serves
    (None: no tools)."""

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
            return openai_error(f"no tool {name!r} here (tools: {served})", "name", 404)
        arguments = body.get("arguments", {})
        if not isinstance(arguments, dict | str):
            return openai_error("arguments must be an object or a JSON string", "arguments")
        return await session_tools.call(session_id, name, arguments)

    @app.post("/sessions/{session_id}/reward")
    async def set_reward(session_id: str, body: dict[str, Any]) -> dict:
        reward = body.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            return openai_error("reward must be a number", "reward")
        sessions.setdefault(session_id, Session(session_id)).reward = float(reward)
        return {"reward": float(reward)}
