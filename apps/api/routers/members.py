from datetime import datetime
from uuid import UUID

from ninja import Router, Schema, Status
from ninja.pagination import paginate

from apps.accounts import selectors, services
from apps.accounts.roles import Role
from apps.api.bodies import Body
from apps.api.pagination import Pagination

router = Router(tags=["members"])


class MemberOut(Schema):
    id: UUID
    email: str
    role: Role
    created_at: datetime

    @staticmethod
    def resolve_email(obj) -> str:
        return obj.user.email


class MemberIn(Body):
    email: str
    role: Role


class MemberCreated(Schema):
    member: MemberOut
    password: str | None = None  # set only when a new user account was created; shown once


class RolePatch(Body):
    role: Role


@router.get("", response=list[MemberOut])
@paginate(Pagination)
def list_members(request):
    request.auth.require("org.view")
    return selectors.org_members(org_id=request.auth.org_id)


@router.post("", response={201: MemberCreated})
def add_member(request, payload: MemberIn):
    membership, password = services.add_member(actor=request.auth, email=payload.email, role=payload.role)
    return Status(201, {"member": membership, "password": password})


@router.get("/{member_id}", response=MemberOut)
def get_member(request, member_id: UUID):
    request.auth.require("org.view")
    return selectors.get_member(org_id=request.auth.org_id, member_id=member_id)


@router.patch("/{member_id}", response=MemberOut)
def change_role(request, member_id: UUID, payload: RolePatch):
    return services.change_role(actor=request.auth, member_id=member_id, role=payload.role)


@router.delete("/{member_id}", response={204: None})
def remove_member(request, member_id: UUID):
    services.remove_member(actor=request.auth, member_id=member_id)
    return Status(204, None)
