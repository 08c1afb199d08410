from __future__ import annotations

import hashlib

import pytest

from apps.accounts import selectors, services
from apps.accounts.actors import member_actor
from apps.accounts.models import ApiToken
from apps.audit.models import AuditEvent
from apps.core.errors import PermissionDenied, ValidationFailed

pytestmark = pytest.mark.django_db


def test_a_token_is_stored_only_as_a_hash(admin):
    token, raw = services.create_api_token(actor=member_actor(admin), org_id=admin.org_id, name="ci", role="builder")
    stored = ApiToken.objects.get(pk=token.pk)
    assert raw.startswith("al_")
    assert stored.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(ApiToken.objects.filter(pk=token.pk).values().first())
    assert selectors.active_token_for(raw) == stored


def test_token_events_are_audited_without_the_value(admin):
    token, raw = services.create_api_token(actor=member_actor(admin), org_id=admin.org_id, name="ci", role="viewer")
    services.revoke_api_token(actor=member_actor(admin), token_id=token.id)
    events = AuditEvent.objects.filter(org=admin.org, action__startswith="token.").order_by("seq")
    assert [e.action for e in events] == ["token.created", "token.revoked"]
    assert all(raw not in str(e.data) for e in events)


def test_tokens_cannot_outrank_their_creator_or_be_owners(admin):
    with pytest.raises(ValidationFailed):
        services.create_api_token(actor=member_actor(admin), org_id=admin.org_id, name="x", role="owner")


def test_only_admins_create_tokens(approver):
    with pytest.raises(PermissionDenied):
        services.create_api_token(actor=member_actor(approver), org_id=approver.org_id, name="x", role="viewer")


def test_a_revoked_token_no_longer_authenticates(admin):
    token, raw = services.create_api_token(actor=member_actor(admin), org_id=admin.org_id, name="x", role="viewer")
    services.revoke_api_token(actor=member_actor(admin), token_id=token.id)
    assert selectors.active_token_for(raw) is None
