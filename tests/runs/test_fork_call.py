"""Forking from a model call with a tool call's arguments edited (time travel): the fork replays the parent's
history up to that call, runs the edited call under policy (a held write is held again, with the edited
arguments), and goes on; the arguments are checked against the tool's schema field by field; the parent is
untouched and the lineage is shown."""

from __future__ import annotations

import re

import pytest

from apps.approvals.models import ApprovalRequest
from apps.runs import decisions, services, worker
from apps.runs.models import Run, RunEvent, RunStep, ToolCall
from tests.conftest import signed_in
from tests.factories import token_for
from tests.web.test_accessibility import audit

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 700}


def api(client, org, role="builder"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, role)}"}

    def post(path, body):
        return client.post(f"/api/v1{path}", body, content_type="application/json", **headers)
    return post


def errors(answer) -> dict:
    assert answer.status_code == 422, answer.content
    return {e["field"]: e["message"] for e in answer.json()["errors"]}


def approved_parent(desk):
    """A finished run whose refund was held and approved (700 cents)."""
    crew = desk.refund_desk(refund_policy="approve")
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    assert run.status == "waiting", run.error
    request = ApprovalRequest.objects.get(run_id=run.id)
    decisions.decide_approval(actor=desk.actor, approval_id=request.id, decision="approve")
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
    assert desk.refunds()["refund-A-1001"]["amount_cents"] == 700
    return run


def test_a_fork_replays_up_to_the_model_call_with_edited_arguments_and_holds_the_write_again(desk, client, org):
    parent = approved_parent(desk)
    refund = ToolCall.objects.get(run=parent, qualified_name="orders.refund_order")
    before = (list(RunStep.objects.filter(run=parent).values_list("id", "output")),
              list(ToolCall.objects.filter(run=parent).values_list("id", "state", "arguments")))
    post = api(client, org)

    assert errors(post(f"/runs/{parent.id}/fork", {"tool_call_id": "00000000-0000-0000-0000-000000000000",
                                                   "arguments": {}})) == {"tool_call": "Not a tool call of this run."}
    bad = errors(post(f"/runs/{parent.id}/fork", {"tool_call_id": str(refund.id),
                                                  "arguments": {**refund.arguments, "amount_cents": "lots"}}))
    assert set(bad) == {"arguments.amount_cents"} and "integer" in bad["arguments.amount_cents"]
    missing = errors(post(f"/runs/{parent.id}/fork", {"tool_call_id": str(refund.id),
                                                      "arguments": {"amount_cents": 5}}))
    assert "arguments.order_id" in missing

    edited = {**refund.arguments, "amount_cents": 650, "request_id": "refund-A-1001-fork"}
    answer = post(f"/runs/{parent.id}/fork", {"tool_call_id": str(refund.id), "arguments": edited})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["origin"] == "fork" and body["parent_id"] == str(parent.id)
    assert body["parent_step"] == refund.step.position
    fork = worker.drive_run(run_id=body["id"])
    assert fork.status == "waiting", fork.error  # today's policy: the write is held again
    held = ToolCall.objects.get(run=fork, qualified_name="orders.refund_order")
    assert held.state == "held" and held.arguments["amount_cents"] == 650 and held.id != refund.id
    assert RunStep.objects.filter(run=fork, kind="agent").values_list("task", flat=True).get() == "refund"
    assert not ToolCall.objects.filter(run=fork, qualified_name="orders.get_order_status").exists()  # replayed
    replayed = RunEvent.objects.get(run=fork, type="model.replayed").data
    assert replayed["edited_tool_call"] == str(refund.id)
    first_llm = RunStep.objects.filter(run=fork, kind="llm").order_by("position").first()
    assert first_llm.input_tokens == 0 and first_llm.output_tokens == 0  # the replayed call cost nothing

    request = ApprovalRequest.objects.get(run_id=fork.id)
    assert request.arguments["amount_cents"] == 650
    decisions.decide_approval(actor=desk.actor, approval_id=request.id, decision="approve")
    fork = worker.drive_run(run_id=fork.id)
    assert fork.status == "succeeded", fork.error
    assert desk.refunds()["refund-A-1001-fork"]["amount_cents"] == 650
    assert desk.refunds()["refund-A-1001"]["amount_cents"] == 700  # the parent's refund, once
    assert (list(RunStep.objects.filter(run=parent).values_list("id", "output")),
            list(ToolCall.objects.filter(run=parent).values_list("id", "state", "arguments"))) == before

    signed_in(client, desk_owner(org))
    page = client.get(f"/runs/{fork.id}/").content.decode()
    assert f"/runs/{parent.id}/" in page and "Forked from" in page


def desk_owner(org):
    from apps.accounts.models import Membership

    return Membership.objects.filter(org=org, role="owner").first()


def test_the_run_page_offers_editing_a_tool_calls_arguments_and_forks_from_the_form(desk, client, org, owner,
                                                                                   viewer):
    parent = approved_parent(desk)
    refund = ToolCall.objects.get(run=parent, qualified_name="orders.refund_order")
    signed_in(client, owner)
    page = client.get(f"/runs/{parent.id}/").content.decode()
    url = f"/runs/{parent.id}/fork/calls/{refund.id}/"
    assert f'href="{url}"' in page
    form = client.get(url).content.decode()
    assert 'data-testid="fork-call-form"' in form and "orders.refund_order" in form
    assert "&quot;amount_cents&quot;: 700" in form
    assert audit(form).problems() == []
    bad = client.post(url, {"arguments": '{"order_id": "A-1001", "amount_cents": "lots", "request_id": "r"}'})
    assert bad.status_code == 422 and 'data-testid="error-arguments.amount_cents"' in bad.content.decode()
    assert audit(bad.content.decode()).problems() == []
    broken = client.post(url, {"arguments": "{not json"})
    assert broken.status_code == 422 and "not valid JSON" in broken.content.decode()
    started = client.post(url, {"arguments": '{"order_id": "A-1001", "amount_cents": 640, "request_id": "r-640"}'})
    fork = Run.objects.get(parent=parent)
    assert started.status_code == 302 and started["Location"] == f"/runs/{fork.id}/"
    assert worker.drive_run(run_id=fork.id).status == "waiting"
    assert ToolCall.objects.get(run=fork, qualified_name="orders.refund_order").arguments["amount_cents"] == 640

    signed_in(client, viewer)
    assert client.post(url, {"arguments": "{}"}).status_code == 403
    assert not re.search(r"fork/calls/", client.get(f"/runs/{parent.id}/").content.decode())
