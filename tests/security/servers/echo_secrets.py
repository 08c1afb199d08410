"""A stdio MCP server that quotes back what it was configured with, as careless servers do in their
errors: `report` answers an error result quoting ECHO_SECRET (plain, URL-encoded and inside a Basic
header), `sync` fails the request with a JSON-RPC error quoting it, and both print it to stderr."""

import base64
import os
import sys
from urllib.parse import quote

from mcp import MCPError
from mcp.server import Server
from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool, ToolAnnotations

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def _quoted() -> str:
    secret = os.environ.get("ECHO_SECRET", "")
    basic = base64.b64encode(f"airlock:{secret}".encode()).decode()
    return f"upstream refused key {secret} (sent as ?key={quote(secret, safe='')}, Authorization: Basic {basic})"


async def on_list_tools(ctx, params) -> ListToolsResult:
    empty = {"type": "object", "properties": {}}
    return ListToolsResult(tools=[Tool(name="report", description="Fetch the report.", input_schema=empty,
                                       annotations=READ),
                                  Tool(name="sync", description="Sync upstream.", input_schema=empty,
                                       annotations=READ)])


async def on_call_tool(ctx, params) -> CallToolResult:
    print(f"config dump: ECHO_SECRET={os.environ.get('ECHO_SECRET', '')}", file=sys.stderr, flush=True)
    if params.name == "sync":
        raise MCPError(-32603, f"sync failed: {_quoted()}")
    return CallToolResult(content=[TextContent(type="text", text=f"report failed: {_quoted()}")], is_error=True)


server = Server("echo", on_list_tools=on_list_tools, on_call_tool=on_call_tool)

if __name__ == "__main__":
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
