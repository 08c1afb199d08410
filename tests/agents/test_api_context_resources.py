"""An agent's context resources through the API: given by id or URI, only the organisation's own active, pinned
ones; read back with their state, which shows when one stopped being usable; replaced by a PATCH."""

from __future__ import annotations

import pytest

from apps.registry.models import ToolState
from tests.agents.factories import make_resource, make_server, scripted_connection
from tests.agents.test_api import call
from tests.factories import make_org

pytestmark = pytest.mark.django_db


def field_errors(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def test_a_builder_gives_an_agent_context_resources_and_sees_when_one_becomes_unavailable(client, org):
    notes = make_server(org, "notes")
    handbook = make_resource(notes, "notes://handbook")
    policy = make_resource(notes, "notes://policy")
    drafts = make_resource(notes, "notes://drafts", state=ToolState.QUARANTINED)
    connection = scripted_connection(org)
    body = {"name": "Reader", "llm_connection_id": str(connection.id), "script": [{"say": "ok"}]}

    refused = call(client, org, "post", "/api/v1/agents", {**body, "context_resources": [str(drafts.id)]})
    assert refused.status_code == 422
    assert "notes notes://drafts is quarantined" in field_errors(refused)["context_resources.0"]

    created = call(client, org, "post", "/api/v1/agents",
                   {**body, "context_resources": [str(handbook.id), "notes://policy"]})
    assert created.status_code == 201, created.content
    agent = created.json()
    assert [(c["uri"], c["usable"]) for c in agent["context_resources"]] == [("notes://handbook", True),
                                                                           ("notes://policy", True)]

    handbook.state = ToolState.QUARANTINED  # as a sync that saw its definition change leaves it
    handbook.save(update_fields=["state"])
    read = call(client, org, "get", f"/api/v1/agents/{agent['id']}", role="viewer").json()
    assert [(c["uri"], c["state"], c["usable"]) for c in read["context_resources"]] == [
        ("notes://handbook", "quarantined", False), ("notes://policy", "active", True)]

    kept = call(client, org, "patch", f"/api/v1/agents/{agent['id']}", {"max_steps": 4})
    assert len(kept.json()["context_resources"]) == 2  # not given: kept as they are
    replaced = call(client, org, "patch", f"/api/v1/agents/{agent['id']}", {"context_resources": [str(policy.id)]})
    assert [c["uri"] for c in replaced.json()["context_resources"]] == ["notes://policy"]
    versions = call(client, org, "get", f"/api/v1/agents/{agent['id']}/versions", role="viewer").json()
    assert "context_resources" in versions["items"][0]["changes"]


def test_another_organisations_resource_cannot_be_given(client, org):
    theirs = make_resource(make_server(make_org("Other"), "notes"), "notes://handbook")
    connection = scripted_connection(org)
    for ref in (str(theirs.id), "notes://handbook"):
        response = call(client, org, "post", "/api/v1/agents", {
            "name": "Thief", "llm_connection_id": str(connection.id), "context_resources": [ref]})
        assert response.status_code == 422
        assert field_errors(response) == {"context_resources.0": f"No resource {ref!r} in your registry."}
