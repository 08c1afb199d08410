from datetime import datetime
from typing import Literal
from uuid import UUID

from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from apps.accounts import selectors, services
from apps.api.bodies import Body
from apps.api.pagination import Pagination

router = Router(tags=["tokens"])


class TokenOut(Schema):
    id: UUID
    name: str
    role: str
    prefix: str
    member: str | None = Field(None, description="The email of the member who holds the token (null: they left; "
                                                 "the token no longer works).")
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @staticmethod
    def resolve_member(obj) -> str | None:
        return obj.member.user.email if obj.member_id else None


class TokenIn(Body):
    name: str = Field(..., min_length=1, max_length=100)
    role: Literal["admin", "builder", "approver", "viewer"]


class TokenCreated(Schema):
    token: TokenOut
    value: str  # the bearer token; shown once, only its hash is stored


@router.get("", response=list[TokenOut])
@paginate(Pagination)
def list_tokens(request):
    request.auth.require("tokens.manage")
    return selectors.org_tokens(org_id=request.auth.org_id)


@router.post("", response={201: TokenCreated})
def create_token(request, payload: TokenIn):
    token, raw = services.create_api_token(actor=request.auth, org_id=request.auth.org_id,
                                           name=payload.name, role=payload.role)
    return Status(201, {"token": token, "value": raw})


@router.delete("/{token_id}", response={204: None})
def revoke_token(request, token_id: UUID):
    services.revoke_api_token(actor=request.auth, token_id=token_id)
    return Status(204, None)
