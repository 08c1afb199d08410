"""An MCP server of our own (SDK 2.x) that asks the host during a call: `refund_asking` elicits the amount
with a form, `summarise` asks the host to run a model (sampling). Written with resolvers, so the SDK speaks
either protocol era: mid-call requests (<= 2025-11-25) or an `InputRequiredResult` the client answers and
retries (2026-07-28). `python -m tests.runs.asking_server`."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Resolve
from mcp.server.mcpserver.resolve import Elicit, Sample
from mcp.types import CreateMessageResult, SamplingMessage, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

mcp = MCPServer("asking", version="1.0.0")


class Amount(BaseModel):
    amount_cents: int = Field(description="How much to refund, in cents")
    reason: str = Field(default="", description="Why")


def ask_amount(order_id: str) -> Elicit[Amount]:
    return Elicit(f"How much should {order_id} be refunded?", Amount)


def ask_summary(text: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarise: {text}"))],
                  max_tokens=100, system_prompt="You write one-line summaries.")


@mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
async def refund_asking(order_id: str, amount: Annotated[ElicitationResult[Amount], Resolve(ask_amount)]) -> str:
    """Refunds an order; asks a person how much."""
    if amount.action == "accept":
        return f"refunded {amount.data.amount_cents} cents on {order_id} ({amount.data.reason})"
    return f"no refund on {order_id}: the person chose {amount.action}"


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
async def summarise(text: str, summary: Annotated[CreateMessageResult, Resolve(ask_summary)]) -> str:
    """Summarises a text with the host's model."""
    return f"summary: {getattr(summary.content, 'text', summary.content)}"


def refuse_discovery() -> None:
    """`ASKING_ERA=legacy`: answer `server/discover` with "method not found", as a server of the handshake era
    does, so the client falls back to `initialize` (the SDK's own server would speak either)."""
    real_in = os.fdopen(os.dup(0), "rb")
    read_end, write_end = os.pipe()
    os.dup2(read_end, 0)

    def pump() -> None:
        with os.fdopen(write_end, "wb") as out:
            for line in real_in:
                message = json.loads(line) if line.strip() else {}
                if isinstance(message, dict) and message.get("method") == "server/discover":
                    refusal = {"jsonrpc": "2.0", "id": message.get("id"),
                               "error": {"code": -32601, "message": "Method not found"}}
                    sys.stdout.buffer.write(json.dumps(refusal).encode() + b"\n")
                    sys.stdout.buffer.flush()
                    continue
                out.write(line)
                out.flush()

    threading.Thread(target=pump, daemon=True).start()


if __name__ == "__main__":
    if os.environ.get("ASKING_ERA") == "legacy":
        refuse_discovery()
    mcp.run("stdio")
