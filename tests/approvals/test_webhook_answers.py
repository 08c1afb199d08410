"""A webhook receiver's error answer is kept (people need to see why it refused), without the
organisation's secrets: a receiver whose signature check failed may quote the secret it checked with."""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client

from apps.accounts.actors import member_actor
from apps.notifications import services as notifications
from apps.notifications.models import WebhookDelivery
from tests.factories import token_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def quoting_receiver():
    """Answers 401 with a JSON body that quotes whatever `answer` holds."""

    class Handler(BaseHTTPRequestHandler):
        answer = b""

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(Handler.answer)))
            self.end_headers()
            self.wfile.write(Handler.answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Handler, f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def test_a_refusal_that_quotes_the_signing_secret_is_kept_without_it(org, owner, quoting_receiver):
    handler, url = quoting_receiver
    secret = f"whsec_{secrets.token_urlsafe(24)}"
    handler.answer = json.dumps({"error": f"bad signature; expected HMAC with {secret}"}).encode()
    actor = member_actor(owner)
    hook, _ = notifications.create_webhook(actor=actor, name="Refuser", url=url, events=["*"], secret=secret)
    notifications.notify(org_id=org.id, event="run.finished", payload={"status": "failed"})
    delivery = WebhookDelivery.objects.get(webhook=hook)

    assert notifications.deliver(delivery_id=delivery.id) == "pending"  # refused: tried again later
    delivery.refresh_from_db()
    assert delivery.response_status == 401
    assert delivery.last_error.startswith("The receiver answered HTTP 401: ")
    assert "bad signature; expected HMAC with [redacted]" in delivery.last_error
    assert secret not in delivery.last_error
    admin = Client(headers={"Authorization": f"Bearer {token_for(org, 'admin')}"})
    listed = admin.get("/api/v1/webhooks/deliveries").content.decode()
    assert "expected HMAC with [redacted]" in listed and secret not in listed


def test_a_refusal_that_quotes_another_secret_of_the_org_is_kept_without_it(org, owner, quoting_receiver):
    from apps.agents import services as agent_services

    handler, url = quoting_receiver
    key = f"cnry-{secrets.token_hex(10)}"  # no known shape: only its value can find it
    actor = member_actor(owner)
    agent_services.create_connection(actor=actor, name="Local model", provider="openai_compatible",
                                     base_url="http://127.0.0.1:9/v1", api_key=key)
    handler.answer = json.dumps({"error": "forbidden", "config": {"upstream_key": key}}).encode()
    hook, _ = notifications.create_webhook(actor=actor, name="Refuser", url=url, events=["*"])
    notifications.notify(org_id=org.id, event="run.finished", payload={"status": "failed"})
    delivery = WebhookDelivery.objects.get(webhook=hook)
    notifications.deliver(delivery_id=delivery.id)
    delivery.refresh_from_db()
    assert "HTTP 401" in delivery.last_error and "forbidden" in delivery.last_error
    assert key not in delivery.last_error
