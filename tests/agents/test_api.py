"""The agents and LLM connections API: roles, tenants, write-only keys, field errors."""

from __future__ import annotations

import pytest

from tests.agents.factories import make_agent, order_desk, scripted_connection
from tests.factories import token_for

pytestmark = pytest.mark.django_db


def call(client, org, method, path, body=None, role="builder"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, role)}"}
    if method == "get":
        return client.get(path, **headers)
    return getattr(client, method)(path, body, content_type="application/json", **headers)


def test_a_builder_creates_an_agent_with_grants_and_reads_it_back(client, org):
    order_desk(org)
    connection = scripted_connection(org)
    response = call(client, org, "post", "/api/v1/agents", {
        "name": "Refunds", "llm_connection_id": str(connection.id), "script": [{"say": "ok"}],
        "grants": [{"tool": "orders.refund_order", "policy": "approve"},
                   {"tool": "orders.delete_customer", "policy": "deny"}]})
    assert response.status_code == 201, response.content
    agent = response.json()
    assert [(g["tool"], g["policy"], g["risk"]) for g in agent["grants"]] == [
        ("orders.delete_customer", "deny", "dangerous"), ("orders.refund_order", "approve", "write")]
    listed = call(client, org, "get", "/api/v1/agents", role="viewer").json()
    assert listed["count"] == 1 and listed["items"][0]["id"] == agent["id"]
    permissions = call(client, org, "get", f"/api/v1/agents/{agent['id']}/permissions", role="viewer").json()
    assert {p["tool"]: p["decision"] for p in permissions} == {"orders.delete_customer": "deny",
                                                               "orders.refund_order": "hold"}
    prompt = call(client, org, "get", f"/api/v1/agents/{agent['id']}/prompt", role="viewer").json()
    assert prompt["system_prompt"].startswith("You are Refunds.")


def test_auto_for_a_dangerous_tool_is_a_422_naming_the_grant(client, org):
    order_desk(org)
    connection = scripted_connection(org)
    response = call(client, org, "post", "/api/v1/agents", {
        "name": "Bad", "llm_connection_id": str(connection.id),
        "grants": [{"tool": "orders.delete_customer", "policy": "auto"}]})
    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "grants.0", "message": (
        "orders.delete_customer is dangerous, so it cannot be auto: choose approve or deny.")}]


@pytest.mark.parametrize("role", ["viewer", "approver"])
def test_viewers_and_approvers_cannot_write(client, org, role):
    agent = make_agent(org)
    connection = scripted_connection(org, "Other")
    assert call(client, org, "post", "/api/v1/agents", {"name": "x", "llm_connection_id": str(connection.id)},
                role=role).status_code == 403
    assert call(client, org, "patch", f"/api/v1/agents/{agent.id}", {"role": "x"}, role=role).status_code == 403
    assert call(client, org, "delete", f"/api/v1/agents/{agent.id}", role=role).status_code == 403
    assert call(client, org, "post", "/api/v1/llm-connections", {"name": "x", "provider": "scripted"},
                role=role).status_code == 403


def test_another_orgs_agents_and_connections_are_404(client, org, outsider):
    agent = make_agent(outsider.org)
    for method, path in [("get", f"/api/v1/agents/{agent.id}"), ("patch", f"/api/v1/agents/{agent.id}"),
                         ("delete", f"/api/v1/agents/{agent.id}"), ("get", f"/api/v1/agents/{agent.id}/versions"),
                         ("get", f"/api/v1/llm-connections/{agent.connection_id}")]:
        response = call(client, org, method, path, {} if method == "patch" else None, role="admin")
        assert response.status_code == 404, (method, path)
    assert call(client, org, "get", "/api/v1/agents", role="admin").json()["count"] == 0


def test_the_api_key_is_write_only(client, org):
    response = call(client, org, "post", "/api/v1/llm-connections", {
        "name": "OpenAI", "provider": "openai", "api_key": "sk-test-1234567890abcdefghij"})
    assert response.status_code == 201
    body = response.json()
    assert body["api_key_set"] is True
    assert "sk-test" not in response.content.decode()
    patched = call(client, org, "patch", f"/api/v1/llm-connections/{body['id']}", {"api_key": ""}).json()
    assert patched["api_key_set"] is False


def test_testing_a_connection_without_network_says_so(client, org):
    created = call(client, org, "post", "/api/v1/llm-connections", {
        "name": "Local", "provider": "openai_compatible", "base_url": "http://127.0.0.1:9/v1",
        "default_model": "llama3"}).json()
    result = call(client, org, "post", f"/api/v1/llm-connections/{created['id']}/test", {}).json()
    assert result["ok"] is False
    assert result["message"].startswith("Could not reach 127.0.0.1:9")


def test_patch_changes_only_what_is_sent_and_versions_it(client, org):
    agent = make_agent(org, name="A", role="first")
    response = call(client, org, "patch", f"/api/v1/agents/{agent.id}", {"role": "second", "enabled": False})
    assert response.status_code == 200, response.content
    assert (response.json()["role"], response.json()["enabled"], response.json()["version"]) == ("second", False, 3)
    versions = call(client, org, "get", f"/api/v1/agents/{agent.id}/versions", role="viewer").json()["items"]
    assert [v["number"] for v in versions] == [3, 2, 1]
    assert versions[1]["changes"] == {"role": ["first", "second"]}


def test_deleting_an_agent_a_crew_uses_is_a_409_naming_the_crew(client, org):
    agent = make_agent(org, name="Worker")
    crew = call(client, org, "post", "/api/v1/crews", {
        "name": "Desk", "tasks": [{"name": "t", "description": "do it", "agent_id": str(agent.id)}]})
    assert crew.status_code == 201, crew.content
    response = call(client, org, "delete", f"/api/v1/agents/{agent.id}")
    assert response.status_code == 409
    assert "Desk" in response.json()["detail"]
