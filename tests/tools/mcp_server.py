"""An MCP server for tests/tools/test_mcp.py (stdio): `add` answers, `crash` kills the
server mid-call."""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("test-calc")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def crash() -> str:
    """Die in the middle of the call."""
    os._exit(1)


if __name__ == "__main__":
    server.run()
