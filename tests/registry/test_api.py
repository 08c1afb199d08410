"""The /servers and /tools API: roles, tenants, 422 field names, write-only secrets, sync, pin."""

from __future__ import annotations

import json
import sys

import pytest

from apps.audit.models import AuditEvent
from tests.factories import token_for
from tests.registry.conftest import ROOT, SERVERS, write_tools

SECRET_ENV = "env-secret-value-123"
SECRET_HEADER = "header-secret-value-456"


def _api(client, token, method, path, body=None):
    kwargs = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if body is not None:
        kwargs.update(data=json.dumps(body), content_type="application/json")
    return getattr(client, method)(f"/api/v1{path}", **kwargs)


@pytest.fixture
def admin_token(org):
    return token_for(org, "admin")


def _configurable_body(tools_file, **extra):
    return {"name": "conf", "transport": "stdio", "trust_tier": "internal", "command": sys.executable,
            "args": [str(SERVERS / "configurable.py")], "cwd": str(ROOT),
            "env": {"TOOLS_FILE": str(tools_file), "API_KEY": SECRET_ENV}, **extra}


def test_create_sync_list_pin_and_secrets_stay_write_only(client, org, admin_token, tmp_path):
    tools_file = write_tools(tmp_path / "tools.json", [{"name": "look", "annotations": {"read_only_hint": True}}])
    created = _api(client, admin_token, "post", "/servers", _configurable_body(tools_file))
    assert created.status_code == 201, created.content
    server = created.json()
    assert server["env_keys"] == ["API_KEY", "TOOLS_FILE"] and "env" not in server

    synced = _api(client, admin_token, "post", f"/servers/{server['id']}/sync")
    assert synced.json() | {"quarantined": []} == {"status": "ok", "tools_added": 1, "tools_changed": 0,
                                                    "tools_removed": 0, "protocol_version": "2026-07-28",
                                                    "error": "", "quarantined": [], "resources_quarantined": []}
    tools = _api(client, admin_token, "get", "/tools?risk=read").json()
    assert tools["count"] == 1 and tools["items"][0]["qualified_name"] == "conf.look"

    write_tools(tools_file, [{"name": "look", "description": "changed", "annotations": {"read_only_hint": True}}])
    _api(client, admin_token, "post", f"/servers/{server['id']}/sync")
    tool = _api(client, admin_token, "get", "/tools?state=quarantined").json()["items"][0]
    assert '+  "description": "changed"' in tool["diff"]
    pinned = _api(client, admin_token, "post", f"/tools/{tool['id']}/pin").json()
    assert pinned["state"] == "active" and pinned["diff"] == ""

    patched = _api(client, admin_token, "patch", f"/tools/{tool['id']}", {"risk": "dangerous"}).json()
    assert (patched["risk"], patched["risk_source"]) == ("dangerous", "admin")

    every_response = json.dumps([_api(client, admin_token, "get", p).json() for p in (
        "/servers", f"/servers/{server['id']}", "/tools", "/audit")])
    assert SECRET_ENV not in every_response
    rows = json.dumps(list(AuditEvent.objects.filter(org_id=org.id).values("data")), default=str)
    assert SECRET_ENV not in rows and "API_KEY" in rows


def test_http_headers_and_bearer_token_are_never_returned(client, admin_token):
    body = {"name": "remote", "transport": "http", "trust_tier": "official", "url": "http://127.0.0.1:9/mcp",
            "headers": {"X-Api-Key": SECRET_HEADER}, "bearer_token": "bearer-secret-789"}
    server = _api(client, admin_token, "post", "/servers", body).json()
    assert server["header_keys"] == ["Authorization", "X-Api-Key"]
    patched = _api(client, admin_token, "patch", f"/servers/{server['id']}", {"description": "ours"})
    text = patched.content.decode() + _api(client, admin_token, "get", "/servers").content.decode()
    assert SECRET_HEADER not in text and "bearer-secret-789" not in text


def test_validation_errors_are_422_with_field_names(client, admin_token):
    missing = _api(client, admin_token, "post", "/servers", {"name": "x"})
    assert missing.status_code == 422
    assert {"transport", "trust_tier"} <= {e["field"] for e in missing.json()["errors"]}

    bad = _api(client, admin_token, "post", "/servers", {"name": "Bad Name", "transport": "stdio",
                                                          "trust_tier": "internal", "command": ""})
    assert bad.status_code == 422
    assert {e["field"] for e in bad.json()["errors"]} == {"name", "command"}

    bad_url = _api(client, admin_token, "post", "/servers", {"name": "web", "transport": "http",
                                                              "trust_tier": "internal", "url": "ftp://x"})
    assert [e["field"] for e in bad_url.json()["errors"]] == ["url"]
    dup = {"name": "dup", "transport": "stdio", "trust_tier": "internal", "command": "true"}
    assert _api(client, admin_token, "post", "/servers", dup).status_code == 201
    assert _api(client, admin_token, "post", "/servers", dup).status_code == 409


def test_roles_and_other_organisations(client, org, outsider, admin_token):
    body = {"name": "s1", "transport": "stdio", "trust_tier": "internal", "command": "true"}
    server = _api(client, admin_token, "post", "/servers", body).json()
    viewer = token_for(org, "viewer")
    assert _api(client, viewer, "get", "/servers").status_code == 200
    assert _api(client, viewer, "post", "/servers", {**body, "name": "s2"}).status_code == 403
    assert _api(client, viewer, "post", f"/servers/{server['id']}/sync").status_code == 403
    other = token_for(outsider.org, "admin")
    assert _api(client, other, "get", f"/servers/{server['id']}").status_code == 404
    assert _api(client, other, "delete", f"/servers/{server['id']}").status_code == 404
    assert _api(client, other, "get", "/servers").json()["count"] == 0
    assert _api(client, admin_token, "delete", f"/servers/{server['id']}").status_code == 204
