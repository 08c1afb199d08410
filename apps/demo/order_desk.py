"""The bundled demo MCP server: an order desk (MCP SDK 2.x `MCPServer`).

    python -m apps.demo.order_desk stdio
    python -m apps.demo.order_desk http --port 8765      # Streamable HTTP at /mcp

Its data lives in a small JSON file (ORDER_DESK_DATA, default var/order-desk.json), created
with sample orders on first use, so tests can count side effects such as refunds. Standard
library + `mcp` only: it never imports Django.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import INVALID_PARAMS, ToolAnnotations
from typing_extensions import TypedDict

DATA_ENV = "ORDER_DESK_DATA"
SAMPLE = {
    "customers": {
        "C-100": {"name": "Ada Lovelace", "email": "ada@example.com"},
        "C-200": {"name": "Grace Hopper", "email": "grace@example.com"},
    },
    "orders": {
        "A-1001": {"customer_id": "C-100", "status": "shipped", "total_cents": 4200, "refunded_cents": 0},
        "A-1002": {"customer_id": "C-100", "status": "processing", "total_cents": 1999, "refunded_cents": 0},
        "A-1003": {"customer_id": "C-200", "status": "delivered", "total_cents": 12500, "refunded_cents": 0},
    },
    "refunds": {},  # request_id -> refund
    "deleted_customers": [],
}

class OrderDesk(MCPServer):
    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        """An unknown prompt is the caller's mistake: JSON-RPC "invalid params" (as the MCP specification asks of
        prompts/get), where the SDK's default would answer with code 0."""
        if name not in {prompt.name for prompt in await self.list_prompts()}:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {name}")
        return await super().get_prompt(name, arguments, context)


mcp = OrderDesk(
    "order-desk", version="1.0.0",
    instructions="A demo order desk. Look orders up before changing them; refunds need a unique request_id.",
)


def data_path() -> Path:
    default = Path(__file__).resolve().parents[2] / "var" / "order-desk.json"
    return Path(os.environ.get(DATA_ENV) or default)


@contextmanager
def store(write: bool = False) -> Iterator[dict[str, Any]]:
    """The JSON store under an exclusive lock (several server processes may share one file)."""
    path = data_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else json.loads(json.dumps(SAMPLE))
        yield data
        if write or not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=2))
            tmp.replace(path)


def _order(data: dict[str, Any], order_id: str) -> dict[str, Any]:
    order = data["orders"].get(order_id)
    if order is None:
        raise ToolError(f"No order with id {order_id}.")
    return order


class Order(TypedDict):
    order_id: str
    customer_id: str
    status: str
    total_cents: int
    refunded_cents: int


class OrderList(TypedDict):
    orders: list[Order]


class Refund(TypedDict):
    order_id: str
    amount_cents: int
    request_id: str
    refunded_cents: int
    repeated: bool


class Deletion(TypedDict):
    customer_id: str
    deleted: bool


READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


@mcp.tool(title="Get order status", annotations=READ)
def get_order_status(order_id: str) -> Order:
    """Look up one order by its id (for example A-1001) and return its status, total and refunded amount."""
    with store() as data:
        order = _order(data, order_id)
        return {"order_id": order_id, **order}


@mcp.tool(title="List orders", annotations=READ)
def list_orders(customer_id: str = "", status: str = "") -> OrderList:
    """List orders, optionally only those of one customer id (for example C-100) or with one status."""
    with store() as data:
        orders = [{"order_id": oid, **o} for oid, o in sorted(data["orders"].items())
                  if (not customer_id or o["customer_id"] == customer_id) and (not status or o["status"] == status)]
        return {"orders": orders}


@mcp.tool(title="Refund an order", annotations=ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False))
def refund_order(order_id: str, amount_cents: int, request_id: str) -> Refund:
    """Refund part or all of an order's total, in cents. The request_id makes the refund idempotent:
    repeating a request_id returns the first refund instead of refunding twice."""
    with store(write=True) as data:
        if request_id in data["refunds"]:
            return {**data["refunds"][request_id], "repeated": True}
        order = _order(data, order_id)
        if amount_cents <= 0 or order["refunded_cents"] + amount_cents > order["total_cents"]:
            raise ToolError(f"Cannot refund {amount_cents} cents: the order total is {order['total_cents']} cents "
                            f"and {order['refunded_cents']} cents are already refunded.")
        order["refunded_cents"] += amount_cents
        refund = {"order_id": order_id, "amount_cents": amount_cents, "request_id": request_id,
                  "refunded_cents": order["refunded_cents"]}
        data["refunds"][request_id] = refund
        return {**refund, "repeated": False}


@mcp.tool(title="Delete a customer", annotations=ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False))
def delete_customer(customer_id: str) -> Deletion:
    """Permanently delete a customer and their personal data. Their orders stay, without a customer."""
    with store(write=True) as data:
        if data["customers"].pop(customer_id, None) is None:
            raise ToolError(f"No customer with id {customer_id}.")
        data["deleted_customers"].append(customer_id)
        return {"customer_id": customer_id, "deleted": True}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The Airlock demo order desk MCP server.")
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        mcp.run("stdio")
    else:
        mcp.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
