from datetime import datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from apps.api.bodies import Body
from apps.api.pagination import Pagination
from apps.crews import selectors, services

router = Router(tags=["crews"])


class TaskSchema(Body):
    name: str
    description: str
    agent_id: UUID | None = None
    context: list[str] = Field([], description="Names of earlier tasks whose outputs this task receives")


class InputSchema(Body):
    name: str
    type: Literal["string", "integer", "number", "boolean"] = "string"
    required: bool = True
    description: str = ""


class RoutingRule(Body):
    contains: str = Field(..., description="Text that, when found in the request, routes to `route`")
    route: str = Field(..., description="A member agent's name, or FINISH")


class CrewOut(Schema):
    id: UUID
    name: str
    description: str
    process: str
    supervisor_agent_id: UUID | None
    members: list[UUID]
    tasks: list[TaskSchema]
    routing_rules: list[dict[str, Any]]
    inputs: list[dict[str, Any]]
    max_hops: int
    max_tool_calls: int
    timeout_s: int
    token_budget: int | None
    budget_usd: Decimal | None
    approvals_required: int
    approval_ttl_hours: int
    separation_of_duties: bool
    on_untrusted: Literal["hold", "deny"]
    enabled: bool
    version: int
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_supervisor_agent_id(obj) -> UUID | None:
        return obj.supervisor_id

    @staticmethod
    def resolve_members(obj) -> list[UUID]:
        return [m.agent_id for m in obj.members.all()]

    @staticmethod
    def resolve_tasks(obj) -> list[dict]:
        return [{"name": t.name, "description": t.description, "agent_id": t.agent_id, "context": t.context}
                for t in obj.tasks.all()]


class CrewIn(Body):
    name: str = Field(..., min_length=1, max_length=100)
    description: str = ""
    process: Literal["sequential", "supervisor"] = "sequential"
    supervisor_agent_id: UUID | None = None
    tasks: list[TaskSchema] = []
    members: list[UUID] = []
    routing_rules: list[RoutingRule] = []
    inputs: list[InputSchema] = []
    max_hops: int = 6
    max_tool_calls: int = 50
    timeout_s: int = 900
    token_budget: int | None = None
    budget_usd: Decimal | None = None
    approvals_required: int = 1
    approval_ttl_hours: int = 24
    separation_of_duties: bool = Field(False, description="The person who started a run may not approve its "
                                                          "held calls.")
    on_untrusted: Literal["hold", "deny"] = Field("hold", description="What happens to a call held because of "
                                                  "what the run read (a tainted run, a destination the request "
                                                  "never named, text copied from a tool result): hold it for a "
                                                  "person, or deny it.")


class CrewPatch(Body):
    name: str | None = None
    description: str | None = None
    process: Literal["sequential", "supervisor"] | None = None
    supervisor_agent_id: UUID | None = None
    tasks: list[TaskSchema] | None = None
    members: list[UUID] | None = None
    routing_rules: list[RoutingRule] | None = None
    inputs: list[InputSchema] | None = None
    max_hops: int | None = None
    max_tool_calls: int | None = None
    timeout_s: int | None = None
    token_budget: int | None = None
    budget_usd: Decimal | None = None
    approvals_required: int | None = None
    approval_ttl_hours: int | None = None
    separation_of_duties: bool | None = None
    on_untrusted: Literal["hold", "deny"] | None = None
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


@router.get("", response=list[CrewOut])
@paginate(Pagination)
def list_crews(request):
    request.auth.require("org.view")
    return selectors.org_crews(org_id=request.auth.org_id)


@router.post("", response={201: CrewOut})
def create_crew(request, payload: CrewIn):
    return Status(201, services.create_crew(actor=request.auth, **payload.dict()))


@router.get("/{crew_id}", response=CrewOut)
def get_crew(request, crew_id: UUID):
    request.auth.require("org.view")
    return selectors.get_crew(org_id=request.auth.org_id, crew_id=crew_id)


@router.patch("/{crew_id}", response=CrewOut)
def update_crew(request, crew_id: UUID, payload: CrewPatch):
    changes = payload.dict(exclude_unset=True)
    enabled = changes.pop("enabled", None)
    crew = services.update_crew(actor=request.auth, crew_id=crew_id, **changes)
    if enabled is not None:
        crew = services.set_crew_enabled(actor=request.auth, crew_id=crew_id, enabled=enabled)
    return crew


@router.delete("/{crew_id}", response={204: None})
def delete_crew(request, crew_id: UUID):
    services.delete_crew(actor=request.auth, crew_id=crew_id)
    return Status(204, None)


@router.get("/{crew_id}/versions", response=list[VersionOut])
@paginate(Pagination)
def list_versions(request, crew_id: UUID):
    request.auth.require("org.view")
    return selectors.crew_versions(crew=selectors.get_crew(org_id=request.auth.org_id, crew_id=crew_id))
