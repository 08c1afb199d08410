"""Bodies that are too big, not JSON, not text, or hold values the database cannot store: a
client error with a readable JSON detail, never a 500 and never a half-done write."""

from __future__ import annotations

import json

import pytest
import requests
from django.conf import settings

from apps.registry.models import McpServer
from tests.factories import make_org, token_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def org_and_auth():
    org = make_org("Inputs")
    return org, {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, 'admin')}"}


def _post(client, auth, path, raw: bytes, content_type="application/json"):
    return client.generic("POST", path, raw, content_type=content_type, **auth)


def test_the_body_limit_is_set_on_purpose():
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 1024 * 1024


def test_an_oversized_body_is_413_with_a_detail(client, org_and_auth):
    org, auth = org_and_auth
    body = json.dumps({"name": "big", "transport": "stdio", "trust_tier": "internal", "command": "true",
                       "description": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)}).encode()
    response = _post(client, auth, "/api/v1/servers", body)
    assert response.status_code == 413
    assert response.json() == {"detail": f"The request body is too large (at most {1024 * 1024} bytes)."}
    assert not McpServer.objects.filter(org=org).exclude(transport="builtin").exists()


@pytest.mark.parametrize(("raw", "status", "detail"), [
    (b"{", 400, "not valid JSON"),
    (b"{'name': 'single quotes'}", 400, "not valid JSON"),
    (b'{"name": "x",}', 400, "not valid JSON"),
    (b"not json at all", 400, "not valid JSON"),
    (b'{"name": "\xff\xfe"}', 400, "not UTF-8"),
    (b"[]", 422, "JSON object"),
    (b"null", 422, "JSON object"),
    (b'"a string"', 422, "JSON object"),
    (b'{"name": 5, "transport": "carrier pigeon", "trust_tier": "x"}', 422, "transport"),
    (b'{"name": 5, "transport": "carrier pigeon", "trust_tier": "x"}', 422, "name: Expected a string"),
    (b'{"name": "nul\\u0000byte", "transport": "stdio", "trust_tier": "internal", "command": "true"}', 422,
     "NUL"),
    (b'{"name": "half\\ud800", "transport": "stdio", "trust_tier": "internal", "command": "true"}', 422,
     "surrogates"),
    (b'{"name": "n", "transport": "stdio", "trust_tier": "internal", "command": "t", "env": {"K\\u0000": "v"}}',
     422, "NUL"),
])
def test_malformed_bodies_are_client_errors_with_a_detail(client, org_and_auth, raw, status, detail):
    org, auth = org_and_auth
    response = _post(client, auth, "/api/v1/servers", raw)
    assert response.status_code == status, response.content
    assert detail in response.json()["detail"]
    assert not McpServer.objects.filter(org=org).exclude(transport="builtin").exists()


def test_a_body_that_is_not_json_at_all_by_content_type(client, org_and_auth):
    _, auth = org_and_auth
    response = _post(client, auth, "/api/v1/servers", b"name=x&transport=stdio", "application/x-www-form-urlencoded")
    assert response.status_code in (400, 422)
    assert response.json()["detail"]


@pytest.mark.parametrize("query", [
    "until=99999-01-01T00:00:00",
    "action=%00",
    "actor=a%00b",
    "limit=210914086856177811456",
    "offset=99999999999999999999999",
])
def test_query_values_the_database_cannot_take_are_422(client, org_and_auth, query):
    _, auth = org_and_auth
    response = client.get(f"/api/v1/audit?{query}", **auth)
    assert response.status_code == 422, response.content
    assert response.json()["detail"]


def test_a_time_with_an_offset_postgres_cannot_store_is_read_as_the_same_instant_in_utc(client, org_and_auth):
    """ISO 8601 allows offsets up to 23:59, Postgres stores at most 15:59: the API converts to UTC."""
    _, auth = org_and_auth
    events = client.get("/api/v1/audit", **auth).json()["items"]
    assert events  # the org and its token were created: audited
    since_201 = client.get("/api/v1/audit?since=0201-07-09T01:05:11-20:28", **auth)
    assert since_201.status_code == 200
    assert since_201.json()["items"] == events
    assert client.get("/api/v1/audit?since=9999-07-09T01:05:11-20:28", **auth).json()["items"] == []


@pytest.mark.parametrize("field", [{"timeout_s": 10**30}, {"timeout_s": -1}, {"name": "n" * 10_000},
                                   {"args": ["x"] * 5, "command": "c" * 5000}])
def test_out_of_range_values_are_422(client, org_and_auth, field):
    org, auth = org_and_auth
    body = {"name": "ok", "transport": "stdio", "trust_tier": "internal", "command": "true", **field}
    response = _post(client, auth, "/api/v1/servers", json.dumps(body).encode())
    assert response.status_code == 422, response.content
    assert response.json()["detail"]
    assert not McpServer.objects.filter(org=org).exclude(transport="builtin").exists()


def test_an_oversized_form_post_on_a_page_is_400_not_500(client, org_and_auth):
    org, _ = org_and_auth
    from tests.factories import owner_of

    client.force_login(owner_of(org).user)
    response = client.post("/servers/", {"name": "x", "description": "y" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})
    assert response.status_code == 400


@pytest.mark.django_db(transaction=True)
def test_a_chunked_oversized_body_is_refused_by_the_real_server(live_url):
    """No Content-Length to trust: the server still stops at the limit."""
    org = make_org("Chunked")
    token = token_for(org, "admin")
    chunk = b"x" * 65536

    def body():
        yield b'{"name": "big", "transport": "stdio", "trust_tier": "internal", "command": "true", "description": "'
        for _ in range(settings.DATA_UPLOAD_MAX_MEMORY_SIZE // len(chunk) + 2):
            yield chunk
        yield b'"}'

    response = requests.post(f"{live_url}/api/v1/servers", data=body(), timeout=30,
                             headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    assert response.status_code == 413
    assert "too large" in response.json()["detail"]
    assert not McpServer.objects.filter(org=org).exclude(transport="builtin").exists()
