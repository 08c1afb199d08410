"""Roles and what each may do. The one table every permission check reads."""

from __future__ import annotations

from django.db import models


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    BUILDER = "builder", "Builder"
    APPROVER = "approver", "Approver"
    VIEWER = "viewer", "Viewer"


ROLE_HELP = {
    Role.OWNER: "Everything, including managing owners and deleting the organisation.",
    Role.ADMIN: "Manage members, API tokens, MCP servers and settings; build; approve.",
    Role.BUILDER: "Define agents and crews and start runs.",
    Role.APPROVER: "Decide on held tool calls in the inbox.",
    Role.VIEWER: "Read everything that is not a secret.",
}

# Tokens act for scripts, never as owners.
TOKEN_ROLES = [Role.ADMIN, Role.BUILDER, Role.APPROVER, Role.VIEWER]

PERMISSIONS: dict[str, frozenset[str]] = {
    "org.view": frozenset(Role.values),
    "members.manage": frozenset({Role.OWNER, Role.ADMIN}),
    "tokens.manage": frozenset({Role.OWNER, Role.ADMIN}),
    "audit.view": frozenset({Role.OWNER, Role.ADMIN}),
    "servers.manage": frozenset({Role.OWNER, Role.ADMIN}),
    "costs.manage": frozenset({Role.OWNER, Role.ADMIN}),  # prices and budgets
    "build": frozenset({Role.OWNER, Role.ADMIN, Role.BUILDER}),
    "runs.start": frozenset({Role.OWNER, Role.ADMIN, Role.BUILDER}),
    "approvals.decide": frozenset({Role.OWNER, Role.ADMIN, Role.APPROVER}),
}

# Higher number = more power; used to stop anyone granting more than they hold.
RANK = {Role.VIEWER: 0, Role.APPROVER: 1, Role.BUILDER: 1, Role.ADMIN: 2, Role.OWNER: 3}


def allows(role: str, permission: str) -> bool:
    return role in PERMISSIONS[permission]


def _permissions_of(role: str) -> frozenset[str]:
    return frozenset(p for p, roles in PERMISSIONS.items() if role in roles)


def token_role(*, token_role: str, member_role: str) -> str:
    """The role a token acts with: its own, but never more than its member may do now.

    Builder and approver allow different things; a token of one held by a member of the other
    may do only what both allow, which is what a viewer may do.
    """
    token, member = _permissions_of(token_role), _permissions_of(member_role)
    if token <= member:
        return token_role
    if member <= token:
        return member_role
    return Role.VIEWER
