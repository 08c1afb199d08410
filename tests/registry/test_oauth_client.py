"""Airlock as an OAuth client of an MCP server: a real authorization server (django-oauth-toolkit, its own
process) and an MCP server of our own built with the SDK's server-side auth, both on loopback."""

from __future__ import annotations

import json
import re
import time
from html import unescape

import pytest
from django.urls import reverse

from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.audit.models import AuditEvent
from apps.audit.org_secrets import redact_outside
from apps.crews import services as crew_services
from apps.registry import oauth, services
from apps.registry.models import McpServer, ServerStatus
from apps.registry.pool import call_tool
from apps.runs import services as run_services
from apps.runs import worker
from apps.runs.models import RunEvent, ToolCall
from tests.conftest import signed_in
from tests.factories import token_for
from tests.registry.conftest import register
from tests.registry.oauth_as import callback_query, consent, protected_server
from tests.registry.oauth_as.server import PREREGISTERED, PREREGISTERED_SECRET

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def protected(tmp_path):
    with protected_server(tmp_path) as p:
        yield p


def run_calling_whoami(actor):
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    agent = agent_services.create_agent(
        actor=actor, name="Asker", connection_id=connection.id,
        script=[{"call": [{"tool": "guarded.whoami", "args": {}}]}, {"say": "Asked.\nSTATUS: done\nREASON: ok"}],
        grants=[{"tool": "guarded.whoami", "policy": "auto"}])
    crew = crew_services.create_crew(actor=actor, name="Ask", process="sequential", inputs=[],
                                     tasks=[{"name": "ask", "agent_id": agent.id, "description": "Ask.",
                                             "context": []}])
    run = run_services.start_run(actor=actor, crew_id=crew.id, inputs={}, enqueue=False)
    return worker.drive_run(run_id=run.id)


def authorize_in_browser(client, server, protected, **form) -> None:
    """The admin's part: the Authorize button, the authorization server's consent, the callback."""
    started = client.post(reverse("web:server_authorize", args=[server.id]), form)
    assert started.status_code == 200, started.content[:500]
    authorization_url = unescape(re.search(r'href="([^"]+)"[^>]*data-testid="continue-authorization"',
                                           started.content.decode()).group(1))
    assert authorization_url.startswith(protected.as_url + "/o/authorize/")
    params = callback_query(authorization_url)
    assert params["code_challenge_method"] == "S256" and params["resource"] == protected.mcp_url
    assert params["scope"] == "mcp:tools"
    back = callback_query(consent(authorization_url))
    done = client.get(reverse("web:server_oauth_callback"), back)
    assert done.status_code == 302 and done["Location"] == reverse("web:server", args=[server.id])


def test_registering_an_oauth_server_asks_for_authorization_then_lists_and_calls_its_tools(
        client, owner, actor, protected):
    server = register(actor, name="guarded", transport="http", url=protected.mcp_url)
    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert report.status == ServerStatus.NEEDS_AUTH
    signed_in(client, owner)
    page = client.get(reverse("web:server", args=[server.id])).content.decode()
    assert "Needs authorization" in page and 'data-testid="authorize"' in page
    assert "1 needs authorization" in client.get(reverse("web:dashboard")).content.decode()

    authorize_in_browser(client, server, protected)
    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert report.status == ServerStatus.OK, report.error
    server.refresh_from_db()
    assert [t.name for t in server.tools.all()] == ["whoami"]
    result = call_tool(server.id, "whoami", {}, org_id=server.org_id)
    assert not result.is_error and protected.mcp_url in str(result.content)
    run = run_calling_whoami(actor)
    assert run.status == "succeeded", run.error
    [call] = ToolCall.objects.filter(run=run)
    assert call.state == "succeeded" and protected.mcp_url in json.dumps(call.result)

    # Tokens are write-only: not on the page, not in the API, not in the audit trail
    token = server.oauth_secrets["access_token"]
    assert token not in client.get(reverse("web:server", args=[server.id])).content.decode()
    api = client.get(f"/api/v1/servers/{server.id}", HTTP_AUTHORIZATION=f"Bearer {token_for(server.org, 'admin')}")
    assert token not in api.content.decode() and api.json()["uses_oauth"] is True
    assert not any(token in str(e.data) for e in AuditEvent.objects.filter(org_id=server.org_id))
    assert not any(token in json.dumps(e.data) for e in RunEvent.objects.filter(run=run))
    # ... and masked wherever a server or provider would echo them back
    refresh = server.oauth_secrets["refresh_token"]
    assert token not in redact_outside(f"bad token {token} / {refresh}", org_id=server.org_id)
    assert refresh not in redact_outside(f"bad token {token} / {refresh}", org_id=server.org_id)


