"""The gateway as an OAuth protected resource with Airlock's web app as its authorization server: the
SDK's OAuth client (`mcp.client.auth`) discovers, registers, goes through the consent page (a signed-in
person picks the agent) and lists exactly that agent's tools; a write is held in the inbox; refresh,
expiry and revocation from Settings; only agents of the person's organisations, by role, can be picked."""

from __future__ import annotations

import base64
import hashlib
import secrets
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.to_thread
import httpx2
import pytest
from django.test import Client as DjangoClient
from django.utils import timezone
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from oauth2_provider.models import AccessToken

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.audit.models import AuditEvent
from apps.gateway.models import OAuthGrant
from tests.conftest import signed_in
from tests.factories import add_member, make_org, owner_of
from tests.gateway.conftest import OFFERED, consented_redirect, wait_for_ledgers
from tests.gateway.test_policy_and_holds import approve_when_pending
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"order_id": "A-1003", "amount_cents": 700, "request_id": "refund-A-1003"}


class Memory:
    """The host's token storage (the SDK's TokenStorage protocol)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


def consent(browser: DjangoClient, authorize_url: str, agent_id: str) -> AuthorizationCodeResult:
    """The signed-in person on the consent page: sees the host, picks the agent, allows."""
    query = parse_qs(urlsplit(consented_redirect(browser, authorize_url, agent_id)).query)
    return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0],
                                   iss=query.get("iss", [None])[0])


def provider(url: str, storage: Memory, browser: DjangoClient, agent_id: str, seen: list,
             consented: list) -> OAuthClientProvider:
    async def redirect(authorize_url: str) -> None:
        seen.append(authorize_url)

    async def callback() -> AuthorizationCodeResult:
        consented.append(await anyio.to_thread.run_sync(consent, browser, seen[-1], agent_id))
        return consented[-1]

    metadata = OAuthClientMetadata(client_name="Test host", redirect_uris=["http://127.0.0.1:9/callback"],
                                   grant_types=["authorization_code", "refresh_token"], response_types=["code"],
                                   token_endpoint_auth_method="none")
    return OAuthClientProvider(url, metadata, storage, redirect_handler=redirect, callback_handler=callback)


def bearer_status(url: str, token: str) -> httpx2.Response:
    return httpx2.post(url, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                                     "Accept": "application/json, text/event-stream",
                                     "MCP-Protocol-Version": "2025-06-18"},
                       json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                           "protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "raw", "version": "1"}}}, timeout=10)


def test_an_oauth_only_host_connects_as_the_picked_agent_and_its_token_refreshes_expires_and_is_revoked(
        oauth_gateway, setup, live_url):
    url, log = oauth_gateway
    owner = owner_of(setup.org)
    browser = signed_in(DjangoClient(HTTP_HOST=urlsplit(live_url).netloc), owner)  # the issuer's host: `iss`
    storage, seen, consented = Memory(), [], []

    # Without a token: 401 naming where the protected resource metadata is, and the metadata names Airlock.
    anonymous = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10)
    assert anonymous.status_code == 401
    assert "resource_metadata=" in anonymous.headers["www-authenticate"]
    metadata = httpx2.get(url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp", timeout=10).json()
    assert metadata["resource"] == url and metadata["authorization_servers"] == [live_url]

    async def connect_and_work():
        http = httpx2.AsyncClient(auth=provider(url, storage, browser, str(setup.agent.id), seen, consented),
                                  timeout=httpx2.Timeout(60))
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            held = await client.call_tool("orders.refund_order", REFUND)
            return names, held

    decisions: list = []
    person = approve_when_pending(setup, decisions)
    names, held = run_async(connect_and_work())
    person.join(timeout=60)
    assert names == OFFERED
    assert decisions and decisions[0][0]["tool"] == "orders.refund_order" and decisions[0][1] == 200
    assert not held.is_error, held
    assert "code_challenge=" in seen[0] and "resource=" in seen[0]
    assert consented and consented[0].iss == live_url  # RFC 9207: the SDK checked it against the issuer

    grant = OAuthGrant.objects.get(org=setup.org)
    assert grant.agent_id == setup.agent.id and grant.user_id == owner.user_id and grant.revoked_at is None
    access = storage.tokens.access_token
    assert AccessToken.objects.get(token_checksum=hashlib.sha256(access.encode()).hexdigest()).expires > timezone.now()

    # Refreshable: the refresh token gets a new access token the gateway accepts.
    refreshed = httpx2.post(f"{live_url}/o/token/", data={
        "grant_type": "refresh_token", "refresh_token": storage.tokens.refresh_token,
        "client_id": storage.client.client_id}, timeout=10)
    assert refreshed.status_code == 200, refreshed.text
    fresh = refreshed.json()
    assert bearer_status(url, fresh["access_token"]).status_code == 200

    # Expired: refused with the reason.
    AccessToken.objects.filter(token_checksum=hashlib.sha256(fresh["access_token"].encode()).hexdigest()).update(
        expires=timezone.now() - timedelta(seconds=1))
    expired = bearer_status(url, fresh["access_token"])
    assert expired.status_code == 401 and "expired" in expired.json()["error_description"]

    # Settings → MCP gateway lists the host beside the keys (which keep working); revoking ends its tokens.
    key = setup.create_key(name="Pasted key")["value"]
    page = browser.get("/settings/gateway/")
    assert page.status_code == 200 and "Test host" in page.content.decode() and "Pasted key" in page.content.decode()
    revoked = browser.post(f"/settings/gateway/oauth/{grant.id}/revoke/")
    assert revoked.status_code == 302
    second = httpx2.post(f"{live_url}/o/token/", data={
        "grant_type": "refresh_token", "refresh_token": fresh["refresh_token"],
        "client_id": storage.client.client_id}, timeout=10)
    assert second.status_code == 400
    after = bearer_status(url, fresh["access_token"])
    assert after.status_code == 401
    assert bearer_status(url, key).status_code == 200

    actions = list(AuditEvent.objects.filter(org=setup.org).values_list("action", "data"))
    assert {"gateway_oauth.granted", "gateway_oauth.revoked"} <= {a for a, _ in actions}
    wait_for_ledgers(url)
    for token in (access, fresh["access_token"], fresh["refresh_token"]):
        assert token not in str(actions) and token not in log.read_text()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def test_only_agents_of_the_persons_organisations_where_they_manage_keys_can_be_picked(setup, client):
    other = make_org("Globex")
    other_actor = member_actor(owner_of(other))
    connection_ = agent_services.create_connection(actor=other_actor, name="Scripted", provider="scripted")
    foreign = agent_services.create_agent(actor=other_actor, name="Globex agent", connection_id=connection_.id,
                                          script=[], grants=[])
    approver_there = add_member(other, "approver", email="ada@example.com")  # a member, but may not manage keys
    acme_admin = add_member(setup.org, "admin", email="ada-admin@example.com")
    registered = client.post("/o/register/", {"client_name": "Host", "redirect_uris": ["http://127.0.0.1:9/cb"],
                                              "token_endpoint_auth_method": "none"},
                             content_type="application/json")
    assert registered.status_code == 201, registered.content
    client_id = registered.json()["client_id"]
    _, challenge = pkce()
    query = {"response_type": "code", "client_id": client_id, "redirect_uri": "http://127.0.0.1:9/cb",
             "code_challenge": challenge, "code_challenge_method": "S256", "state": "s1", "scope": "mcp:tools"}

    signed_in(client, acme_admin)
    page = client.get("/o/authorize/", query)
    assert page.status_code == 200
    offered = dict(page.context["form"].fields["agent"].choices)
    assert str(setup.agent.id) in offered and str(foreign.id) not in offered
    fields = {name: page.context["form"][name].value() or "" for name in page.context["form"].fields
              if page.context["form"][name].is_hidden}
    picked = client.post("/o/authorize/", {**fields, "agent": str(foreign.id), "allow": "Authorize"})
    assert picked.status_code == 422 and "Select a valid choice" in picked.content.decode()
    assert not OAuthGrant.objects.exists()

    signed_in(client, approver_there)  # an approver in Globex: offered nothing there
    page = client.get("/o/authorize/", query)
    assert str(foreign.id) not in dict(page.context["form"].fields["agent"].choices)
    assert "You manage no agents" in page.content.decode()

    anonymous = DjangoClient().get("/o/authorize/", query)
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]
