"""Try one agent on its own: a run with no crew, from the agent's page or the API.

A run is the unit the engine, the ledger, approvals and costs all understand, and every run is driven
from its snapshot alone. So a trial is an ordinary run whose snapshot holds a one-task sequential crew made
for it (named "Try <agent>", default limits, one approver) and whose `crew` is empty: nothing is written
to the crews table, so no crew list has to hide it, and the agent's grants, the policy point, held writes,
budgets and cost records apply unchanged. `origin` says "trial"; `snapshot["trial"]` names the agent.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction

from apps.accounts.actors import Actor
from apps.agents import selectors as agents
from apps.audit import services as audit
from apps.core.errors import ValidationFailed
from apps.costs import selectors as budgets
from apps.runs.ledger import append_event, publish_status
from apps.runs.models import Run, RunOrigin
from apps.runs.queue import enqueue_on_commit as _enqueue_on_commit
from apps.runs.services import tool_snapshot

MAX_MESSAGE = 20_000
TASK = "try"


def trial_snapshot(agent: Any) -> dict[str, Any]:
    """The agent (prompt, grants), the tools it may use, and a one-task crew around it."""
    snap = {**agents.agent_snapshot(agent), "id": str(agent.id), "version": agent.version,
            "system_prompt": agents.system_prompt(agent)}
    tools = {grant.tool.qualified_name: tool_snapshot(grant.tool) for grant in agent.grants.all()}
    crew = {"id": None, "version": None, "name": f"Try {agent.name}",
            "description": f"{agent.name} tried on its own, without a crew.", "process": "sequential",
            "supervisor": None, "members": [],
            "tasks": [{"name": TASK, "description": "{message}", "agent": agent.name, "agent_id": str(agent.id),
                       "context": []}],
            "routing_rules": [], "inputs": [{"name": "message", "type": "string", "required": True,
                                              "description": "What to ask the agent."}],
            "max_hops": 1, "max_tool_calls": 50, "timeout_s": 900, "token_budget": None, "budget_usd": None,
            "approvals_required": 1, "approval_ttl_hours": 24, "separation_of_duties": False, "enabled": True}
    return {"crew": crew, "agents": {str(agent.id): snap}, "tools": tools, "trial": {"agent_id": str(agent.id)},
            "versions": {"crew": None, "agents": {str(agent.id): agent.version}}}


def start_trial(*, actor: Actor, agent_id: UUID | str, message: str, parent: Run | None = None,
                origin: str = RunOrigin.TRIAL, enqueue: bool = True) -> Run:
    """Starts a one-agent run with `message` as its input. Raises ValidationFailed (`message`, a disabled
    agent, a budget), NotFound, PermissionDenied."""
    actor.require("runs.start")
    agent = agents.get_agent(org_id=actor.org_id, agent_id=agent_id)
    text = (message or "").strip() if isinstance(message, str) else ""
    if not text:
        raise ValidationFailed("Say what to ask the agent.", {"message": "Required."})
    if len(text) > MAX_MESSAGE:
        raise ValidationFailed("The message is too long.", {"message": f"At most {MAX_MESSAGE} characters."})
    if not agent.enabled:
        raise ValidationFailed(f"The agent {agent.name!r} is disabled. Enable it first.",
                               {"agent": "This agent is disabled."})
    refusal = budgets.start_refusal(org_id=actor.org_id, crew_id=None, agent_ids=[agent.id])
    if refusal:
        raise ValidationFailed(refusal, {"agent": refusal})
    snapshot = trial_snapshot(agent)
    inputs = {"message": text}
    with transaction.atomic():
        run = Run.objects.create(org_id=actor.org_id, crew=None, crew_name=snapshot["crew"]["name"], inputs=inputs,
                                 snapshot=snapshot, started_by_id=actor.user_id, started_by_label=actor.label,
                                 state={"task_index": 0, "outputs": {}}, origin=origin, parent=parent)
        append_event(run.id, "run.queued", crew=run.crew_name, inputs=inputs, by=actor.label, origin=origin,
                     agent=agent.name, parent_id=str(parent.id) if parent else None)
        audit.record(org_id=actor.org_id, actor=actor, action="run.started", target=run, target_label=run.crew_name,
                     data={"inputs": inputs, "origin": origin, "agent_id": str(agent.id),
                           "agent_version": agent.version})
        publish_status(run)
        if enqueue:
            _enqueue_on_commit(run.id)
    return run


def trial_agent_id(run: Run) -> str | None:
    return (run.snapshot.get("trial") or {}).get("agent_id")
