"""Runs tests: the bundled order desk (a real stdio MCP server with its own JSON store per test),
scripted agents and crews on it, and helpers to read the store's side effects."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.crews import services as crew_services
from apps.registry import services as registry_services
from apps.registry.pool import pool

ROOT = Path(__file__).resolve().parents[2]
LOOK_UP = {"tool": "orders.get_order_status", "args": {"order_id": "{{input.order_id}}"}}
REFUND = {"tool": "orders.refund_order", "args": {"order_id": "{{input.order_id}}",
                                                  "amount_cents": "{{input.amount_cents}}",
                                                  "request_id": "refund-{{input.order_id}}"}}
INPUTS = [{"name": "order_id", "type": "string", "required": True},
          {"name": "amount_cents", "type": "integer", "required": True}]


@dataclass
class Desk:
    actor: object
    data: Path
    connection: object

    def store(self) -> dict:
        return json.loads(self.data.read_text()) if self.data.exists() else {}

    def refunds(self) -> dict:
        return self.store().get("refunds", {})

    def agent(self, name: str, script: list, grants: list, **values):
        return agent_services.create_agent(actor=self.actor, name=name, connection_id=self.connection.id,
                                           script=script, grants=grants, **values)

    def sequential(self, name: str, tasks: list[tuple[str, object, str, list]], **values):
        return crew_services.create_crew(
            actor=self.actor, name=name, process="sequential", inputs=values.pop("inputs", INPUTS),
            tasks=[{"name": n, "agent_id": a.id, "description": d, "context": c} for n, a, d, c in tasks], **values)

    def refund_desk(self, *, refund_policy: str = "approve", name: str = "Refund desk", **values):
        triage = self.agent(f"{name} triage", [{"call": [LOOK_UP]}, {"say": "Refundable.\nSTATUS: done\nREASON: ok"}],
                            [{"tool": "orders.get_order_status", "policy": "auto"}])
        refunds = self.agent(f"{name} refunds", [{"call": [LOOK_UP]}, {"call": [REFUND]},
                                                 {"say": "Refunded.\nSTATUS: done\nREASON: made the refund"}],
                             [{"tool": "orders.get_order_status", "policy": "auto"},
                              {"tool": "orders.refund_order", "policy": refund_policy},
                              {"tool": "orders.delete_customer", "policy": "deny"}])
        return self.sequential(name, [("triage", triage, "Look up order {order_id}.", []),
                                      ("refund", refunds, "Refund {amount_cents} cents on {order_id}.", ["triage"])],
                               **values)


@pytest.fixture
def actor(owner):
    return member_actor(owner)


@pytest.fixture
def desk(actor, tmp_path):
    data = tmp_path / "orders.json"
    server = registry_services.create_server(
        actor=actor, name="orders", transport="stdio", trust_tier="internal", command=sys.executable,
        args=["-m", "apps.demo.order_desk", "stdio"], cwd=str(ROOT), env={"ORDER_DESK_DATA": str(data)}, sync=False)
    registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    yield Desk(actor, data, connection)
    pool.close_all()
