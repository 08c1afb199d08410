"""A test MCP server whose resources come from a JSON file (RESOURCES_FILE), re-read on every list and read:
change the file between syncs or runs to simulate a changed definition, changed content, a removal or poison.
RESOURCES_JSON instead holds them in the environment (a sandboxed third-party server sees no outside file).

File: [{"uri", "name", "description"?, "mimeType"?, "text" | "blob" (base64), "annotations"?}, ...]
"""

import json
import os

from mcp import MCPError
from mcp.server import Server
from mcp.types import (
    BlobResourceContents,
    ListResourcesResult,
    ReadResourceResult,
    Resource,
    TextResourceContents,
)


def _items() -> list[dict]:
    if "RESOURCES_JSON" in os.environ:
        return json.loads(os.environ["RESOURCES_JSON"])
    with open(os.environ["RESOURCES_FILE"]) as f:
        return json.load(f)


async def on_list_resources(ctx, params) -> ListResourcesResult:
    return ListResourcesResult(resources=[
        Resource.model_validate({k: v for k, v in item.items() if k not in ("text", "blob")}) for item in _items()])


async def on_read_resource(ctx, params) -> ReadResourceResult:
    for item in _items():
        if item["uri"] == str(params.uri):
            mime = item.get("mimeType")
            if "blob" in item:
                return ReadResourceResult(contents=[BlobResourceContents(uri=item["uri"], mime_type=mime,
                                                                         blob=item["blob"])])
            return ReadResourceResult(contents=[TextResourceContents(uri=item["uri"], mime_type=mime,
                                                                     text=item.get("text", ""))])
    raise MCPError(-32002, f"Resource not found: {params.uri}")


server = Server("resource-files", on_list_resources=on_list_resources, on_read_resource=on_read_resource)

if __name__ == "__main__":
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
