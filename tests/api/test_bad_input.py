"""Bad input gets a 422 naming the field: a number where an instant, a whole number or true/false
belongs, an array or a number where an object belongs, at the top of a body or inside it."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import token_for


@pytest.fixture
def admin(org):
    return Client(headers={"Authorization": f"Bearer {token_for(org, 'admin')}"})


def refused(answer, field: str) -> str:
    assert answer.status_code == 422, (answer.status_code, answer.content)
    fields = [e["field"] for e in answer.json()["errors"]]
    assert field in fields, fields
    return answer.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("path,field", [
    ("/api/v1/runs?until=0.5", "until"), ("/api/v1/runs?since=1700000000", "since"),
    ("/api/v1/audit?since=12", "since"), ("/api/v1/audit?until=1e9", "until"),
    ("/api/v1/costs?since=0", "since"), ("/api/v1/costs?until=20260101", "until"),
    ("/api/v1/runs?status=finished", "status"), ("/api/v1/runs?crew=5", "crew"),
    ("/api/v1/standing-approvals?live=5", "live"), ("/api/v1/tool-calls?run=1", "run"),
    ("/api/v1/runs?limit=0.5", "limit"), ("/api/v1/approvals?risk=1", "risk"),
])
def test_a_query_parameter_of_the_wrong_kind_is_a_422_naming_it(admin, path, field):
    refused(admin.get(path), field)


@pytest.mark.django_db
def test_run_events_after_and_limit_are_bounded(admin, org):
    # Any run id: the parameters are checked first.
    for query, field in (("after=-1", "after"), ("limit=0", "limit"), ("limit=5000", "limit"), ("after=x", "after")):
        refused(admin.get(f"/api/v1/runs/00000000-0000-0000-0000-000000000000/events?{query}"), field)


@pytest.mark.django_db
@pytest.mark.parametrize("body", ["[]", '[{"risk": "write"}]', '"write"', "5", "true", "null"])
def test_a_body_that_is_not_an_object_is_a_422(admin, body):
    tool_patch = admin.patch("/api/v1/tools/00000000-0000-0000-0000-000000000000", body,
                             content_type="application/json")
    assert "JSON object" in refused(tool_patch, "body")
    refused(admin.post("/api/v1/tokens", body, content_type="application/json"), "body")


@pytest.mark.django_db
@pytest.mark.parametrize("path,method,body,field", [
    ("/api/v1/crews", "post", {"name": "c", "max_hops": 6.0}, "max_hops"),
    ("/api/v1/crews", "post", {"name": "c", "max_hops": "6"}, "max_hops"),
    ("/api/v1/crews", "post", {"name": "c", "separation_of_duties": 1}, "separation_of_duties"),
    ("/api/v1/crews", "post", {"name": "c", "tasks": {"name": "t"}}, "tasks"),
    ("/api/v1/crews", "post", {"name": "c", "tasks": [["t"]]}, "tasks"),
    ("/api/v1/servers", "post", {"name": "s", "transport": "stdio", "trust_tier": "internal", "command": "x",
                                 "enabled": "true"}, "enabled"),
    ("/api/v1/costs/budgets", "post", {"scope": "org", "amount_usd": "5", "thresholds": [50.5]}, "thresholds"),
    ("/api/v1/tokens", "post", {"name": 5, "role": "viewer"}, "name"),
])
def test_a_body_field_of_the_wrong_json_type_is_a_422_naming_it(admin, path, method, body, field):
    refused(getattr(admin, method)(path, body, content_type="application/json"), field)


@pytest.mark.django_db
def test_a_nested_object_given_an_array_is_refused(admin):
    answer = admin.post("/api/v1/approvals/00000000-0000-0000-0000-000000000000/decision",
                        {"decision": "approve", "standing": ["run"]}, content_type="application/json")
    refused(answer, "standing")
    answer = admin.post("/api/v1/approvals/00000000-0000-0000-0000-000000000000/decision",
                        {"decision": "approve", "standing": {"scope": "agent_tool", "hours": 1.5}},
                        content_type="application/json")
    refused(answer, "standing.hours")


def test_every_request_body_is_checked_as_json():
    """The class, not the cases: each operation's body schema (and each schema inside it) is a Body."""
    from apps.api.api import api
    from apps.api.bodies import Body

    unchecked = []
    for router_prefix, router in api._routers:
        for path, view in router.path_operations.items():
            for operation in view.operations:
                for model in operation.models:
                    if model.__ninja_param_source__ != "body":
                        continue
                    for name, field in model.model_fields.items():
                        schema = _schemas_in(field.annotation)
                        unchecked += [f"{operation.methods} {router_prefix}{path}: {s.__name__}" for s in schema
                                      if not issubclass(s, Body)]
    assert unchecked == []


def _schemas_in(annotation) -> list[type]:
    from typing import get_args

    from pydantic import BaseModel

    found = []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        found.append(annotation)
        for field in annotation.model_fields.values():
            found += _schemas_in(field.annotation)
    for arg in get_args(annotation):
        found += _schemas_in(arg)
    return found
