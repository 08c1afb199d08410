"""The demo order desk plus one slow write tool, for killing things while a call is in flight.

    python -m tests.reliability.slow_desk stdio

`slow_refund` records its side effect first (one entry per execution in the store's
`slow_calls`, never deduplicated, so a call executed twice shows twice), then takes
SLOW_DESK_SECONDS (default 1.5) to answer. `slow_lookup`, a read, counts its executions the
same way (in `slow_reads`) and takes as long.
"""

from __future__ import annotations

import asyncio
import os

from mcp.types import ToolAnnotations

from apps.demo.order_desk import main, mcp, store


@mcp.tool(title="Refund slowly", annotations=ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False))
async def slow_refund(order_id: str, amount_cents: int, request_id: str) -> str:
    """Refund an order, slowly. Every call is a new refund."""
    with store(write=True) as data:
        data.setdefault("slow_calls", []).append(request_id)
    await asyncio.sleep(float(os.environ.get("SLOW_DESK_SECONDS", "1.5")))
    return f"Refunded {amount_cents} cents on {order_id} ({request_id})."


@mcp.tool(title="Look up slowly", annotations=ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False))
async def slow_lookup(order_id: str, request_id: str) -> str:
    """Look an order up, slowly. Changes nothing."""
    with store(write=True) as data:
        data.setdefault("slow_reads", []).append(request_id)
    await asyncio.sleep(float(os.environ.get("SLOW_DESK_SECONDS", "1.5")))
    return f"Order {order_id} is open ({request_id})."


if __name__ == "__main__":
    main()
