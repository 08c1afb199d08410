from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from apps.agents import selectors, services
from apps.api.bodies import Body
from apps.api.pagination import Pagination

router = Router(tags=["agents"])


class GrantIn(Body):
    tool: str = Field(..., description="The tool's qualified name (server.tool) or id")
    policy: Literal["auto", "approve", "deny"]
    condition: str = Field("", description="Escalates auto to approve when true, e.g. amount_cents > 5000")


class GrantOut(Schema):
    tool: str
    tool_id: UUID
    policy: str
    condition: str
    risk: str
    state: str
    trust_tier: str

    @staticmethod
    def resolve_tool(obj) -> str:
        return obj.tool.qualified_name

    @staticmethod
    def resolve_risk(obj) -> str:
        return obj.tool.risk

    @staticmethod
    def resolve_state(obj) -> str:
        return obj.tool.state

    @staticmethod
    def resolve_trust_tier(obj) -> str:
        return obj.tool.server.trust_tier


class ContextResourceOut(Schema):
    resource_id: UUID
    server: str
    uri: str
    name: str
    state: str
    usable: bool  # false: a run reports it not available (quarantined, disabled, removed, server disabled)

    @staticmethod
    def resolve_server(obj) -> str:
        return obj.resource.server.name

    @staticmethod
    def resolve_uri(obj) -> str:
        return obj.resource.uri

    @staticmethod
    def resolve_name(obj) -> str:
        return obj.resource.name

    @staticmethod
    def resolve_state(obj) -> str:
        return obj.resource.state

    @staticmethod
    def resolve_usable(obj) -> bool:
        return obj.resource.is_usable


CONTEXT_HELP = ("Resources given to the agent as read-only context at the start of each task: resource ids or URIs "
                "(GET /resources?usable=true). Capped, scanned, and reading one taints the run unless its output "
                "is trusted.")


class AgentOut(Schema):
    id: UUID
    name: str
    role: str
    instructions: str
    in_scope: str
    out_of_scope: str
    llm_connection_id: UUID
    model: str
    temperature: float | None
    max_steps: int
    script: list[dict[str, Any]] | None
    enabled: bool
    version: int
    grants: list[GrantOut]
    context_resources: list[ContextResourceOut]
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_llm_connection_id(obj) -> UUID:
        return obj.connection_id

    @staticmethod
    def resolve_grants(obj) -> list:
        return selectors.agent_grants(obj)

    @staticmethod
    def resolve_context_resources(obj) -> list:
        return selectors.agent_context_resources(obj)


class AgentIn(Body):
    name: str = Field(..., min_length=1, max_length=100)
    role: str = ""
    instructions: str = ""
    in_scope: str = ""
    out_of_scope: str = ""
    llm_connection_id: UUID
    model: str = ""
    temperature: float | None = None
    max_steps: int = 8
    script: list[Any] | str | None = None
    grants: list[GrantIn] = []
    context_resources: list[str] = Field([], description=CONTEXT_HELP)


class AgentPatch(Body):
    name: str | None = None
    role: str | None = None
    instructions: str | None = None
    in_scope: str | None = None
    out_of_scope: str | None = None
    llm_connection_id: UUID | None = None
    model: str | None = None
    temperature: float | None = None
    max_steps: int | None = None
    script: list[Any] | str | None = None
    grants: list[GrantIn] | None = None
    context_resources: list[str] | None = Field(None, description=CONTEXT_HELP)
    enabled: bool | None = None


class VersionOut(Schema):
    number: int
    created_at: datetime
    actor: str
    changes: dict[str, Any]
    snapshot: dict[str, Any]

    @staticmethod
    def resolve_actor(obj) -> str:
        return obj.actor_label


class PermissionOut(Schema):
    tool: str
    policy: str
    condition: str
    decision: str
    reason: str
    decision_when_tainted: str
    reason_when_tainted: str
    denied_when_tainted_in: list[str]  # crews that deny this call instead of holding it (on_untrusted: deny)
    taints_run: str  # why reading its result taints a run, '' when it does not
    trusted_output: bool  # an admin vouches for its output (server or tool)


class PromptOut(Schema):
    system_prompt: str


def _values(payload: Schema, *, exclude_unset: bool = False) -> dict[str, Any]:
    values = payload.dict(exclude_unset=exclude_unset)
    if "llm_connection_id" in values:
        values["connection_id"] = values.pop("llm_connection_id")
    values.pop("enabled", None)
    return values


@router.get("", response=list[AgentOut])
@paginate(Pagination)
def list_agents(request):
    request.auth.require("org.view")
    return selectors.org_agents(org_id=request.auth.org_id)


@router.post("", response={201: AgentOut})
def create_agent(request, payload: AgentIn):
    return Status(201, services.create_agent(actor=request.auth, **_values(payload)))


@router.get("/{agent_id}", response=AgentOut)
def get_agent(request, agent_id: UUID):
    request.auth.require("org.view")
    return selectors.get_agent(org_id=request.auth.org_id, agent_id=agent_id)


@router.patch("/{agent_id}", response=AgentOut)
def update_agent(request, agent_id: UUID, payload: AgentPatch):
    agent = services.update_agent(actor=request.auth, agent_id=agent_id, **_values(payload, exclude_unset=True))
    if payload.enabled is not None:
        agent = services.set_agent_enabled(actor=request.auth, agent_id=agent_id, enabled=payload.enabled)
    return agent


@router.delete("/{agent_id}", response={204: None})
def delete_agent(request, agent_id: UUID):
    services.delete_agent(actor=request.auth, agent_id=agent_id)
    return Status(204, None)


@router.get("/{agent_id}/versions", response=list[VersionOut])
@paginate(Pagination)
def list_versions(request, agent_id: UUID):
    request.auth.require("org.view")
    return selectors.agent_versions(agent=selectors.get_agent(org_id=request.auth.org_id, agent_id=agent_id))


@router.get("/{agent_id}/permissions", response=list[PermissionOut])
def effective_permissions(request, agent_id: UUID):
    """What the policy point will decide for each granted tool, and why (a dry run)."""
    request.auth.require("org.view")
    agent = selectors.get_agent(org_id=request.auth.org_id, agent_id=agent_id)
    return [{"tool": p.grant.tool.qualified_name, "policy": p.grant.policy, "condition": p.grant.condition,
             "decision": p.now.decision, "reason": p.now.reason, "decision_when_tainted": p.tainted.decision,
             "reason_when_tainted": p.tainted.reason, "denied_when_tainted_in": list(p.denied_in),
             "taints_run": p.taints, "trusted_output": p.trusted_output}
            for p in selectors.effective_permissions(agent)]


@router.get("/{agent_id}/prompt", response=PromptOut)
def system_prompt(request, agent_id: UUID):
    """The exact system prompt the engine sends for this agent."""
    request.auth.require("org.view")
    return {"system_prompt": selectors.system_prompt(selectors.get_agent(org_id=request.auth.org_id,
                                                                         agent_id=agent_id))}
