"""A stdio MCP server that says whether it was started with the secret it should have been given,
without ever saying the secret: WITNESS_SECRET (the value under test) is compared with WITNESS_SHA256."""

import hashlib
import os

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("witness")


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                      open_world_hint=False))
def check_env() -> str:
    """Say whether this server's environment holds the secret it was configured with."""
    got = hashlib.sha256(os.environ.get("WITNESS_SECRET", "").encode()).hexdigest()
    return "env ok" if got == os.environ.get("WITNESS_SHA256") else "env missing"


if __name__ == "__main__":
    mcp.run("stdio")
