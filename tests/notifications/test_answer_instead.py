"""Answering a held call instead of approving it, from the inbox and the API: the call never runs,
the person's words are its result, the run resumes; an empty answer is refused with its field."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.runs.models import ToolCall
from tests.approvals.test_decisions import finish, held_run
from tests.approvals.test_people import vote
from tests.factories import add_member, token_for

pytestmark = pytest.mark.django_db


def test_an_approver_answers_in_the_inbox_and_the_model_reads_a_persons_words(desk, org):
    approver = add_member(org, "approver")
    run, request = held_run(desk, desk.refund_desk())
    browser = Client()
    browser.force_login(approver.user)
    inbox = browser.get("/inbox/").content.decode()
    assert 'data-testid="respond"' in inbox
    empty = browser.post(f"/inbox/{request.id}/decide/", {"decision": "respond", "args_hash": request.args_hash},
                         headers={"HX-Request": "true"})
    assert empty.status_code == 422 and "Write the answer" in empty.content.decode()
    answer = browser.post(f"/inbox/{request.id}/decide/", {"decision": "respond", "args_hash": request.args_hash,
                                                           "comment": "Offer a 10% voucher."},
                          headers={"HX-Request": "true"})
    assert answer.status_code == 200 and "the agent gets your words" in answer.content.decode()
    run = finish(run.id)
    call = ToolCall.objects.get(run=run, qualified_name="orders.refund_order")
    assert call.dispatched_at is None and desk.refunds() == {}
    # What the model's next request carries as the call's result: the person's words, marked as theirs.
    from apps.runs.engine.tools import answer_text

    assert "Offer a 10% voucher." in answer_text(call) and "A person" in answer_text(call)


def test_the_api_answers_instead_and_refuses_an_empty_answer(desk, org):
    approver = add_member(org, "approver")
    token = token_for(org, "approver", member=approver)
    run, request = held_run(desk, desk.refund_desk())
    empty = vote(token, request.id, "respond")
    assert empty.status_code == 422 and "comment" in str(empty.json())
    answered = vote(token, request.id, "respond", comment="Escalate to billing instead.")
    assert answered.status_code == 200 and answered.json()["status"] == "answered"
    listed = Client(headers={"Authorization": f"Bearer {token}"}).get("/api/v1/approvals?status=answered").json()
    assert [item["id"] for item in listed["items"]] == [str(request.id)]
    finish(run.id)
    assert desk.refunds() == {}
