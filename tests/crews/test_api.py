"""The crews API: validation errors by field, roles and tenants."""

from __future__ import annotations

import pytest

from tests.agents.factories import make_agent
from tests.agents.test_api import call

pytestmark = pytest.mark.django_db


def test_a_crew_round_trips(client, org):
    triage, refunds = make_agent(org, name="Triage"), make_agent(org, name="Refunds")
    body = {"name": "Refund desk", "inputs": [{"name": "order_id"}], "max_hops": 4,
            "tasks": [{"name": "look", "description": "Look up {order_id}", "agent_id": str(triage.id)},
                      {"name": "refund", "description": "Refund it", "agent_id": str(refunds.id),
                       "context": ["look"]}]}
    created = call(client, org, "post", "/api/v1/crews", body)
    assert created.status_code == 201, created.content
    crew = call(client, org, "get", f"/api/v1/crews/{created.json()['id']}", role="viewer").json()
    assert [t["name"] for t in crew["tasks"]] == ["look", "refund"]
    assert crew["tasks"][1]["context"] == ["look"]
    assert (crew["max_hops"], crew["inputs"][0]["type"]) == (4, "string")


def test_validation_errors_name_the_fields(client, org):
    boss = make_agent(org, name="Boss")
    response = call(client, org, "post", "/api/v1/crews", {
        "name": "Sup", "process": "supervisor", "supervisor_agent_id": str(boss.id), "members": [str(boss.id)]})
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {"field": "members", "message": "Boss is the supervisor; it cannot also be one of its own members."}]


@pytest.mark.parametrize("role", ["viewer", "approver"])
def test_viewers_and_approvers_cannot_write_crews(client, org, role):
    agent = make_agent(org)
    body = {"name": "X", "tasks": [{"name": "t", "description": "d", "agent_id": str(agent.id)}]}
    assert call(client, org, "post", "/api/v1/crews", body, role=role).status_code == 403
    assert call(client, org, "get", "/api/v1/crews", role=role).status_code == 200


def test_another_orgs_crew_is_404(client, org, outsider):
    agent = make_agent(outsider.org)
    crew = call(client, outsider.org, "post", "/api/v1/crews", {
        "name": "Theirs", "tasks": [{"name": "t", "description": "d", "agent_id": str(agent.id)}]}).json()
    assert call(client, org, "get", f"/api/v1/crews/{crew['id']}", role="admin").status_code == 404
    assert call(client, org, "delete", f"/api/v1/crews/{crew['id']}", role="admin").status_code == 404
