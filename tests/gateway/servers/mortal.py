"""A stdio MCP server that can be killed mid-session: `die` SIGKILLs its own process during the call."""

import os
import signal

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("mortal")
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)


@mcp.tool(annotations=READ)
def ping() -> str:
    """Answer pong with this server's process id."""
    return f"pong from {os.getpid()}"


@mcp.tool(annotations=READ)
def die() -> str:
    """Stop this server's process at once (SIGKILL), mid-call."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


if __name__ == "__main__":
    mcp.run("stdio")
