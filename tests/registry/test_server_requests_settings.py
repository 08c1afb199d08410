"""What a server may ask during a call, as an admin sets it: defaults by trust tier, the API, the page."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.approvals.definition_changes import inbox
from apps.audit.models import AuditEvent
from apps.registry import services
from apps.registry.models import McpServer
from tests.factories import token_for

pytestmark = pytest.mark.django_db


def test_every_tier_starts_with_both_off_and_the_api_changes_them_with_an_audit_row(org, owner):
    from apps.accounts.actors import member_actor

    actor = member_actor(owner)
    internal = services.create_server(actor=actor, name="inside", transport="http", trust_tier="internal",
                                      url="https://mcp.example.com/a", sync=False)
    outside = services.create_server(actor=actor, name="outside", transport="http", trust_tier="third_party",
                                     url="https://mcp.example.com/b", sync=False)
    assert not internal.allow_elicitation and not internal.allow_sampling  # opt-in: a session per call
    assert not outside.allow_elicitation and not outside.allow_sampling
    admin = Client(headers={"Authorization": f"Bearer {token_for(org, 'admin')}"})
    response = admin.put(f"/api/v1/servers/{outside.id}/requests", {"allow_sampling": True, "hold_sampling": True},
                         content_type="application/json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["allow_sampling"] and body["hold_sampling"] and not body["allow_elicitation"]
    assert AuditEvent.objects.filter(action="server.requests_changed", target_id=str(outside.id)).exists()
    builder = Client(headers={"Authorization": f"Bearer {token_for(org, 'builder')}"})
    refused = builder.put(f"/api/v1/servers/{outside.id}/requests", {"allow_elicitation": True},
                          content_type="application/json")
    assert refused.status_code == 403
    assert not McpServer.objects.get(id=outside.id).allow_elicitation


def test_the_server_page_shows_and_saves_the_settings(client, owner):
    from apps.accounts.actors import member_actor

    server = services.create_server(actor=member_actor(owner), name="inside", transport="http",
                                    trust_tier="internal", url="https://mcp.example.com/a", sync=False)
    client.force_login(owner.user)
    page = client.get(f"/servers/{server.id}/")
    assert b"ask people for input" in page.content
    saved = client.post(f"/servers/{server.id}/requests/", {"allow_sampling": "on"})
    assert saved.status_code == 302
    server.refresh_from_db()
    assert server.allow_sampling and not server.allow_elicitation and not server.hold_sampling


def test_the_builtin_human_server_cannot_be_synced_and_holds_human_ask(org, owner):
    from apps.accounts.actors import member_actor
    from apps.core.errors import Conflict

    human = McpServer.objects.get(org=org, name="human")
    assert human.transport == "builtin" and human.tools.get().qualified_name == "human.ask"
    with pytest.raises(Conflict):
        services.sync_server(actor=member_actor(owner), server_id=human.id, review=inbox)
