"""A gateway call to an OAuth-protected server refreshes the server's access token first when it is due
(apps/registry/oauth.refresh_due), as a run's call does; a refused refresh fails the call with "needs
authorization". The server and its authorization server are the registry tests' own (tests/registry/oauth_as,
tests/registry/servers/oauth_http.py), with short-lived tokens."""

from __future__ import annotations

import time

import httpx2
import pytest

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.gateway import services as gateway_services
from apps.registry import oauth
from apps.registry import services as registry_services
from apps.registry.models import McpServer, ServerStatus, Tool
from apps.registry.pool import pool
from apps.runs.models import ToolCall
from tests.conftest import signed_in
from tests.gateway.conftest import mcp_client, wait_for_ledgers, wait_until
from tests.processes import run_async
from tests.registry.oauth_as import protected_server
from tests.registry.test_oauth_client import authorize_in_browser

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_call_through_the_gateway_refreshes_a_due_token_first_and_a_refused_refresh_needs_authorization(
        gateway_url, client, org, owner, tmp_path):
    actor = member_actor(owner)
    with protected_server(tmp_path, token_seconds=12) as protected:  # refreshed at half its life
        server = registry_services.create_server(actor=actor, name="guarded", transport="http",
                                                 trust_tier="internal", url=protected.mcp_url, sync=False)
        authorize_in_browser(signed_in(client, owner), server, protected)
        assert registry_services.sync_server(actor=actor, server_id=server.id, review=inbox).status == ServerStatus.OK
        whoami = Tool.objects.get(server=server, name="whoami")
        registry_services.pin_tool(actor=actor, tool_id=whoami.id, review=inbox)
        registry_services.update_tool(actor=actor, tool_id=whoami.id, risk="read", review=inbox)
        connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
        agent = agent_services.create_agent(actor=actor, name="Guarded caller", connection_id=connection.id,
                                            script=[], grants=[{"tool": "guarded.whoami", "policy": "auto"}])
        _, key = gateway_services.create_key(actor=actor, name="Host", agent_id=agent.id)

        def call_whoami() -> str:
            async def scenario():
                async with mcp_client(gateway_url, key) as host:
                    result = await host.call_tool("guarded.whoami", {})
                    return ("ERROR " if result.is_error else "") + result.content[-1].text  # after any note
            return run_async(scenario())

        first = McpServer.objects.get(pk=server.pk).oauth_secrets["access_token"]
        assert call_whoami() == f"token for {protected.mcp_url}"
        # Past the token's expiry: the gateway's view still holds the first token, which the server now refuses
        server.refresh_from_db()
        time.sleep(max(0.0, server.oauth["expires_at"] - time.time()) + 1)
        assert call_whoami() == f"token for {protected.mcp_url}"
        server.refresh_from_db()
        assert server.oauth_secrets["access_token"] != first and server.oauth["expires_at"] > time.time()

        httpx2.post(f"{protected.as_url}/test/revoke-all/", trust_env=False)  # the provider revokes Airlock
        time.sleep(max(0.0, oauth.refresh_due(server.oauth) - time.time()) + 0.5)
        refused = call_whoami()
        assert refused.startswith("ERROR") and "needs authorization" in refused
        server.refresh_from_db()
        assert server.status == ServerStatus.NEEDS_AUTH and "authorize Airlock again" in server.last_error
        assert first not in refused and server.oauth_secrets["access_token"] not in refused

        def settled():  # the gateway's ledger writer records a call's `dispatched` and its outcome in turn
            rows = list(ToolCall.objects.filter(org_id=org.id).order_by("created_at"))
            return rows if len(rows) == 3 and all(r.state != "dispatched" for r in rows) else None

        rows = wait_until(settled)
        assert [r.state for r in rows] == ["succeeded", "succeeded", "failed"]
        pool.close_all()
        wait_for_ledgers(gateway_url)
