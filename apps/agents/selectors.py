"""Tenant-scoped reads for LLM connections, agents, grants and versions, and the policy dry run."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Count, F, Prefetch, Q, QuerySet

from apps.agents.models import Agent, AgentVersion, ContextResource, LlmConnection, ToolGrant
from apps.agents.policy import UNTRUSTED_RULES, CallFacts, PolicyDecision, decide
from apps.agents.prompts import compose_system_prompt
from apps.core.errors import NotFound
from apps.registry.definitions import OUTSIDE, TRUSTED, output_trust, reaches_open_world, untrusted_output
from apps.registry.models import Resource, Tool, ToolState


def org_connections(*, org_id: UUID) -> QuerySet[LlmConnection]:
    return LlmConnection.objects.filter(org_id=org_id).annotate(agent_count=Count("agents")).order_by("name")


def get_connection(*, org_id: UUID, connection_id: UUID | str) -> LlmConnection:
    try:
        return LlmConnection.objects.get(org_id=org_id, id=connection_id)
    except (LlmConnection.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such LLM connection.") from None


def org_agents(*, org_id: UUID, enabled: bool | None = None) -> QuerySet[Agent]:
    agents = (Agent.objects.filter(org_id=org_id).select_related("connection").prefetch_related(*_agent_parts())
              .annotate(grant_count=Count("grants")))
    if enabled is not None:
        agents = agents.filter(enabled=enabled)
    return agents.order_by("name")


def _loaded_agents() -> QuerySet[Agent]:
    """Agents with what running one needs: its connection, grants (tool, server) and context resources."""
    return Agent.objects.select_related("connection").prefetch_related(*_agent_parts())


def _agent_parts() -> tuple[Prefetch, Prefetch]:
    """An agent's grants with their tools and servers, and its context resources with theirs: one query each
    (joined), where `grants__tool__server` made three, one after the other, at every run's start."""
    return (Prefetch("grants", queryset=ToolGrant.objects.select_related("tool__server")),
            Prefetch("context_resources", queryset=ContextResource.objects.select_related("resource__server")))


