"""A stdio MCP server standing in for an open-world web tool: `fetch_url` and `search` answer from the
pages in WEB_PAGES (JSON: {url or query: text}) instead of the internet, so a test decides what the
"web" says (an attacker's page) without any network."""

import json
import os

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("web")
OPEN_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)


def _pages() -> dict[str, str]:
    return json.loads(os.environ.get("WEB_PAGES") or "{}")


@mcp.tool(annotations=OPEN_READ)
def fetch_url(url: str) -> str:
    """Fetch a web page and return its text."""
    return _pages().get(url, f"404: nothing at {url}")


@mcp.tool(annotations=OPEN_READ)
def search(query: str) -> str:
    """Search the web and return the top results."""
    return _pages().get(query, f"No results for {query}.")


if __name__ == "__main__":
    mcp.run("stdio")
