from datetime import datetime
from uuid import UUID

from ninja import Router, Schema
from ninja.pagination import paginate

from apps.api.pagination import Pagination
from apps.approvals import standing

router = Router(tags=["approvals"])


class StandingOut(Schema):
    id: UUID
    scope: str
    run_id: UUID | None
    agent: str
    tool: str
    condition: str
    expires_at: datetime | None
    created_by: str
    hits: int
    last_hit_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime

    @staticmethod
    def resolve_agent(obj) -> str:
        return obj.agent.name

    @staticmethod
    def resolve_tool(obj) -> str:
        return obj.tool.qualified_name

    @staticmethod
    def resolve_created_by(obj) -> str:
        return obj.created_by_label


@router.get("", response=list[StandingOut])
@paginate(Pagination)
def list_standing(request, live: bool = False):
    request.auth.require("org.view")
    return standing.org_standing(org_id=request.auth.org_id, live_only=live)


@router.post("/{standing_id}/revoke", response=StandingOut)
def revoke(request, standing_id: UUID):
    """Stops the standing approval covering later calls; 409 when already revoked."""
    return standing.revoke_standing(actor=request.auth, standing_id=standing_id)
