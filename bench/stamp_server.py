"""The approved call of the approval benchmark as an MCP stdio server: `record(n)` notes when it started.

    BENCH_STAMP_FILE=/path python -m bench.stamp_server

A write (no read-only hint), granted `approve`: it runs only after a person's decision. Its first act is to
append `n <time.time()>` to BENCH_STAMP_FILE, so the benchmark reads when the call reached the tool from the
tool itself, as LangGraph's side of bench/approval.py does (bench/langgraph_server/graph.py).
"""

from __future__ import annotations

import os
import time

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("bench-stamp", version="1.0.0")


@mcp.tool(title="Record", structured_output=False, annotations=ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False))
async def record(n: int) -> str:
    """Records that call n started (a write a person approves first)."""
    started = time.time()
    with open(os.environ["BENCH_STAMP_FILE"], "a") as stamps:
        stamps.write(f"{n} {started!r}\n")
    return f"recorded {n}"


if __name__ == "__main__":
    mcp.run("stdio")
