"""Factories for agents tests: registry tools as an admin would have set them up, connections, agents."""

from __future__ import annotations

import hashlib
import itertools

from apps.accounts.actors import member_actor
from apps.agents import services
from apps.registry.models import McpServer, Resource, Tool
from tests.factories import owner_of

_seq = itertools.count(1)

ORDER_TOOLS = {
    "get_order_status": ("read", {"order_id": {"type": "string"}}),
    "list_orders": ("read", {"status": {"type": "string"}}),
    "refund_order": ("write", {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"},
                               "reason": {"type": "string"}}),
    "delete_customer": ("dangerous", {"customer_id": {"type": "string"}}),
}


def make_server(org, name: str = "orders", tier: str = "internal") -> McpServer:
    return McpServer.objects.create(org=org, name=name, transport="stdio", command="demo", trust_tier=tier,
                                    status="ok")


def make_tool(server: McpServer, name: str, risk: str = "read", state: str = "active", pinned: bool = True,
              properties: dict | None = None) -> Tool:
    digest = hashlib.sha256(f"{server.id}:{name}:{next(_seq)}".encode()).hexdigest()
    schema = {"type": "object", "properties": properties or {}}
    return Tool.objects.create(org_id=server.org_id, server=server, name=name, qualified_name=f"{server.name}.{name}",
                               description=f"{name} tool", input_schema=schema, risk=risk, state=state,
                               definition_hash=digest, pinned_hash=digest if pinned else "")


def make_resource(server: McpServer, uri: str, name: str = "", state: str = "active", pinned: bool = True,
                  description: str = "") -> Resource:
    """A resource row as a sync leaves it (its content lives on the server: a run reading it needs a real one)."""
    digest = hashlib.sha256(f"{server.id}:{uri}:{next(_seq)}".encode()).hexdigest()
    return Resource.objects.create(org_id=server.org_id, server=server, uri=uri, name=name or uri.rsplit("/", 1)[-1],
                                   description=description, state=state, definition={"uri": uri},
                                   definition_hash=digest, pinned_hash=digest if pinned else "")


def order_desk(org, tier: str = "internal") -> dict[str, Tool]:
    """The demo order-desk server's four tools, active and pinned."""
    server = make_server(org, "orders", tier)
    return {name: make_tool(server, name, risk, properties=props) for name, (risk, props) in ORDER_TOOLS.items()}


def owner_actor(org):
    return member_actor(owner_of(org))


def scripted_connection(org, name: str = "Scripted"):
    return services.create_connection(actor=owner_actor(org), name=name, provider="scripted")


def make_agent(org, name: str | None = None, connection=None, grants: list | None = None, **values):
    connection = connection or scripted_connection(org, f"Scripted {next(_seq)}")
    return services.create_agent(actor=owner_actor(org), name=name or f"Agent {next(_seq)}",
                                 connection_id=connection.id, grants=grants or [], **values)
