"""Tools built into Airlock rather than served over MCP: `human.ask`, an agent's question to people.

Each organisation has a `human` server (transport `builtin`) holding the tool, so it is granted, offered,
decided by policy and shown in the trace exactly like an MCP tool. Nothing ever connects to it: the run
engine answers its calls by asking a person (apps/runs/engine/asking.py).
"""

from __future__ import annotations

from uuid import UUID

from django.utils import timezone

from apps.registry.definitions import canonical_definition, definition_hash
from apps.registry.models import McpServer, Risk, RiskSource, ServerStatus, Tool, ToolState, Transport, TrustTier

HUMAN_SERVER = "human"
ASK = "ask"
ASK_TOOL = f"{HUMAN_SERVER}.{ASK}"
ASK_GROUPS = ("approvers", "admins", "builders", "members")
ASK_DESCRIPTION = (
    "Ask a person a question and wait for their answer (the run pauses until someone answers or the question "
    "expires). Use it when you lack a fact or a decision only a person can give; do not guess amounts, "
    "recipients or consent. `ask` chooses who is asked: approvers (default), admins, builders or members.")
ASK_SCHEMA = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "The question, in full."},
        "ask": {"type": "string", "enum": list(ASK_GROUPS), "default": "approvers",
                "description": "Who should answer."},
        "choices": {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 10,
                    "description": "Optional answers to pick from."},
    },
    "required": ["question"],
    "additionalProperties": False,
}


def add_builtin_tools(*, org_id: UUID | str) -> Tool:
    """Creates (or finds) the org's `human` server and its `human.ask` tool, pinned and active. Writes
    McpServer and Tool rows; idempotent. Called when an organisation is created (and by a data migration)."""
    server, _ = McpServer.objects.get_or_create(
        org_id=org_id, name=HUMAN_SERVER,
        defaults={"transport": Transport.BUILTIN, "trust_tier": TrustTier.INTERNAL, "status": ServerStatus.OK,
                  "trusted_output": True, "description": "Built into Airlock: questions to people."})
    definition = canonical_definition(name=ASK, title="Ask a person", description=ASK_DESCRIPTION,
                                      input_schema=ASK_SCHEMA, output_schema=None, annotations=None)
    digest, now = definition_hash(definition), timezone.now()
    tool, _ = Tool.objects.get_or_create(
        org_id=org_id, server=server, name=ASK,
        defaults={"qualified_name": ASK_TOOL, "title": "Ask a person", "description": ASK_DESCRIPTION,
                  "input_schema": ASK_SCHEMA, "risk": Risk.READ, "risk_source": RiskSource.ADMIN,
                  "state": ToolState.ACTIVE, "definition": definition, "definition_hash": digest,
                  "pinned_hash": digest, "pinned_definition": definition, "pinned_at": now,
                  "pinned_by": "built into Airlock", "trusted_output": True, "last_seen_at": now})
    return tool


def is_builtin(tool: dict | None) -> bool:
    """Whether a run snapshot's tool is `human.ask` (answered by a person, never sent anywhere)."""
    return bool(tool) and tool.get("qualified_name") == ASK_TOOL and tool.get("server") == HUMAN_SERVER
