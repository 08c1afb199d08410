"""Every role boundary of the API, and another organisation's objects as 404."""

from __future__ import annotations

import pytest

from tests.factories import add_member, make_org, token_for

pytestmark = pytest.mark.django_db

# (method, path, body, roles allowed)
ENDPOINTS = [
    ("get", "/api/v1/members", None, {"admin", "builder", "approver", "viewer"}),
    ("post", "/api/v1/members", {"email": "{n}@example.com", "role": "viewer"}, {"admin"}),
    ("get", "/api/v1/tokens", None, {"admin"}),
    ("post", "/api/v1/tokens", {"name": "t", "role": "viewer"}, {"admin"}),
    ("get", "/api/v1/audit", None, {"admin"}),
]


@pytest.mark.parametrize("role", ["admin", "builder", "approver", "viewer"])
@pytest.mark.parametrize(("method", "path", "body", "allowed"), ENDPOINTS)
def test_role_boundaries(client, org, role, method, path, body, allowed):
    token = token_for(org, role)
    if body:
        body = {k: v.format(n=role + method) for k, v in body.items()}
        response = client.post(path, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    else:
        response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    if role in allowed:
        assert response.status_code in (200, 201), response.content
    else:
        assert response.status_code == 403
        assert "role" in response.json()["detail"]


def test_role_changes_and_removal_need_admin(client, org):
    member = add_member(org, "viewer")
    for role in ("builder", "approver", "viewer"):
        token = token_for(org, role)
        patch = client.patch(f"/api/v1/members/{member.id}", {"role": "admin"}, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {token}")
        delete = client.delete(f"/api/v1/members/{member.id}", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert (patch.status_code, delete.status_code) == (403, 403)


def test_an_admin_cannot_make_owners_or_touch_them(client, org, owner):
    token = token_for(org, "admin")
    member = add_member(org, "viewer")
    promote = client.patch(f"/api/v1/members/{member.id}", {"role": "owner"}, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")
    remove_owner = client.delete(f"/api/v1/members/{owner.id}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert promote.status_code == 403
    assert remove_owner.status_code == 403


def test_another_orgs_member_is_not_found(client, org):
    other = make_org("Globex")
    stranger = add_member(other, "viewer")
    token = token_for(org, "admin")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert client.get(f"/api/v1/members/{stranger.id}", **auth).status_code == 404
    assert client.patch(f"/api/v1/members/{stranger.id}", {"role": "admin"}, content_type="application/json",
                        **auth).status_code == 404
    assert client.delete(f"/api/v1/members/{stranger.id}", **auth).status_code == 404
    assert client.get(f"/api/v1/members/{stranger.id}", **auth).json() == {"detail": "No such member."}


def test_another_orgs_token_cannot_be_revoked(client, org):
    other = make_org("Globex")
    token_for(other, "viewer", name="theirs")
    their_token_id = client.get("/api/v1/tokens", HTTP_AUTHORIZATION=f"Bearer {token_for(other, 'admin')}").json()
    target = [t for t in their_token_id["items"] if t["name"] == "theirs"][0]["id"]
    response = client.delete(f"/api/v1/tokens/{target}", HTTP_AUTHORIZATION=f"Bearer {token_for(org, 'admin')}")
    assert response.status_code == 404


def test_lists_show_only_the_callers_org(client, org):
    other = make_org("Globex")
    add_member(other, "viewer", email="globex-person@example.com")
    token_for(other, "viewer", name="globex-token")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, 'admin')}"}
    members = client.get("/api/v1/members", **auth).json()
    tokens = client.get("/api/v1/tokens", **auth).json()
    audit = client.get("/api/v1/audit?limit=200", **auth).json()
    assert "globex-person@example.com" not in [m["email"] for m in members["items"]]
    assert "globex-token" not in [t["name"] for t in tokens["items"]]
    assert all("globex" not in str(e).lower() for e in audit["items"])


def test_lists_are_paginated(client, org):
    for i in range(5):
        add_member(org, "viewer", email=f"p{i}@example.com")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, 'admin')}"}
    page = client.get("/api/v1/members?limit=2&offset=2", **auth).json()
    assert page["count"] == 6
    assert len(page["items"]) == 2
