"""A test MCP server whose tools come from a JSON file (TOOLS_FILE), re-read on every list:
change the file between syncs to simulate drift, removals, bad names or poisoned text.

File: [{"name": ..., "description": ..., "annotations": {...}?, "input_schema": {...}?}, ...]
"""

import json
import os

from mcp.server import Server
from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool, ToolAnnotations


def _tools() -> list[Tool]:
    with open(os.environ["TOOLS_FILE"]) as f:
        items = json.load(f)
    return [Tool(name=t["name"], description=t.get("description", ""),
                 input_schema=t.get("input_schema") or {"type": "object", "properties": {}},
                 annotations=ToolAnnotations(**t["annotations"]) if t.get("annotations") else None)
            for t in items]


async def on_list_tools(ctx, params) -> ListToolsResult:
    return ListToolsResult(tools=_tools())


async def on_call_tool(ctx, params) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=f"called {params.name}")])


server = Server("configurable", on_list_tools=on_list_tools, on_call_tool=on_call_tool)

if __name__ == "__main__":
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
