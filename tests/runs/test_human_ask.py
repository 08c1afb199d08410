"""`human.ask`: an agent's question lands in the inbox for a group, the run parks with no worker, a person's
answer is the call's result (shown as theirs), and an unanswered question expires like an approval."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.approvals.models import ApprovalRequest
from apps.runs import decisions, services, worker
from apps.runs.models import Run, RunEvent, ToolCall
from tests.factories import token_for

pytestmark = pytest.mark.django_db

ASK = {"tool": "human.ask", "args": {"question": "Refund {{input.order_id}}: full or half?", "ask": "approvers",
                                    "choices": ["full", "half"]}}


def asking_crew(desk, *, policy="auto"):
    agent = desk.agent("Asker", [{"call": [ASK]}, {"say": "They said: {{result}}\nSTATUS: done\nREASON: asked"}],
                       [{"tool": "human.ask", "policy": policy}])
    return desk.sequential("Ask desk", [("ask", agent, "Ask about {order_id}.", [])])


def start(desk, crew) -> Run:
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 5},
                             enqueue=False)
    return worker.drive_run(run_id=run.id)


def api(org, role):
    return Client(headers={"Authorization": f"Bearer {token_for(org, role)}"})


def test_a_question_parks_the_run_and_the_answer_returns_as_a_persons_words(desk, org, owner, client):
    run = start(desk, asking_crew(desk))
    assert run.status == "waiting" and run.lease_owner == ""  # parked: no worker holds it
    waited = RunEvent.objects.filter(run=run, type="run.waiting").last().data
    assert waited["reason"] == "1 question(s) wait for a person's answer." and waited["approvals"] == 1
    client.force_login(owner.user)
    waiting = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="question"' in waiting and "Refund A-1001: full or half?" in waiting
    assert 'data-testid="expires"' in waiting and 'data-testid="answer-form"' in waiting
    listed = api(org, "viewer").get("/api/v1/approvals?kind=question&status=pending").json()
    assert listed["count"] == 1
    item = listed["items"][0]
    assert item["context"]["question"] == "Refund A-1001: full or half?" and item["context"]["ask"] == "approvers"
    assert item["expires_at"]
    refused = api(org, "viewer").post(f"/api/v1/approvals/{item['id']}/answer", {"answer": "full"},
                                      content_type="application/json")
    assert refused.status_code == 403  # a viewer is not among the approvers
    empty = api(org, "approver").post(f"/api/v1/approvals/{item['id']}/answer", {"answer": "  "},
                                      content_type="application/json")
    assert empty.status_code == 422 and "answer" in str(empty.json())
    as_decision = api(org, "approver").post(f"/api/v1/approvals/{item['id']}/decision", {"decision": "approve"},
                                            content_type="application/json")
    assert as_decision.status_code == 409
    answered = api(org, "approver").post(f"/api/v1/approvals/{item['id']}/answer", {"answer": "half, please"},
                                         content_type="application/json")
    assert answered.status_code == 200, answered.content
    body = answered.json()
    assert body["status"] == "answered" and body["answer"] == {"text": "half, please"}
    assert body["decided_by"].startswith("token:")
    again = api(org, "approver").post(f"/api/v1/approvals/{item['id']}/answer", {"answer": "full"},
                                      content_type="application/json")
    assert again.status_code == 409
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
    assert "half, please" in run.output and "Answer from a person" in run.output
    call = ToolCall.objects.get(run=run, qualified_name="human.ask")
    assert call.state == "succeeded" and call.dispatched_at is None  # never sent anywhere
    assert call.result["answered_by"] == body["decided_by"] and call.result["answered_at"]
    trace = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="person-answer"' in trace and f"A person's answer: {body['decided_by']}" in trace
    events = {e.type: e.data for e in RunEvent.objects.filter(run=run)}
    assert events["question.asked"]["question"] == "Refund A-1001: full or half?"
    assert events["question.answered"]["by"] == body["decided_by"]


def test_an_unanswered_question_expires_and_the_model_hears_it(desk):
    run = start(desk, asking_crew(desk))
    request = ApprovalRequest.objects.get(run_id=run.id, kind="question")
    ApprovalRequest.objects.filter(id=request.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert decisions.expire_due_approvals() == 1
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
    assert "Nobody answered this question in time" in run.output
    assert ToolCall.objects.get(run=run, qualified_name="human.ask").state == "expired"


def test_a_denied_grant_never_asks(desk):
    crew = asking_crew(desk, policy="deny")
    run = start(desk, crew)
    assert not ApprovalRequest.objects.filter(run_id=run.id).exists()


def test_human_ask_is_in_every_agents_tool_picker(client, builder):
    client.force_login(builder.user)
    page = client.get("/agents/tools/?server=human").content.decode()
    assert "human.ask" in page