def test_an_expiring_token_is_refreshed_and_a_refused_refresh_means_needs_authorization(
        client, owner, actor, tmp_path):
    with protected_server(tmp_path, token_seconds=8) as protected:  # shorter than REFRESH_MARGIN_S
        server = register(actor, name="guarded", transport="http", url=protected.mcp_url)
        signed_in(client, owner)
        authorize_in_browser(client, server, protected)
        server.refresh_from_db()
        first = server.oauth_secrets["access_token"]
        # A token shorter-lived than the margin is not refreshed on every use (each refresh would revoke
        # the token another process is using): it is used until half its life is gone ...
        assert services.sync_server(actor=actor, server_id=server.id, review=inbox).status == ServerStatus.OK
        server.refresh_from_db()
        assert server.oauth_secrets["access_token"] == first
        # ... then refreshed before use
        time.sleep(max(0.0, oauth.refresh_due(server.oauth) - time.time()) + 0.2)
        assert services.sync_server(actor=actor, server_id=server.id, review=inbox).status == ServerStatus.OK
        server.refresh_from_db()
        assert server.oauth_secrets["access_token"] != first
        assert server.oauth["expires_at"] > time.time()
        assert not call_tool(server.id, "whoami", {}, org_id=server.org_id).is_error

        import httpx2
        httpx2.post(f"{protected.as_url}/test/revoke-all/", trust_env=False)  # the provider revokes Airlock
        # The token is not due, but the server refuses it: one refresh is tried, and refused
        report = services.sync_server(actor=actor, server_id=server.id, review=inbox)
        assert report.status == ServerStatus.NEEDS_AUTH
        server.refresh_from_db()
        assert server.status == ServerStatus.NEEDS_AUTH and "authorize Airlock again" in server.last_error
        api = client.get(f"/api/v1/servers/{server.id}",
                         HTTP_AUTHORIZATION=f"Bearer {token_for(server.org, 'admin')}").json()
        assert api["status"] == "needs_auth"

        authorize_in_browser(client, server, protected)  # one click to re-authorize
        assert services.sync_server(actor=actor, server_id=server.id, review=inbox).status == ServerStatus.OK

        # Pointed elsewhere, the server forgets its tokens: they were issued for the old resource
        server = services.update_server(actor=actor, server_id=server.id, url="https://other.example/mcp",
                                        sync=False, review=inbox)
        assert server.oauth is None and server.oauth_secrets is None
        assert "Authorization" not in services.spec_for(server).headers
        assert McpServer.objects.get(pk=server.id).status == ServerStatus.OK


def test_a_callback_with_another_state_is_refused_and_stores_nothing(client, owner, actor, protected):
    server = register(actor, name="guarded", transport="http", url=protected.mcp_url)
    signed_in(client, owner)
    assert client.post(reverse("web:server_authorize", args=[server.id])).status_code == 200
    answer = client.get(reverse("web:server_oauth_callback"), {"code": "stolen", "state": "not-the-one"},
                        follow=True)
    assert "does not belong to this request" in answer.content.decode()
    server.refresh_from_db()
    assert server.oauth is None and server.oauth_secrets is None
    # The flow is used once: the same session cannot replay a callback either
    again = client.get(reverse("web:server_oauth_callback"), {"code": "x", "state": "y"}, follow=True)
    assert "No authorization was under way" in again.content.decode()


def test_a_pre_registered_client_id_is_used_instead_of_registering(client, owner, actor, tmp_path):
    with protected_server(tmp_path, redirect_uris=("http://testserver/servers/oauth/callback/",)) as protected:
        server = register(actor, name="guarded", transport="http", url=protected.mcp_url)
        signed_in(client, owner)
        authorize_in_browser(client, server, protected, client_id=PREREGISTERED, client_secret=PREREGISTERED_SECRET)
        server.refresh_from_db()
        assert server.oauth["client"]["client_id"] == PREREGISTERED
        assert "client_secret" not in server.oauth["client"]  # the secret is kept with the tokens, encrypted
        assert server.oauth_secrets["client_secret"] == PREREGISTERED_SECRET
        assert services.sync_server(actor=actor, server_id=server.id, review=inbox).status == ServerStatus.OK

        # Pointed elsewhere, the server forgets its tokens: they were issued for the old resource
        server = services.update_server(actor=actor, server_id=server.id, url="https://other.example/mcp",
                                        sync=False, review=inbox)
        assert server.oauth is None and server.oauth_secrets is None
        assert "Authorization" not in services.spec_for(server).headers
