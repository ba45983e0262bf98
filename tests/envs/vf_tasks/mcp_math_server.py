"""A small stdio MCP server (the mcp SDK's MCPServer, formerly FastMCP): `add`, `shout` (as much output as asked for) and `crash`,
which kills the server process (an infrastructure failure for the client)."""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("math")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(n: int) -> str:
    """Return n x's."""
    return "x" * n


@server.tool()
def crash() -> str:
    """Exit the server process at once."""
    os._exit(3)


if __name__ == "__main__":
    server.run("stdio")
