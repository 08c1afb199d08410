"""Tenant-scoped reads of gateway keys and sessions, and the key lookup the endpoint makes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import OuterRef, QuerySet, Subquery

from apps.accounts.models import Membership
from apps.accounts.roles import allows
from apps.core.errors import NotFound
from apps.gateway.models import GatewayKey, GatewaySession, OAuthGrant

KEY_PREFIX = "agw_"
NOT_A_KEY = "This is not a gateway key (they start with agw_)."
UNKNOWN_KEY = "Unknown gateway key."


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def is_key_shaped(raw: str) -> bool:
    return bool(raw) and len(raw) <= 200 and raw.startswith(KEY_PREFIX)


def org_keys(*, org_id: UUID | str, include_revoked: bool = True) -> QuerySet[GatewayKey]:
    # The keys behind OAuth grants have no value anyone holds: they are listed as the grants.
    keys = GatewayKey.objects.filter(org_id=org_id, oauth_grant__isnull=True).select_related("agent", "created_by")
    if not include_revoked:
        keys = keys.filter(revoked_at__isnull=True)
    return keys.order_by("revoked_at", "-created_at")


def get_key(*, org_id: UUID | str, key_id: UUID | str) -> GatewayKey:
    try:
        return GatewayKey.objects.select_related("agent").get(org_id=org_id, id=key_id)
    except (GatewayKey.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such gateway key.") from None


class KeyRow(NamedTuple):
    """What the endpoint needs of a presented key, with its creator's role in the key's organisation now."""

    id: UUID
    org_id: UUID
    name: str
    agent_id: UUID
    created_by_id: int | None
    rate_limit_per_minute: int
    hold_wait_s: int
    revoked_at: datetime | None
    creator_role: str | None


@dataclass(frozen=True)
class KeyStanding:
    """A presented key as it stands now: the key, or why it is refused (then `key` is None)."""

    key: KeyRow | None
    refusal: str = ""


def key_rows(keys: QuerySet[GatewayKey]) -> QuerySet:
    """`keys` as `KeyRow` values, the creator's role read in the same query."""
    creator_role = Membership.objects.filter(org_id=OuterRef("org_id"), user_id=OuterRef("created_by_id"))
    return keys.annotate(creator_role=Subquery(creator_role.values("role")[:1])).values_list(*KeyRow._fields)


def key_by_hash(key_hash: str) -> QuerySet:
    """The key with this hash as `KeyRow` values (at most one: hashes are unique)."""
    return key_rows(GatewayKey.objects.filter(key_hash=key_hash)).order_by("pk")


def key_standing(raw: str) -> KeyStanding:
    """Checks a presented key against the database as it is now (one query, made on every request).

    A key acts for the member who created it: it works while that person is still a member of the
    key's organisation with a role that may manage gateway keys. A key created with an API token
    (no creator) is bound by its revocation alone. The gateway process runs the same query compiled
    once (`apps.gateway.keys.KeyStatement`); this is its plain twin."""
    if not is_key_shaped(raw):
        return KeyStanding(None, NOT_A_KEY)
    return standing_of(key_by_hash(hash_key(raw)).first(), UNKNOWN_KEY)


def standing_of(row: tuple | None, unknown: str) -> KeyStanding:
    """The standing of a key read as `KeyRow` values (None: no such key, refused with `unknown`)."""
    if row is None:
        return KeyStanding(None, unknown)
    key = KeyRow(*row)
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


def bearer_standing(raw: str, *, resource: str = "") -> KeyStanding:
    """A presented bearer value: a gateway key (`agw_…`) or an OAuth access token from Airlock's
    authorization server. A token stands while it is unexpired, was issued for this gateway
    (`resource`, RFC 8707, when the host named one), and its grant and the key behind it stand
    (a grant acts for the person who consented, while they may manage gateway keys)."""
    if raw.startswith(KEY_PREFIX) or not raw or len(raw) > 500:
        return key_standing(raw)
    from oauth2_provider.models import get_access_token_model

    token = (get_access_token_model().objects.filter(token_checksum=hashlib.sha256(raw.encode()).hexdigest())
             .only("id", "user_id", "application_id", "expires", "resource").first())
    if token is None or token.user_id is None:
        return KeyStanding(None, "Unknown or revoked access token; sign in again.")
    if token.is_expired():
        return KeyStanding(None, "The access token has expired; refresh it or sign in again.")
    if resource and not token.allows_audience(resource):
        return KeyStanding(None, "The access token was not issued for this gateway.")
    grants = GatewayKey.objects.filter(oauth_grant__application_id=token.application_id,
                                       oauth_grant__user_id=token.user_id, oauth_grant__revoked_at__isnull=True)
    return standing_of(key_rows(grants.order_by("-created_at")).first(),
                       "The access to this host was revoked; sign in again.")


def org_oauth_grants(*, org_id: UUID | str) -> QuerySet[OAuthGrant]:
    return (OAuthGrant.objects.filter(org_id=org_id).select_related("agent", "user", "key")
            .order_by("revoked_at", "-created_at"))


def get_oauth_grant(*, org_id: UUID | str, grant_id: UUID | str) -> OAuthGrant:
    try:
        return OAuthGrant.objects.select_related("key", "agent").get(org_id=org_id, id=grant_id)
    except (OAuthGrant.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such OAuth grant.") from None


def key_sessions(*, key: GatewayKey, limit: int = 20) -> QuerySet[GatewaySession]:
    return GatewaySession.objects.filter(key=key).select_related("run").order_by("-last_seen_at")[:limit]
