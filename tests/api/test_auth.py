"""Bearer tokens, session auth with CSRF, and the error shapes every client relies on."""

from __future__ import annotations

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from apps.accounts import services
from apps.accounts.actors import member_actor
from tests.factories import owner_of, token_for

pytestmark = pytest.mark.django_db


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_me_tells_the_caller_and_org(client, org):
    token = token_for(org, "builder", name="ci")
    response = client.get("/api/v1/me", **bearer(token))
    assert response.status_code == 200
    assert response.json() == {"org": {"id": str(org.id), "name": "Acme", "slug": org.slug},
                               "role": "builder", "actor": f"token:ci ({owner_of(org).user.email})",
                               "kind": "token"}


def test_it_requires_a_token(client):
    response = client.get("/api/v1/me")
    assert response.status_code == 401
    assert "Bearer" in response.json()["detail"]


def test_it_rejects_an_unknown_token(client, org):
    assert client.get("/api/v1/me", **bearer("al_not-a-real-token-value-at-all")).status_code == 401


def test_a_revoked_token_stops_working_at_once(client, org, owner):
    token = token_for(org, "admin")
    assert client.get("/api/v1/me", **bearer(token)).status_code == 200
    token_id = client.get("/api/v1/tokens", **bearer(token)).json()["items"][0]["id"]
    services.revoke_api_token(actor=member_actor(owner), token_id=token_id)
    assert client.get("/api/v1/me", **bearer(token)).status_code == 401


def test_a_bad_token_on_a_write_is_401_not_a_csrf_error(client):
    response = client.post("/api/v1/members", {"email": "a@b.co", "role": "viewer"},
                           content_type="application/json", **bearer("al_wrong"))
    assert response.status_code == 401


def test_token_use_is_recorded(client, org):
    token = token_for(org, "viewer")
    client.get("/api/v1/me", **bearer(token))
    listing = client.get("/api/v1/tokens", **bearer(token_for(org, "admin")))
    used = [t for t in listing.json()["items"] if t["role"] == "viewer"][0]
    assert used["last_used_at"] is not None


def test_session_auth_works_for_same_origin_reads(client, owner):
    client.force_login(owner.user)
    response = client.get("/api/v1/me")
    assert response.status_code == 200
    assert response.json()["kind"] == "user"
    assert response.json()["role"] == "owner"


def test_session_writes_need_a_csrf_token(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner.user)
    payload = {"email": "new@example.com", "role": "viewer"}
    refused = client.post("/api/v1/members", payload, content_type="application/json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]

    client.get("/settings/members/")  # the page sets the CSRF cookie, as a browser would
    csrf = client.cookies["csrftoken"].value
    accepted = client.post("/api/v1/members", payload, content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert accepted.status_code == 201


def test_bearer_writes_need_no_csrf(org):
    client = Client(enforce_csrf_checks=True)
    response = client.post("/api/v1/members", {"email": "new@example.com", "role": "viewer"},
                           content_type="application/json", **bearer(token_for(org, "admin")))
    assert response.status_code == 201


def test_validation_errors_are_422_with_field_names(client, org):
    response = client.post("/api/v1/members", {"email": "x@example.com", "role": "emperor"},
                           content_type="application/json", **bearer(token_for(org, "admin")))
    assert response.status_code == 422
    body = response.json()
    assert body["errors"][0]["field"] == "role"
    assert "role" in body["detail"]


def test_a_bad_email_is_422_naming_the_field(client, org):
    response = client.post("/api/v1/members", {"email": "not-an-email", "role": "viewer"},
                           content_type="application/json", **bearer(token_for(org, "admin")))
    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "email", "message": "Enter a valid email address."}]


def test_openapi_and_docs_are_served(client):
    schema = client.get("/api/v1/openapi.json")
    assert schema.status_code == 200
    assert "/api/v1/me" in schema.json()["paths"]
    docs = client.get("/api/v1/docs")
    assert docs.status_code == 200
    page = docs.content.decode()
    # Swagger UI from our own static files, which the static finders serve (no CDN: the page's policy allows none)
    for name in ("swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-init.js"):
        assert f'src="/static/ninja/{name}"' in page or f'href="/static/ninja/{name}"' in page, name
        assert finders.find(f"ninja/{name}"), name
    assert "cdn" not in page.lower() and '"url": "/api/v1/openapi.json"' in page
