"""Tenant-scoped reads of gateway keys and sessions, and the key lookup the endpoint makes."""

from __future__ import annotations

import hashlib
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

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


def active_key_for(raw: str) -> GatewayKey | None:
    """The unrevoked key with this value (its agent enabled), or None."""
    if not raw or len(raw) > 200 or not raw.startswith(KEY_PREFIX):
        return None
    key = GatewayKey.objects.select_related("agent").filter(key_hash=hash_key(raw)).first()
    if key is None or key.revoked_at is not None:
        return None
    return key


def key_sessions(*, key: GatewayKey, limit: int = 20) -> QuerySet[GatewaySession]:
    return GatewaySession.objects.filter(key=key).select_related("run").order_by("-last_seen_at")[:limit]
