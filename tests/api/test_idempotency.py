"""`Idempotency-Key`: a retry answers the first answer's status and body and starts nothing; the key
on a different request is refused."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.runs import services, worker
from apps.runs.models import Run
from tests.factories import token_for
from tests.runs.conftest import LOOK_UP

INPUTS = {"order_id": "A-1001", "amount_cents": 500}


@pytest.fixture
def builder(org):
    return Client(headers={"Authorization": f"Bearer {token_for(org, 'builder')}"})


def start(client, crew, key, inputs=INPUTS):
    return client.post(f"/api/v1/crews/{crew.id}/runs", {"inputs": inputs}, content_type="application/json",
                       headers={"Idempotency-Key": key})


@pytest.mark.django_db
def test_a_replay_answers_the_first_status_and_body_even_after_the_run_moved_on(desk, builder):
    agent = desk.agent("Looker", [{"call": [LOOK_UP]}, {"say": "ok"}],
                       [{"tool": "orders.get_order_status", "policy": "auto"}])
    crew = desk.sequential("Look", [("look", agent, "Look up {order_id}.", [])])
    first = start(builder, crew, "nightly-1")
    assert first.status_code == 201 and first.json()["status"] == "queued"
    worker.drive_run(run_id=first.json()["id"])  # the run finishes meanwhile
    again = start(builder, crew, "nightly-1")
    assert (again.status_code, again.json()) == (first.status_code, first.json())
    assert Run.objects.filter(crew=crew).count() == 1


@pytest.mark.django_db
def test_the_same_key_on_a_different_request_is_a_422(desk, builder):
    agent = desk.agent("Looker", [{"say": "ok"}], [])
    one = desk.sequential("One", [("look", agent, "Look up {order_id}.", [])])
    two = desk.sequential("Two", [("look", agent, "Look up {order_id}.", [])])
    assert start(builder, one, "k-1").status_code == 201
    other_inputs = start(builder, one, "k-1", inputs={**INPUTS, "amount_cents": 900})
    assert other_inputs.status_code == 422 and "different request" in other_inputs.json()["detail"]
    other_crew = start(builder, two, "k-1")
    assert other_crew.status_code == 422 and "Idempotency-Key" in other_crew.json()["detail"]
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_a_key_from_another_path_of_the_same_org_reaches_the_database_guard(desk, builder, org):
    """With the answer gone from the cache (expired, or another path started the run), the key still
    never starts a second run nor hands another crew's run back."""
    agent = desk.agent("Looker", [{"say": "ok"}], [])
    one = desk.sequential("One", [("look", agent, "Look up {order_id}.", [])])
    two = desk.sequential("Two", [("look", agent, "Look up {order_id}.", [])])
    services.start_run(actor=desk.actor, crew_id=one.id, inputs=INPUTS, idempotency_key="k-2", enqueue=False)
    assert start(builder, two, "k-2").status_code == 422
    same = start(builder, one, "k-2")
    assert same.status_code == 201 and Run.objects.count() == 1


@pytest.mark.django_db
def test_a_key_too_long_is_refused_not_cut(desk, builder):
    agent = desk.agent("Looker", [{"say": "ok"}], [])
    crew = desk.sequential("One", [("look", agent, "Look up {order_id}.", [])])
    answer = start(builder, crew, "k" * 201)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "Idempotency-Key"
