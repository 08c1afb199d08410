"""SSRF through every URL field Airlock fetches, with AIRLOCK_EGRESS_ALLOW_PRIVATE off: an LLM
connection's base URL (create, PATCH, the web forms, "Test connection"), an MCP server's URL (PATCH;
registration and sync are in test_ssrf.py) and a webhook's URL (save and delivery). Each internal
spelling is refused at save with an error naming the field, and again at connect time for a URL
saved while it was allowed; a loopback listener proves that no connection was ever made."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import override_settings

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.agents.models import LlmConnection
from apps.core.egress import EgressRefused
from apps.core.errors import ValidationFailed
from apps.notifications import services as notifications
from apps.notifications.models import Webhook, WebhookDelivery
from apps.registry import services as registry
from tests.factories import token_for
from tests.processes import run_async
from tests.security.test_ssrf import Listener

pytestmark = pytest.mark.django_db

# One of each spelling class; {port} is a loopback listener that counts connections.
FORMS = {
    "dotted": "http://127.0.0.1:{port}/v1",
    "decimal": "http://2130706433:{port}/v1",
    "hex": "http://0x7f000001:{port}/v1",
    "octal": "http://0177.0.0.1:{port}/v1",
    "ipv4-mapped ipv6": "http://[::ffff:127.0.0.1]:{port}/v1",
    "zone id": "http://[fe80::1%25eth0]:{port}/v1",
    "loopback zone id": "http://[::1%25lo]:{port}/v1",
    "trailing dot": "http://localhost.:{port}/v1",
    "dotted trailing dot": "http://127.0.0.1.:{port}/v1",
    "name under localhost": "http://models.localhost:{port}/v1",
    "dns name resolving to loopback": "http://{hostname}:{port}/v1",
    "cloud metadata": "http://169.254.169.254/latest/meta-data/",
}


@pytest.fixture
def listener():
    item = Listener()
    yield item
    item.close()


@pytest.fixture
def no_private():
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False, AIRLOCK_EGRESS_ALLOW=[]):
        yield


def forms(port: int) -> dict[str, str]:
    return {name: url.format(port=port, hostname=socket.gethostname()) for name, url in FORMS.items()}


def api(client, org, method: str, path: str, body=None, role: str = "admin"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, role)}"}
    return getattr(client, method)(path, body, content_type="application/json", **headers)


def assert_blocked(message: str, form: str) -> None:
    assert "blocked" in message and "AIRLOCK_EGRESS_ALLOW" in message, (form, message)


# --- LLM connections: base_url ---------------------------------------------------------------

def test_creating_a_connection_with_an_internal_base_url_is_refused_naming_base_url(owner, listener, no_private):
    actor = member_actor(owner)
    for provider in ("openai_compatible", "openai", "anthropic"):
        for form, url in forms(listener.port).items():
            with pytest.raises(ValidationFailed) as caught:
                agent_services.create_connection(actor=actor, name=f"{provider} {form}", provider=provider,
                                                 base_url=url)
            assert list(caught.value.errors) == ["base_url"], (form, caught.value.errors)
            assert_blocked(caught.value.errors["base_url"], form)
    assert not LlmConnection.objects.filter(org=owner.org).exists()
    assert listener.connections == 0


def test_the_api_answers_422_naming_base_url_on_create_and_patch(client, org, listener, no_private):
    public = api(client, org, "post", "/api/v1/llm-connections",
                 {"name": "Gateway", "provider": "openai_compatible", "base_url": "https://gateway.example.invalid/v1"})
    assert public.status_code == 201, public.content  # a public name (not resolvable here) is saved
    for form, url in forms(listener.port).items():
        created = api(client, org, "post", "/api/v1/llm-connections",
                      {"name": form, "provider": "openai_compatible", "base_url": url})
        assert created.status_code == 422, (form, created.content)
        assert [e["field"] for e in created.json()["errors"]] == ["base_url"], form
        patched = api(client, org, "patch", f"/api/v1/llm-connections/{public.json()['id']}", {"base_url": url})
        assert patched.status_code == 422, (form, patched.content)
        assert [e["field"] for e in patched.json()["errors"]] == ["base_url"], form
    assert LlmConnection.objects.get(org=org).base_url == "https://gateway.example.invalid/v1"
    assert listener.connections == 0


def test_the_connection_forms_show_the_reason_at_the_base_url_field(client, owner, listener, no_private):
    client.force_login(owner.user)
    url = f"http://localhost.:{listener.port}/v1"
    created = client.post("/agents/connections/", {"name": "Local", "provider": "openai_compatible", "base_url": url})
    assert created.status_code == 422
    assert "AIRLOCK_EGRESS_ALLOW=localhost" in created.content.decode()
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=True):
        connection = agent_services.create_connection(actor=member_actor(owner), name="Kept", provider="openai",
                                                      base_url="")
    edited = client.post(f"/agents/connections/{connection.id}/", {"name": "Kept", "provider": "openai_compatible",
                                                                  "base_url": "http://169.254.169.254/v1"})
    assert edited.status_code == 422
    assert "169.254.169.254 is a loopback/private" in edited.content.decode()
    connection.refresh_from_db()
    assert connection.base_url == ""
    assert listener.connections == 0


def test_test_connection_refuses_at_connect_a_base_url_saved_while_allowed(client, org, owner, listener):
    """The URLs were saved while AIRLOCK_EGRESS_ALLOW_PRIVATE was on; once it is off, the test button
    refuses every one of them before any connection is made, for each provider's SDK."""
    actor = member_actor(owner)
    saved = [agent_services.create_connection(actor=actor, name=f"{provider} {form}", provider=provider,
                                              base_url=url, default_model="m")
             for provider in ("openai_compatible", "anthropic")
             for form, url in forms(listener.port).items() if form not in ("zone id", "cloud metadata")]
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False):
        for connection in saved:
            result = api(client, org, "post", f"/api/v1/llm-connections/{connection.id}/test", {}).json()
            assert result["ok"] is False, (connection.name, result)
            # refused by the guard, or (octal) a spelling the HTTP client will not even parse
            assert "blocked" in result["message"] or "not a URL" in result["message"], (connection.name, result)
    assert listener.connections == 0


