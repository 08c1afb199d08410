from datetime import datetime
from uuid import UUID

from django.conf import settings
from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from apps.api.bodies import Body
from apps.api.pagination import Pagination
from apps.gateway import selectors, services

router = Router(tags=["gateway"])


class GatewayKeyOut(Schema):
    id: UUID
    name: str
    agent_id: UUID
    agent: str = Field(..., alias="agent.name")
    prefix: str
    rate_limit_per_minute: int
    hold_wait_s: int
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class GatewayKeyIn(Body):
    name: str = Field(..., min_length=1, max_length=100)
    agent_id: UUID
    rate_limit_per_minute: int | None = Field(None, ge=1, le=services.MAX_RATE_LIMIT)
    hold_wait_s: int | None = Field(None, ge=0, le=services.MAX_HOLD_WAIT_S)


class GatewayKeyCreated(Schema):
    key: GatewayKeyOut
    value: str  # the bearer key; shown once, only its hash is stored
    url: str  # the gateway's MCP endpoint


@router.get("", response=list[GatewayKeyOut])
@paginate(Pagination)
def list_keys(request):
    request.auth.require("tokens.manage")
    return selectors.org_keys(org_id=request.auth.org_id)


@router.post("", response={201: GatewayKeyCreated})
def create_key(request, payload: GatewayKeyIn):
    key, raw = services.create_key(actor=request.auth, name=payload.name, agent_id=payload.agent_id,
                                   rate_limit_per_minute=payload.rate_limit_per_minute,
                                   hold_wait_s=payload.hold_wait_s)
    return Status(201, {"key": key, "value": raw, "url": settings.AIRLOCK_GATEWAY_URL})


@router.delete("/{key_id}", response={204: None})
def revoke_key(request, key_id: UUID):
    services.revoke_key(actor=request.auth, key_id=key_id)
    return Status(204, None)
