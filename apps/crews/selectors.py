"""Tenant-scoped reads for crews, their tasks, members and versions."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Prefetch, QuerySet

from apps.core.errors import NotFound
from apps.crews.models import Crew, CrewMember, CrewTask, CrewVersion


def org_crews(*, org_id: UUID) -> QuerySet[Crew]:
    return (Crew.objects.filter(org_id=org_id).select_related("supervisor").prefetch_related(*_crew_parts())
            .order_by("name"))


def get_crew(*, org_id: UUID, crew_id: UUID | str) -> Crew:
    try:
        return Crew.objects.select_related("supervisor").prefetch_related(*_crew_parts()).get(org_id=org_id, id=crew_id)
    except (Crew.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such crew.") from None


def _crew_parts() -> tuple[Prefetch, Prefetch]:
    """A crew's tasks and members with their agents: one query each (joined), where `tasks__agent` made two."""
    return (Prefetch("tasks", queryset=CrewTask.objects.select_related("agent")),
            Prefetch("members", queryset=CrewMember.objects.select_related("agent")))


def crew_versions(*, crew: Crew) -> QuerySet[CrewVersion]:
    return CrewVersion.objects.filter(org_id=crew.org_id, crew=crew).order_by("-number")


def crew_agents(crew: Crew) -> list:
    """Every agent the crew uses, once each: supervisor, members, task agents."""
    agents = {}
    if crew.supervisor_id:
        agents[crew.supervisor_id] = crew.supervisor
    for member in crew.members.all():
        agents.setdefault(member.agent_id, member.agent)
    for task in crew.tasks.all():
        agents.setdefault(task.agent_id, task.agent)
    return list(agents.values())


def crew_snapshot(crew: Crew) -> dict[str, Any]:
    """Everything that defines a crew, as JSON: stored per version, snapshotted per run."""
    return {
        "name": crew.name, "description": crew.description, "process": crew.process,
        "supervisor": ({"id": str(crew.supervisor_id), "name": crew.supervisor.name} if crew.supervisor_id else None),
        "members": [{"id": str(m.agent_id), "name": m.agent.name} for m in crew.members.all()],
        "tasks": [{"name": t.name, "description": t.description, "agent": t.agent.name, "agent_id": str(t.agent_id),
                   "context": t.context} for t in crew.tasks.all()],
        "routing_rules": crew.routing_rules, "inputs": crew.inputs,
        "max_hops": crew.max_hops, "max_tool_calls": crew.max_tool_calls, "timeout_s": crew.timeout_s,
        "token_budget": crew.token_budget, "budget_usd": None if crew.budget_usd is None else str(crew.budget_usd),
        "approvals_required": crew.approvals_required, "approval_ttl_hours": crew.approval_ttl_hours,
        "separation_of_duties": crew.separation_of_duties, "on_untrusted": crew.on_untrusted,
        "enabled": crew.enabled,
    }


def disabled_agents(crew: Crew) -> list[str]:
    return sorted(a.name for a in crew_agents(crew) if not a.enabled)