class _Redirector(BaseHTTPRequestHandler):
    """An allowed model server that answers every request with a redirect to an internal address."""

    target = ""
    requests = 0

    def do_POST(self):
        type(self).requests += 1
        self.send_response(307)
        self.send_header("Location", self.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def redirector(listener):
    """On 127.0.0.2, which the operator allowed (AIRLOCK_EGRESS_ALLOW), redirecting to the listener on 127.0.0.1."""
    _Redirector.target = f"http://127.0.0.1:{listener.port}/v1/chat/completions"
    _Redirector.requests = 0
    httpd = ThreadingHTTPServer(("127.0.0.2", 0), _Redirector)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False, AIRLOCK_EGRESS_ALLOW=["127.0.0.2"]):
        yield f"http://127.0.0.2:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


@pytest.mark.parametrize("provider", ["openai_compatible", "anthropic"])
def test_a_redirect_from_an_allowed_model_server_to_an_internal_address_is_not_reached(owner, listener, redirector,
                                                                                       provider):
    base_url = redirector + ("/v1" if provider == "openai_compatible" else "")
    connection = agent_services.create_connection(actor=member_actor(owner), name="Redirects", provider=provider,
                                                  base_url=base_url, default_model="m")
    result = agent_services.test_connection(actor=member_actor(owner), connection_id=connection.id)
    assert _Redirector.requests >= 1  # the allowed server was reached: what follows is about its redirect
    assert result.ok is False and "307" in result.message, result.message
    assert listener.connections == 0


def test_the_model_http_client_checks_every_redirect_hop(listener, redirector):
    """The SDKs do not follow redirects today; if one ever does, each hop's connect is still checked."""
    from apps.agents.providers import guarded_http_client

    async def follow() -> BaseException | None:
        async with guarded_http_client(5) as http:
            try:
                await http.post(redirector + "/v1/chat/completions", json={}, follow_redirects=True)
            except Exception as exc:
                return exc
        return None

    error = run_async(follow())
    assert _Redirector.requests == 1
    assert isinstance(error, EgressRefused) and "127.0.0.1 is a loopback" in str(error), error
    assert listener.connections == 0


# --- MCP servers: url -----------------------------------------------------------------------

def test_patching_a_servers_url_to_an_internal_address_is_refused_naming_url(client, org, owner, listener,
                                                                             no_private):
    server = registry.create_server(actor=member_actor(owner), name="docs", transport="http", trust_tier="internal",
                                    url="https://mcp.example.invalid/mcp", sync=False)
    for form, url in forms(listener.port).items():
        response = api(client, org, "patch", f"/api/v1/servers/{server.id}", {"url": url})
        assert response.status_code == 422, (form, response.content)
        assert [e["field"] for e in response.json()["errors"]] == ["url"], form
        assert_blocked(response.json()["errors"][0]["message"], form)
    server.refresh_from_db()
    assert server.url == "https://mcp.example.invalid/mcp"
    assert listener.connections == 0


# --- webhooks: url --------------------------------------------------------------------------

def test_saving_a_webhook_with_an_internal_url_is_refused_naming_url(client, org, owner, listener, no_private):
    for form, url in forms(listener.port).items():
        response = api(client, org, "post", "/api/v1/webhooks", {"name": form, "url": url, "events": ["run.finished"]})
        assert response.status_code == 422, (form, response.content)
        assert [e["field"] for e in response.json()["errors"]] == ["url"], form
    client.force_login(owner.user)
    page = client.post("/settings/notifications/", {"name": "Ops", "url": f"http://localhost.:{listener.port}/",
                                                    "events": ["run.finished"]})
    assert page.status_code == 422 and "AIRLOCK_EGRESS_ALLOW=localhost" in page.content.decode()
    assert not Webhook.objects.filter(org=org).exists()
    assert listener.connections == 0


def test_a_webhook_saved_while_allowed_is_refused_at_delivery(org, owner, listener):
    actor = member_actor(owner)
    hooks = [notifications.create_webhook(actor=actor, name=form, url=url, events=["run.finished"])[0]
             for form, url in forms(listener.port).items() if form not in ("zone id", "cloud metadata")]
    notifications.notify(org_id=org.id, event="run.finished", payload={"run_id": "r-1", "status": "succeeded"})
    deliveries = WebhookDelivery.objects.filter(webhook__in=hooks)
    assert deliveries.count() == len(hooks)
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False):
        for delivery in deliveries:
            notifications.deliver(delivery_id=delivery.id)
    for delivery in deliveries.all():
        assert delivery.status == "pending" and delivery.response_status is None, delivery.webhook.url
        # refused by the guard, or (octal) a spelling the HTTP client will not even parse
        assert "blocked" in delivery.last_error or "InvalidURL" in delivery.last_error, delivery.last_error
    assert listener.connections == 0
