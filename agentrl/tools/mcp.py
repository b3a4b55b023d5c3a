"""MCP servers as tools: every tool of a Model Context Protocol server becomes a BaseTool.

    tools:
      - type: mcp
        command: [python, my_server.py]        # a stdio server the rollout starts; or
        url: http://127.0.0.1:8000/mcp         # a streamable-HTTP server, session-based
                                               # (2025 revisions) or stateless (2026-07-28)
        tools: [add, search]                   # optional: which of its tools (default all)
        timeout: 30                            # seconds per call (the engine's tool_timeout
                                               # bounds it too)

The tool loader (agentrl/tools/loader.py) lists the server's tools when it reads the config
(their names, descriptions and input schemas become the OpenAI schemas the model sees) and
builds one ``McpTool`` per tool, all sharing one ``McpConnection``. The connection is
opened lazily in the rollout's event loop and owned by one background task (MCP's
transports are task-bound), which serves the calls in order. A server that dies or fails
mid-episode makes the call a tool error the model reads (the engine's usual policy); the
next call starts a new connection. Needs the ``mcp`` package (the ``mcp`` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from agentrl.tools.base import BaseTool
from agentrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

logger = logging.getLogger(__name__)
T = TypeVar("T")
MCP_EXTRA = "install the mcp package (pip install mcp) to use tool config entries of type mcp"


def _run_in_thread(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run ``coro`` to completion in a fresh event loop on its own thread (the loader is
    synchronous and may be called while another loop runs)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(asyncio.wait_for(coro, timeout))
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            result["error"] = err

    thread = threading.Thread(target=target, name="agentrl-mcp-list", daemon=True)
    thread.start()
    thread.join(timeout + 5)
    if "error" in result:
        raise result["error"]
    if "value" not in result:
        raise TimeoutError(f"no answer within {timeout:g} s")
    return result["value"]


def _retrieve(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug("MCP connection ended: %r", task.exception())


class McpConnection:
    """One MCP server (stdio command or streamable-HTTP URL); see the module docstring."""

    def __init__(self, label: str, command: Sequence[str] | None = None,
                 url: str | None = None, timeout: float = 30.0) -> None:
        if (command is None) == (url is None):
            raise ValueError(f"{label}: give exactly one of 'command' (stdio) and 'url'")
        self.label = label
        self.command = [str(c) for c in command] if command is not None else None
        self.url = url
        self.timeout = float(timeout)
        self._task: asyncio.Task | None = None
        self._queue: asyncio.Queue | None = None
        self._ready: asyncio.Event | None = None

    @contextlib.asynccontextmanager
    async def _session(self):
        try:
            from mcp import ClientSession
        except ImportError as err:
            raise ImportError(MCP_EXTRA) from err
        if self.command is not None:
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            command = [sys.executable if c == "python" else c for c in self.command]
            transport = stdio_client(StdioServerParameters(command=command[0], args=command[1:]))
        else:
            from mcp.client.streamable_http import streamable_http_client

            transport = streamable_http_client(self.url)
        async with transport as streams, ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            yield session

    async def list_tools(self) -> list[Any]:
        """The server's tools (a short connection of its own)."""
        async with self._session() as session:
            return list((await session.list_tools()).tools)

    async def _serve(self) -> None:
        async with self._session() as session:
            self._ready.set()
            while True:
                item = await self._queue.get()
                if item is None:
                    return
                name, arguments, future = item
                try:
                    result = await session.call_tool(name, arguments)
                except Exception as err:  # the server failed this call (or died)
                    if not future.done():
                        future.set_exception(err)
                    raise
                if not future.done():
                    future.set_result(result)

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The server's result of ``name(arguments)``; raises ConnectionError when the
        server is gone (the next call reconnects)."""
        if self._task is None or self._task.done():
            self._queue, self._ready = asyncio.Queue(), asyncio.Event()
            self._task = asyncio.create_task(self._serve(), name=f"mcp-{self.label}")
            self._task.add_done_callback(_retrieve)  # its error is the call's, not the loop's
        future = asyncio.get_running_loop().create_future()
        await self._queue.put((name, arguments, future))
        await asyncio.wait({future, self._task}, timeout=self.timeout,
                           return_when=asyncio.FIRST_COMPLETED)
        if future.done():
            if future.exception() is not None:
                self._task = None  # the connection may be tearing down: the next call starts anew
            return future.result()
        if self._task.done():
            error = self._task.exception() if not self._task.cancelled() else None
            self._task = None
            raise ConnectionError(f"MCP server {self.label} is gone: {error!r}")
        future.cancel()
        raise TimeoutError(f"MCP server {self.label}: no answer within {self.timeout:g} s")

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            await self._queue.put(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 10)


class McpTool(BaseTool):
    """One tool of an MCP server; ``config``: ``connection`` (an McpConnection) and
    ``mcp_tool`` (the server's name for it)."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)
        self.connection: McpConnection = self.config["connection"]
        self.mcp_tool = str(self.config["mcp_tool"])

    async def execute(self, instance_id: str, parameters: dict[str, Any],
                      **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        try:
            result = await self.connection.call(self.mcp_tool, dict(parameters))
        except (ConnectionError, TimeoutError) as err:
            return ToolResponse(text=f"Error: {err}"), 0.0, {"tool_error": "mcp_server"}
        except Exception as err:  # noqa: BLE001 - any MCP failure is an answer to the model
            return (ToolResponse(text=f"Error: MCP call failed: {err}"), 0.0,
                    {"tool_error": "mcp_server"})
        texts = [getattr(part, "text", "") for part in (result.content or [])]
        text = "\n".join(t for t in texts if t) or "(no output)"
        if getattr(result, "is_error", False) or getattr(result, "isError", False):
            return ToolResponse(text=f"Error: {text}"), 0.0, {"tool_error": "mcp_tool_error"}
        return ToolResponse(text=text), 0.0, {}

    async def aclose(self) -> None:
        await self.connection.aclose()


def mcp_entries(label: str, entry: dict[str, Any]) -> list[tuple[str, dict, dict]]:
    """A ``type: mcp`` tool-config entry as loader entries: ``(class path, config, OpenAI
    schema dict)`` for each selected tool of the server, sharing one connection."""
    unknown = set(entry) - {"type", "command", "url", "tools", "timeout"}
    if unknown:
        raise ValueError(f"{label}: unknown keys {sorted(unknown)}")
    command = entry.get("command")
    if isinstance(command, str):
        command = command.split()
    connection = McpConnection(label, command, entry.get("url"), entry.get("timeout", 30.0))
    listed = _run_in_thread(connection.list_tools(), connection.timeout)
    wanted = entry.get("tools")
    names = [t.name for t in listed]
    if wanted is not None:
        missing = sorted(set(wanted) - set(names))
        if missing:
            raise ValueError(f"{label}: the server has no tools {missing} (it has {names})")
    out = []
    for tool in listed:
        if wanted is not None and tool.name not in wanted:
            continue
        schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {}
        parameters = {"type": "object", "properties": dict(schema.get("properties") or {}),
                      "required": list(schema.get("required") or [])}
        out.append(("agentrl.tools.mcp.McpTool",
                    {"connection": connection, "mcp_tool": tool.name},
                    {"type": "function", "function": {
                        "name": tool.name, "description": tool.description or tool.name,
                        "parameters": parameters}}))
    return out


__all__ = ["McpConnection", "McpTool", "mcp_entries"]
