"""Writes for gateway keys: create (the value is returned once), revoke, note use. Each one
transaction with its audit row. Sessions and the calls through the endpoint are written by
`apps.gateway.ledger` (the endpoint's own writer)."""

from __future__ import annotations

import secrets
from datetime import timedelta
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.agents import selectors as agents
from apps.audit import services as audit
from apps.core.errors import ValidationFailed
from apps.gateway import selectors
from apps.gateway.models import DEFAULT_HOLD_WAIT_S, DEFAULT_RATE_LIMIT, GatewayKey, OAuthGrant

LAST_USED_RESOLUTION = timedelta(minutes=1)
MAX_RATE_LIMIT = 100_000
MAX_HOLD_WAIT_S = 3600


def create_key(*, actor: Actor, name: str, agent_id: UUID | str, rate_limit_per_minute: int | None = None,
               hold_wait_s: int | None = None) -> tuple[GatewayKey, str]:
    """A key bound to one agent of the actor's organisation, and its value (shown once; only the hash is kept).

    Raises PermissionDenied, ValidationFailed, NotFound (the agent)."""
    actor.require("tokens.manage")
    name = (name or "").strip()
    errors = {}
    if not name:
        errors["name"] = "This field is required."
    rate = DEFAULT_RATE_LIMIT if rate_limit_per_minute is None else rate_limit_per_minute
    if not 1 <= rate <= MAX_RATE_LIMIT:
        errors["rate_limit_per_minute"] = f"Between 1 and {MAX_RATE_LIMIT} calls per minute."
    wait = DEFAULT_HOLD_WAIT_S if hold_wait_s is None else hold_wait_s
    if not 0 <= wait <= MAX_HOLD_WAIT_S:
        errors["hold_wait_s"] = f"Between 0 and {MAX_HOLD_WAIT_S} seconds."
    if errors:
        raise ValidationFailed("Check the highlighted fields.", errors)
    agent = agents.get_agent(org_id=actor.org_id, agent_id=agent_id)
    raw = selectors.KEY_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        key = GatewayKey.objects.create(org_id=actor.org_id, name=name[:100], agent=agent, prefix=raw[:10],
                                        key_hash=selectors.hash_key(raw), created_by_id=actor.user_id,
                                        rate_limit_per_minute=rate, hold_wait_s=wait)
        audit.record(org_id=actor.org_id, actor=actor, action="gateway_key.created", target=key,
                     target_label=key.name, data={"name": key.name, "agent": agent.name,
                                                  "rate_limit_per_minute": rate, "hold_wait_s": wait})
    return key, raw


def revoke_key(*, actor: Actor, key_id: UUID | str) -> GatewayKey:
    """Revokes a key: the endpoint refuses it (401) from its next request. Raises PermissionDenied, NotFound."""
    actor.require("tokens.manage")
    with transaction.atomic():
        key = selectors.get_key(org_id=actor.org_id, key_id=key_id)
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at", "updated_at"])
            audit.record(org_id=actor.org_id, actor=actor, action="gateway_key.revoked", target=key,
                         target_label=key.name, data={"name": key.name})
    return key


def note_key_used(*, key_id: UUID | str, last_used_at=None) -> None:
    """Updates last_used_at at most once a minute (a write per request would be waste)."""
    now = timezone.now()
    GatewayKey.objects.filter(pk=key_id).exclude(last_used_at__gt=now - LAST_USED_RESOLUTION).update(
        last_used_at=now)


def grant_oauth(*, actor: Actor, application, agent_id: UUID | str) -> OAuthGrant:
    """A person's consent that the OAuth client `application` acts as one agent of the actor's
    organisation (the actor is that person in the organisation they picked). Replaces the person's
    earlier grant to the same client: a host holds one identity at a time.

    Raises PermissionDenied (a role that may not manage gateway keys), NotFound (the agent)."""
    actor.require("tokens.manage")
    agent = agents.get_agent(org_id=actor.org_id, agent_id=agent_id)
    client_name = (application.name or application.client_id)[:200]
    with transaction.atomic():
        for old in OAuthGrant.objects.select_for_update().filter(application=application, user_id=actor.user_id,
                                                                 revoked_at__isnull=True):
            _end_grant(old, actor=actor, reason="replaced")
        key = GatewayKey.objects.create(org_id=actor.org_id, name=f"OAuth: {client_name}"[:100], agent=agent,
                                        prefix="oauth", key_hash=selectors.hash_key(secrets.token_urlsafe(32)),
                                        created_by_id=actor.user_id)
        grant = OAuthGrant.objects.create(org_id=actor.org_id, application=application, user_id=actor.user_id,
                                          agent=agent, key=key, client_name=client_name)
        audit.record(org_id=actor.org_id, actor=actor, action="gateway_oauth.granted", target=grant,
                     target_label=client_name, data={"client": client_name, "client_id": application.client_id,
                                                     "agent": agent.name})
    return grant


def revoke_oauth_grant(*, actor: Actor, grant_id: UUID | str) -> OAuthGrant:
    """Ends a grant: its access and refresh tokens are deleted and the gateway refuses the host from
    its next request. Raises PermissionDenied, NotFound."""
    actor.require("tokens.manage")
    with transaction.atomic():
        grant = selectors.get_oauth_grant(org_id=actor.org_id, grant_id=grant_id)
        if grant.revoked_at is None:
            _end_grant(grant, actor=actor, reason="revoked")
    return grant


def _end_grant(grant: OAuthGrant, *, actor: Actor, reason: str) -> None:
    from oauth2_provider.models import get_access_token_model, get_refresh_token_model

    now = timezone.now()
    grant.revoked_at = now
    grant.save(update_fields=["revoked_at", "updated_at"])
    GatewayKey.objects.filter(pk=grant.key_id, revoked_at__isnull=True).update(revoked_at=now, updated_at=now)
    get_refresh_token_model().objects.filter(application_id=grant.application_id, user_id=grant.user_id).delete()
    get_access_token_model().objects.filter(application_id=grant.application_id, user_id=grant.user_id).delete()
    audit.record(org_id=grant.org_id, actor=actor, action=f"gateway_oauth.{reason}", target=grant,
                 target_label=grant.client_name, data={"client": grant.client_name, "agent_id": str(grant.agent_id)})