def get_agent(*, org_id: UUID, agent_id: UUID | str) -> Agent:
    try:
        return _loaded_agents().get(org_id=org_id, id=agent_id)
    except (Agent.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such agent.") from None


def get_agents(*, org_id: UUID, agent_ids: list) -> dict[UUID, Agent]:
    """Several agents loaded as `get_agent` loads one, in the same three queries however many (a crew's snapshot
    at every run start). An id that is not the organisation's is left out."""
    return {agent.id: agent for agent in _loaded_agents().filter(org_id=org_id, id__in=agent_ids)}


def agent_grants(agent: Agent) -> list[ToolGrant]:
    return sorted(agent.grants.all(), key=lambda g: g.tool.qualified_name)


def agent_context_resources(agent: Agent) -> list[ContextResource]:
    return sorted(agent.context_resources.all(), key=lambda c: (c.resource.server.name, c.resource.uri))


def grantable_resources(*, org_id: UUID) -> QuerySet[Resource]:
    """Resources an agent may newly be given as context: active, exactly as pinned, on an enabled server of this
    organisation. A quarantined, disabled or removed one is not offered."""
    return (Resource.objects.filter(org_id=org_id, state=ToolState.ACTIVE, server__enabled=True,
                                    pinned_hash=F("definition_hash"))
            .select_related("server").order_by("server__name", "uri"))


def find_resource(*, org_id: UUID, ref: str) -> Resource | list[Resource] | None:
    """A resource of this organisation by id, or by URI: a list when several of its servers list that URI (the
    caller asks for the id then), None when there is none."""
    rows = Resource.objects.filter(org_id=org_id).select_related("server")
    try:
        return rows.get(id=UUID(str(ref)))
    except (ValueError, Resource.DoesNotExist):
        found = list(rows.filter(uri=str(ref).strip()).exclude(state=ToolState.REMOVED))
        return found[0] if len(found) == 1 else (found or None)


def agent_versions(*, agent: Agent) -> QuerySet[AgentVersion]:
    return AgentVersion.objects.filter(org_id=agent.org_id, agent=agent).order_by("-number")


def grantable_tools(*, org_id: UUID, server: str = "", risk: str = "", tier: str = "",
                    search: str = "") -> QuerySet[Tool]:
    """Registry tools an agent could be granted (removed ones are left out), filtered as the picker asks."""
    tools = Tool.objects.filter(org_id=org_id).exclude(state="removed").select_related("server")
    if server:
        tools = tools.filter(server__name=server)
    if risk:
        tools = tools.filter(risk=risk)
    if tier:
        tools = tools.filter(server__trust_tier=tier)
    if search:
        tools = tools.filter(Q(qualified_name__icontains=search) | Q(description__icontains=search))
    return tools.order_by("qualified_name")


def find_tool(*, org_id: UUID, ref: str) -> Tool | None:
    """A tool by qualified name (`server.tool`) or id, in this organisation."""
    tools = Tool.objects.filter(org_id=org_id).select_related("server")
    try:
        return tools.get(id=UUID(str(ref)))
    except (ValueError, Tool.DoesNotExist):
        return tools.filter(qualified_name=str(ref).strip()).first()


def crews_using(agent: Agent) -> list[str]:
    """Names of the crews that use this agent (as a task's agent, a member or the supervisor).

    Reads the reverse relations the crews app declares, so agents never imports crews.
    """
    names = set(agent.crew_tasks.values_list("crew__name", flat=True))
    names |= set(agent.crew_memberships.values_list("crew__name", flat=True))
    names |= set(agent.supervised_crews.values_list("name", flat=True))
    return sorted(names)


def call_facts(grant: ToolGrant, *, arguments: dict[str, Any] | None = None, tainted: bool = False) -> CallFacts:
    tool = grant.tool
    return CallFacts(tool=tool.qualified_name, risk=tool.risk, state=tool.state, pinned=tool.is_pinned,
                     trust_tier=tool.server.trust_tier, grant=grant.policy, condition=grant.condition,
                     arguments=arguments, tainted=tainted,
                     open_world=reaches_open_world(tier=tool.server.trust_tier, annotations=tool.annotations))


@dataclass(frozen=True)
class EffectivePermission:
    grant: ToolGrant
    now: PolicyDecision  # a call in a clean run, before arguments are known
    tainted: PolicyDecision  # the same call after the run has read untrusted content
    denied_in: tuple[str, ...] = ()  # crews that deny, rather than hold, what `tainted` holds (on_untrusted)

    @property
    def taints(self) -> str:
        """Whether this tool's results taint a run by where they come from, and why ('' when not)."""
        tool = self.grant.tool
        open_world = reaches_open_world(tier=tool.server.trust_tier, annotations=tool.annotations)
        trust = output_trust(tool, tool.server)
        if not untrusted_output(tier=tool.server.trust_tier, open_world=open_world, trust=trust):
            return ""
        if trust == OUTSIDE:
            return "An admin marked its results outside content: reading one taints the run."
        return "Its results are content Airlock does not control: reading one taints the run."

    @property
    def trusted_output(self) -> bool:
        return output_trust(self.grant.tool, self.grant.tool.server) == TRUSTED


def effective_permissions(agent: Agent) -> list[EffectivePermission]:
    """For each granted tool, what the engine's policy point will decide and why (a dry run of `decide`)."""
    denying = crews_denying_untrusted(agent)
    out = []
    for g in agent_grants(agent):
        tainted = decide(call_facts(g, tainted=True))
        held_for_content = tainted.decision == "hold" and tainted.rule in UNTRUSTED_RULES
        out.append(EffectivePermission(g, decide(call_facts(g)), tainted, denying if held_for_content else ()))
    return out


def crews_denying_untrusted(agent: Agent) -> tuple[str, ...]:
    """Names of the crews using this agent whose calls held for untrusted content are denied instead."""
    names = set(agent.crew_tasks.filter(crew__on_untrusted="deny").values_list("crew__name", flat=True))
    names |= set(agent.crew_memberships.filter(crew__on_untrusted="deny").values_list("crew__name", flat=True))
    names |= set(agent.supervised_crews.filter(on_untrusted="deny").values_list("name", flat=True))
    return tuple(sorted(names))


def system_prompt(agent: Agent) -> str:
    return compose_system_prompt(name=agent.name, role=agent.role, instructions=agent.instructions,
                                 in_scope=agent.in_scope, out_of_scope=agent.out_of_scope)


def agent_snapshot(agent: Agent) -> dict[str, Any]:
    """Everything that defines an agent, as JSON (no secrets): stored per version, snapshotted per run."""
    connection = agent.connection
    return {
        "name": agent.name, "role": agent.role, "instructions": agent.instructions, "in_scope": agent.in_scope,
        "out_of_scope": agent.out_of_scope,
        "connection": {"id": str(connection.id), "name": connection.name, "provider": connection.provider,
                       "base_url": connection.base_url},
        "model": agent.model, "temperature": agent.temperature, "max_steps": agent.max_steps,
        "script": agent.script, "enabled": agent.enabled,
        "grants": [{"tool": g.tool.qualified_name, "tool_id": str(g.tool_id), "policy": g.policy,
                    "condition": g.condition} for g in agent_grants(agent)],
        **context_snapshot(agent),
    }


def context_snapshot(agent: Agent) -> dict[str, Any]:
    """The agent's context resources as its snapshot holds them (what a run reads at each task's start). Absent
    when it has none, so the snapshots (and version diffs) of agents without any stay as they were."""
    given = agent_context_resources(agent)
    if not given:
        return {}
    # What names the resource, not what it says (its name, its definition hash): a re-pinned definition is not a
    # change of the agent, and a run checks the resource as it is when it reads it.
    return {"context_resources": [
        {"resource_id": str(c.resource_id), "server_id": str(c.resource.server_id), "server": c.resource.server.name,
         "uri": c.resource.uri} for c in given]}


def diff_snapshots(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, list[Any]]:
    """{field: [before, after]} for every field that differs."""
    if before is None:
        return {}
    return {key: [before.get(key), value] for key, value in after.items() if before.get(key) != value}


def diff_lines(before: Any, after: Any) -> list[tuple[str, str]]:
    """A line diff of two field values for the history page: [("+"|"-"|" ", line)]."""
    def lines(value: Any) -> list[str]:
        if isinstance(value, str):
            return value.splitlines() or [""]
        return json.dumps(value, indent=2, sort_keys=True, default=str).splitlines()

    out = []
    for line in difflib.ndiff(lines(before), lines(after)):
        if line.startswith("? "):
            continue
        out.append((line[0], line[2:]))
    return out
