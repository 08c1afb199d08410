from datetime import datetime
from typing import Literal
from uuid import UUID

from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from apps.agents import selectors, services
from apps.api.bodies import Body
from apps.api.pagination import Pagination

router = Router(tags=["llm-connections"])
ProviderName = Literal["scripted", "openai", "openai_compatible", "anthropic"]


class ConnectionOut(Schema):
    id: UUID
    name: str
    provider: str
    base_url: str
    default_model: str
    api_key_set: bool  # the key itself is write-only
    last_checked_at: datetime | None
    last_check_ok: bool | None
    last_check_message: str
    created_at: datetime

    @staticmethod
    def resolve_api_key_set(obj) -> bool:
        return obj.has_api_key


class ConnectionIn(Body):
    name: str = Field(..., min_length=1, max_length=100)
    provider: ProviderName
    base_url: str = ""
    api_key: str | None = None
    default_model: str = ""


class ConnectionPatch(Body):
    name: str | None = None
    provider: ProviderName | None = None
    base_url: str | None = None
    api_key: str | None = None  # omitted or null keeps the key; "" clears it
    default_model: str | None = None


class TestIn(Body):
    model: str = ""


class TestOut(Schema):
    ok: bool
    message: str
    latency_ms: int | None


@router.get("", response=list[ConnectionOut])
@paginate(Pagination)
def list_connections(request):
    request.auth.require("org.view")
    return selectors.org_connections(org_id=request.auth.org_id)


@router.post("", response={201: ConnectionOut})
def create_connection(request, payload: ConnectionIn):
    return Status(201, services.create_connection(actor=request.auth, **payload.dict()))


@router.get("/{connection_id}", response=ConnectionOut)
def get_connection(request, connection_id: UUID):
    request.auth.require("org.view")
    return selectors.get_connection(org_id=request.auth.org_id, connection_id=connection_id)


@router.patch("/{connection_id}", response=ConnectionOut)
def update_connection(request, connection_id: UUID, payload: ConnectionPatch):
    changes = {k: v for k, v in payload.dict(exclude_unset=True).items() if v is not None or k == "api_key"}
    return services.update_connection(actor=request.auth, connection_id=connection_id, **changes)


@router.delete("/{connection_id}", response={204: None})
def delete_connection(request, connection_id: UUID):
    services.delete_connection(actor=request.auth, connection_id=connection_id)
    return Status(204, None)


@router.post("/{connection_id}/test", response=TestOut)
def test_connection(request, connection_id: UUID, payload: TestIn | None = None):
    return services.test_connection(actor=request.auth, connection_id=connection_id,
                                    model=payload.model if payload else "")
