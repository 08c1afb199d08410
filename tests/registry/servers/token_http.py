"""An MCP server over Streamable HTTP that requires `Authorization: Bearer <MCP_TOKEN>`."""

import os
import sys

import uvicorn
from mcp.server import MCPServer
from starlette.responses import JSONResponse

mcp = MCPServer("guarded")


@mcp.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


inner = mcp.streamable_http_app()


async def app(scope, receive, send):
    if scope["type"] == "http":
        headers = dict(scope["headers"])
        if headers.get(b"authorization") != f"Bearer {os.environ['MCP_TOKEN']}".encode():
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
    await inner(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="on")
