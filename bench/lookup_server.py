"""The trivial tools of the per-step benchmark as an MCP stdio server: `lookup(n)` returns 2 KB of text,
`record(n)` stores record n (in this process's memory) and returns it.

    python -m bench.lookup_server

`lookup` is a read (read-only hint), `record` a write (no read-only hint: Airlock classes it `write`, so a
call of it is committed as `dispatched` before it leaves and takes no early path); both plain text (no
structured output), no I/O: what is measured around them is the platform. The LangGraph side calls the
same function (bench.payload.lookup_result) in-process.
The tool is a coroutine because the SDK's MCPServer runs a plain function on a worker thread per call:
that hop (~0.2 ms of a 2.8 ms round trip here) is the tool author's choice, not the platform's cost.
"""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

from bench.payload import lookup_result

mcp = MCPServer("bench-lookup", version="1.0.0")


@mcp.tool(title="Look up", structured_output=False, annotations=ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False))
async def lookup(n: int) -> str:
    """Returns record n (2 KB of text)."""
    return lookup_result(n)


RECORDS: dict[int, str] = {}


@mcp.tool(title="Record", structured_output=False, annotations=ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False))
async def record(n: int) -> str:
    """Stores record n and returns it (2 KB of text)."""
    RECORDS[n] = lookup_result(n)
    return RECORDS[n]


if __name__ == "__main__":
    mcp.run("stdio")
