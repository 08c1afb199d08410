"""The demo's agents and crews on the bundled order desk (server `orders`), all on the scripted
provider: a triage agent (reads auto), a refunds agent (refund held for approval, customer
deletion denied), a sequential "Refund desk" crew and a supervised one.

Idempotent: whatever already exists by name is left as it is.
"""

from __future__ import annotations

from apps.accounts.actors import Actor
from apps.agents import selectors as agents
from apps.agents import services as agent_services
from apps.agents.models import Agent, LlmConnection
from apps.crews import services as crew_services
from apps.crews.models import Crew

CONNECTION = "Scripted (demo)"
TRIAGE, REFUNDS, SUPERVISOR = "Order triage", "Refunds", "Desk supervisor"
REFUND_DESK, SUPERVISED_DESK = "Refund desk", "Order desk (supervised)"
ORDER_TOOLS = ("orders.get_order_status", "orders.list_orders", "orders.refund_order", "orders.delete_customer")
LOOK_UP = {"tool": "orders.get_order_status", "args": {"order_id": "{{input.order_id}}"}}
REFUND = {"tool": "orders.refund_order", "args": {"order_id": "{{input.order_id}}",
                                                  "amount_cents": "{{input.amount_cents}}",
                                                  "request_id": "demo-refund-{{input.order_id}}"}}

AGENTS = [
    {"name": TRIAGE, "role": "order desk triage",
     "instructions": "Look up the order and say whether it can be refunded (shipped or delivered, not fully refunded).",
     "in_scope": "Reading orders and their status.", "out_of_scope": "Refunds, deleting customers, anything else.",
     "script": [{"call": [LOOK_UP]},
                {"say": "Order {{input.order_id}}, as the order desk has it:\n{{result}}\nSTATUS: done\n"
                        "REASON: looked it up"}],
     "grants": [{"tool": "orders.get_order_status", "policy": "auto"},
                {"tool": "orders.list_orders", "policy": "auto"}]},
    {"name": REFUNDS, "role": "refund clerk",
     "instructions": "Refund what the triage found refundable, never more than the order total.",
     "in_scope": "Refunding orders.", "out_of_scope": "Deleting customers or their data.",
     "script": [{"call": [LOOK_UP]}, {"call": [REFUND]},
                {"say": "The refund of order {{input.order_id}}, as the order desk answered it:\n{{result}}\n"
                        "STATUS: done\nREASON: the refund tool's answer is quoted above"}],
     "grants": [{"tool": "orders.get_order_status", "policy": "auto"},
                {"tool": "orders.refund_order", "policy": "approve"},
                {"tool": "orders.delete_customer", "policy": "deny"}]},
    {"name": SUPERVISOR, "role": "order desk supervisor",
     "instructions": "Send lookups to Order triage and refunds to Refunds; finish when the request is handled.",
     "in_scope": "Choosing who handles a request.", "out_of_scope": "Doing the work yourself.",
     "script": [{"route": TRIAGE}, {"route": REFUNDS}, {"route": "FINISH"}], "grants": []},
]
INPUTS = [{"name": "order_id", "type": "string", "required": True, "description": "e.g. A-1001"},
          {"name": "amount_cents", "type": "integer", "required": True, "description": "the refund, in cents"}]


def seed_agents_and_crews(actor: Actor) -> bool:
    """Writes the demo connection, agents and crews that are missing. Returns whether it wrote anything.

    Needs the order desk's tools in the registry; without them it writes nothing.
    """
    present = {t.qualified_name for t in agents.grantable_tools(org_id=actor.org_id, server="orders")}
    if not set(ORDER_TOOLS) <= present:
        return False
    created = False
    connection = LlmConnection.objects.filter(org_id=actor.org_id, name=CONNECTION).first()
    if connection is None:
        connection = agent_services.create_connection(actor=actor, name=CONNECTION, provider="scripted")
        created = True
    by_name = {}
    for spec in AGENTS:
        agent = Agent.objects.filter(org_id=actor.org_id, name=spec["name"]).first()
        if agent is None:
            agent = agent_services.create_agent(actor=actor, connection_id=connection.id, **spec)
            created = True
        by_name[spec["name"]] = agent
    if not Crew.objects.filter(org_id=actor.org_id, name=REFUND_DESK).exists():
        crew_services.create_crew(
            actor=actor, name=REFUND_DESK, process="sequential", inputs=INPUTS,
            description="Triage looks the order up; Refunds refunds it, which waits for an approver.",
            tasks=[{"name": "triage", "agent_id": by_name[TRIAGE].id,
                    "description": "Look up order {order_id} and say whether it can be refunded."},
                   {"name": "refund", "agent_id": by_name[REFUNDS].id, "context": ["triage"],
                    "description": "Refund {amount_cents} cents on order {order_id} if triage found it refundable."}])
        created = True
    if not Crew.objects.filter(org_id=actor.org_id, name=SUPERVISED_DESK).exists():
        crew_services.create_crew(
            actor=actor, name=SUPERVISED_DESK, process="supervisor", inputs=INPUTS,
            description="A supervisor routes between triage and refunds until the request is handled.",
            supervisor_agent_id=by_name[SUPERVISOR].id, members=[by_name[TRIAGE].id, by_name[REFUNDS].id])
        created = True
    return created
