"""Tenant-scoped reads of gateway keys and sessions, and the key lookup the endpoint makes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import OuterRef, QuerySet, Subquery

from apps.accounts.models import Membership
from apps.accounts.roles import allows
from apps.core.errors import NotFound
from apps.gateway.models import GatewayKey, GatewaySession

KEY_PREFIX = "agw_"


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def org_keys(*, org_id: UUID | str, include_revoked: bool = True) -> QuerySet[GatewayKey]:
    keys = GatewayKey.objects.filter(org_id=org_id).select_related("agent", "created_by")
    if not include_revoked:
        keys = keys.filter(revoked_at__isnull=True)
    return keys.order_by("revoked_at", "-created_at")


def get_key(*, org_id: UUID | str, key_id: UUID | str) -> GatewayKey:
    try:
        return GatewayKey.objects.select_related("agent").get(org_id=org_id, id=key_id)
    except (GatewayKey.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such gateway key.") from None


@dataclass(frozen=True)
class KeyStanding:
    """A presented key as it stands now: the key, or why it is refused (then `key` is None)."""

    key: GatewayKey | None
    refusal: str = ""


def key_standing(raw: str) -> KeyStanding:
    """Checks a presented key against the database as it is now (one query, made on every request).

    A key acts for the member who created it: it works while that person is still a member of the
    key's organisation with a role that may manage gateway keys. A key created with an API token
    (no creator) is bound by its revocation alone."""
    if not raw or len(raw) > 200 or not raw.startswith(KEY_PREFIX):
        return KeyStanding(None, "This is not a gateway key (they start with agw_).")
    creator_role = Membership.objects.filter(org_id=OuterRef("org_id"), user_id=OuterRef("created_by_id"))
    key = (GatewayKey.objects.filter(key_hash=hash_key(raw))
           .annotate(creator_role=Subquery(creator_role.values("role")[:1])).first())
    if key is None:
        return KeyStanding(None, "Unknown gateway key.")
    if key.revoked_at is not None:
        return KeyStanding(None, f"The gateway key {key.name!r} was revoked.")
    if key.created_by_id is not None and key.creator_role is None:
        return KeyStanding(None, f"The member who created the gateway key {key.name!r} is no longer in the "
                                 "organisation; an admin must create a new key.")
    if key.created_by_id is not None and not allows(key.creator_role, "tokens.manage"):
        return KeyStanding(None, f"The member who created the gateway key {key.name!r} is now a "
                                 f"{key.creator_role} and may no longer manage gateway keys; an admin must "
                                 "create a new key.")
    return KeyStanding(key)


def key_sessions(*, key: GatewayKey, limit: int = 20) -> QuerySet[GatewaySession]:
    return GatewaySession.objects.filter(key=key).select_related("run").order_by("-last_seen_at")[:limit]
