from datetime import datetime
from typing import Any
from uuid import UUID

from ninja import Query, Router, Schema
from ninja.pagination import paginate

from apps.api.instants import Instant
from apps.api.pagination import Pagination
from apps.audit import selectors

router = Router(tags=["audit"])


class AuditOut(Schema):
    id: UUID
    seq: int
    created_at: datetime
    action: str
    actor: str
    target_type: str
    target_id: str
    target_label: str
    data: dict[str, Any]
    ip: str | None
    hash: str

    @staticmethod
    def resolve_actor(obj) -> str:
        return obj.actor_label


class AuditFilters(Schema):
    since: Instant | None = None
    until: Instant | None = None
    actor: str = ""
    action: str = ""


@router.get("", response=list[AuditOut])
@paginate(Pagination)
def list_audit(request, filters: Query[AuditFilters]):
    request.auth.require("audit.view")
    return selectors.audit_events(org_id=request.auth.org_id, **filters.dict())
