"""Who is acting: a signed-in member, an API token, or the system. Services take `actor=`."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from apps.accounts.roles import allows, token_role
from apps.core.errors import PermissionDenied


@dataclass(frozen=True)
class Actor:
    org_id: UUID
    role: str
    label: str
    user_id: int | None = None
    token_id: UUID | None = None
    ip: str | None = None

    def can(self, permission: str) -> bool:
        return allows(self.role, permission)

    def require(self, permission: str) -> None:
        if not self.can(permission):
            raise PermissionDenied(f"Your role ({self.role}) does not allow this.")


def member_actor(membership, *, ip: str | None = None) -> Actor:
    return Actor(org_id=membership.org_id, role=membership.role, label=membership.user.email,
                 user_id=membership.user_id, ip=ip)


def token_actor(token, *, ip: str | None = None) -> Actor:
    """The token's member acting through it: that person (votes count them once, whichever token
    or session they use) with the lesser of the token's role and the member's current one."""
    member = token.member
    return Actor(org_id=token.org_id, role=token_role(token_role=token.role, member_role=member.role),
                 label=f"token:{token.name} ({member.user.email})", user_id=member.user_id, token_id=token.id,
                 ip=ip)


def system_actor(org_id: UUID, label: str = "system") -> Actor:
    return Actor(org_id=org_id, role="owner", label=label)
