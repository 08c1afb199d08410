"""Agent templates: useful starting points that prefill the agent editor. Nothing is saved until
the person presses Create; the grants they suggest follow one rule per risk class, applied to the
active tools of the server the person picks, and never one the policy point would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apps.agents.policy import grant_problem


@dataclass(frozen=True)
class AgentStarter:
    key: str
    title: str
    name: str
    summary: str
    role: str
    instructions: str
    in_scope: str
    out_of_scope: str
    policy_by_risk: dict[str, str] = field(default_factory=dict)  # risk -> auto/approve/deny; absent: not granted
    max_steps: int = 8


STARTERS: tuple[AgentStarter, ...] = (
    AgentStarter(
        key="researcher", title="Read-only researcher", name="Researcher",
        summary="Looks things up and reports back. Gets the server's read tools on auto, and nothing that writes.",
        role="a read-only researcher",
        instructions="Answer the question with what the tools return. Name the record or source behind each fact. "
                     "If the tools cannot answer it, say so rather than guess.",
        in_scope="Looking up records and summarising what they say.",
        out_of_scope="Changing anything: refunds, edits, deletions, messages to customers.",
        policy_by_risk={"read": "auto"},
    ),
    AgentStarter(
        key="refunds", title="Refunds agent with held writes", name="Refunds",
        summary="Reads freely; every write waits for a person in the inbox; dangerous tools are denied.",
        role="a refund clerk who checks each order first",
        instructions="Check the order before acting: its status, its total and what was already refunded. "
                     "Refund only what the request asks for and the order allows, with a short reason.",
        in_scope="Order lookups and refunds on existing orders.",
        out_of_scope="Deleting customers, changing prices, anything outside refunds.",
        policy_by_risk={"read": "auto", "write": "approve", "dangerous": "deny"},
    ),
    AgentStarter(
        key="triage", title="Triage agent", name="Triage",
        summary="Reads the request and the records it mentions, then says what should happen and who should do it.",
        role="the first reader of every request",
        instructions="Work out what the request is about and look up the records it mentions. Finish with one "
                     "line: what should be done next, and why.",
        in_scope="Understanding requests and looking up the records they mention.",
        out_of_scope="Doing the work itself: any change to a record.",
        policy_by_risk={"read": "auto"}, max_steps=6,
    ),
)


def agent_starter(key: str) -> AgentStarter | None:
    return next((s for s in STARTERS if s.key == key), None)


def suggested_grants(starter: AgentStarter, tools) -> list[tuple[Any, str]]:
    """(tool, policy) for each active tool the starter's rule grants, skipping any the policy
    point would refuse to save (e.g. auto on a third-party write)."""
    grants = []
    for tool in tools:
        policy = starter.policy_by_risk.get(tool.risk)
        if policy is None or tool.state != "active":
            continue
        if grant_problem(tool=tool.qualified_name, risk=tool.risk, state=tool.state,
                         trust_tier=tool.server.trust_tier, policy=policy):
            policy = "approve"
        grants.append((tool, policy))
    return grants


def starter_values(starter: AgentStarter) -> dict[str, Any]:
    return {"name": starter.name, "role": starter.role,
            "instructions": starter.instructions, "in_scope": starter.in_scope,
            "out_of_scope": starter.out_of_scope, "max_steps": starter.max_steps}
