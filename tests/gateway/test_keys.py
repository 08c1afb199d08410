"""Gateway keys through the API (admins only, shown once, another org's is a 404) and the
Settings page (create shows the key once with the host config; revoke)."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.gateway import selectors
from apps.gateway.models import GatewayKey
from tests.conftest import signed_in
from tests.factories import token_for

pytestmark = pytest.mark.django_db


def test_admins_create_list_and_revoke_keys_and_the_value_is_shown_once(setup):
    created = setup.create_key(name="Cursor", rate_limit_per_minute=30)
    raw = created["value"]
    assert raw.startswith("agw_") and created["url"].endswith("/mcp")
    key = GatewayKey.objects.get(id=created["key"]["id"])
    assert key.key_hash == selectors.hash_key(raw) and raw not in str(GatewayKey.objects.values().first())
    listed = setup.admin_api.get("/api/v1/gateway-keys").json()
    assert listed["count"] == 1 and listed["items"][0]["agent"] == "Desk via gateway"
    assert "value" not in listed["items"][0] and raw not in str(listed)
    assert setup.admin_api.delete(f"/api/v1/gateway-keys/{key.id}").status_code == 204
    assert setup.admin_api.get("/api/v1/gateway-keys").json()["items"][0]["revoked_at"] is not None
    assert selectors.key_standing(raw).key is None
    actions = set(AuditEvent.objects.filter(org=setup.org).values_list("action", flat=True))
    assert {"gateway_key.created", "gateway_key.revoked"} <= actions


def test_only_admins_manage_keys_and_another_orgs_key_is_not_found(setup, outsider):
    builder = Client(headers={"Authorization": f"Bearer {token_for(setup.org, 'builder', name='b')}"})
    body = {"name": "x", "agent_id": str(setup.agent.id)}
    assert builder.post("/api/v1/gateway-keys", body, content_type="application/json").status_code == 403
    assert builder.get("/api/v1/gateway-keys").status_code == 403
    key_id = setup.create_key()["key"]["id"]
    foreign = Client(headers={"Authorization": f"Bearer {token_for(outsider.org, 'admin', name='o')}"})
    assert foreign.delete(f"/api/v1/gateway-keys/{key_id}").status_code == 404
    assert foreign.get("/api/v1/gateway-keys").json()["count"] == 0
    bad = setup.admin_api.post("/api/v1/gateway-keys", {"name": "x", "agent_id": str(setup.agent.id),
                                                        "rate_limit_per_minute": 0},
                               content_type="application/json")
    assert bad.status_code == 422


def test_the_settings_page_shows_the_key_once_with_the_host_config(client, setup, owner):
    signed_in(client, owner)
    page = client.get("/settings/gateway/")
    assert page.status_code == 200 and "No gateway keys yet" in page.content.decode()
    created = client.post("/settings/gateway/", {"name": "Ada's Claude Desktop", "agent": str(setup.agent.id),
                                                 "rate_limit_per_minute": 60, "hold_wait_s": 60})
    html = created.content.decode()
    key = GatewayKey.objects.get(name="Ada's Claude Desktop")
    raw = html.split('id="new-gateway-key" class="secret-once">')[1].split("<")[0]
    assert selectors.hash_key(raw) == key.key_hash
    assert "&quot;Authorization&quot;: &quot;Bearer " + raw in html and "http://127.0.0.1:8001/mcp" in html
    assert f"npx mcp-remote http://127.0.0.1:8001/mcp --header &quot;Authorization: Bearer {raw}&quot;" in html
    again = client.get("/settings/gateway/").content.decode()
    assert raw not in again and key.prefix in again
    revoked = client.post(f"/settings/gateway/{key.id}/revoke/", follow=True)
    assert revoked.status_code == 200 and "revoked" in revoked.content.decode()
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_the_page_refuses_a_missing_name_and_non_admins(client, setup, owner, viewer):
    signed_in(client, owner)
    invalid = client.post("/settings/gateway/", {"name": "", "agent": str(setup.agent.id),
                                                 "rate_limit_per_minute": 60, "hold_wait_s": 60})
    assert invalid.status_code == 422 and not GatewayKey.objects.exists()
    signed_in(client, viewer)
    assert client.get("/settings/gateway/").status_code == 403
