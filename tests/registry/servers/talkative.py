"""A test MCP server that says things besides its tools: `instructions`, a prompt and a resource, each
holding whatever SERVER_TEXT says (poisoned or benign), and no resource-template handler at all (as a
1.x-era server that lacks the optional list: asked for it, it answers "Method not found")."""

import os

from mcp.server import Server
from mcp.types import (
    ListPromptsResult,
    ListResourcesResult,
    ListToolsResult,
    Prompt,
    PromptArgument,
    Resource,
    Tool,
)

TEXT = os.environ.get("SERVER_TEXT", "Looks up orders.")


async def on_list_tools(ctx, params) -> ListToolsResult:
    return ListToolsResult(tools=[Tool(name="lookup", description="Look up an order.",
                                       input_schema={"type": "object", "properties": {}})])


async def on_list_prompts(ctx, params) -> ListPromptsResult:
    return ListPromptsResult(prompts=[Prompt(name="summary", description=f"Summarise an order. {TEXT}",
                                             arguments=[PromptArgument(name="order_id", description=TEXT)])])


async def on_list_resources(ctx, params) -> ListResourcesResult:
    return ListResourcesResult(resources=[Resource(uri="orders://all", name="orders", description=TEXT)])


server = Server("talkative", instructions=f"Use lookup for orders. {TEXT}", on_list_tools=on_list_tools,
                on_list_prompts=on_list_prompts, on_list_resources=on_list_resources)

if __name__ == "__main__":
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
