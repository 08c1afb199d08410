from datetime import datetime
from typing import Any
from uuid import UUID

from ninja import Query, Router, Schema
from ninja.pagination import paginate

from apps.api.bodies import Body
from apps.api.pagination import Pagination
from apps.api.routers.servers import TrustedOutputIn
from apps.api.trusted_output import OutputTrustIn, TrustedOutputFields
from apps.approvals.definition_changes import inbox
from apps.registry import selectors, services
from apps.registry.models import Risk, ToolState

router = Router(tags=["tools"])


class FindingOut(Schema):
    code: str
    severity: str
    where: str
    message: str


class ToolOut(TrustedOutputFields):
    id: UUID
    server_id: UUID
    qualified_name: str
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] | None
    risk: str
    risk_source: str
    state: str
    state_reason: str
    definition_hash: str
    pinned_hash: str
    pinned_at: datetime | None
    pinned_by: str
    findings: list[FindingOut]
    diff: str
    trusted_output: bool  # an admin vouches for this tool's results (the server's setting is separate)
    outside_content: bool  # an admin says it returns outside text: reading a result taints a run

    @staticmethod
    def resolve_diff(obj) -> str:
        return services.tool_diff(obj)



class ToolFilters(Schema):
    server: str = ""
    risk: Risk | None = None
    state: ToolState | None = None


class ToolPatch(Body):
    risk: Risk | None = None
    state: ToolState | None = None


@router.get("", response=list[ToolOut])
@paginate(Pagination)
def list_tools(request, filters: Query[ToolFilters]):
    request.auth.require("org.view")
    return selectors.tools_for_org(org_id=request.auth.org_id, server=filters.server or None,
                                   risk=filters.risk or "", state=filters.state or "")


@router.get("/{tool_id}", response=ToolOut)
def get_tool(request, tool_id: UUID):
    request.auth.require("org.view")
    return selectors.get_tool(org_id=request.auth.org_id, tool_id=tool_id)


@router.patch("/{tool_id}", response=ToolOut)
def update_tool(request, tool_id: UUID, payload: ToolPatch):
    return services.update_tool(actor=request.auth, tool_id=tool_id, risk=payload.risk, state=payload.state,
                                review=inbox)


@router.post("/{tool_id}/pin", response=ToolOut, summary="Approve the current definition; lifts a quarantine")
def pin_tool(request, tool_id: UUID):
    return services.pin_tool(actor=request.auth, tool_id=tool_id, review=inbox)


@router.post("/{tool_id}/trusted-output", response=ToolOut, summary="Mark (or unmark) this tool's output as trusted")
def set_trusted_output(request, tool_id: UUID, payload: TrustedOutputIn):
    services.set_trusted_output(actor=request.auth, tool_id=tool_id, trusted=payload.trusted, review=inbox)
    return selectors.get_tool(org_id=request.auth.org_id, tool_id=tool_id)


@router.post("/{tool_id}/output-trust", response=ToolOut,
             summary="Say what this tool's results are: trusted, outside content, or as its server says")
def set_output_trust(request, tool_id: UUID, payload: OutputTrustIn):
    services.set_output_trust(actor=request.auth, tool_id=tool_id, trust=payload.trust, review=inbox)
    return selectors.get_tool(org_id=request.auth.org_id, tool_id=tool_id)
