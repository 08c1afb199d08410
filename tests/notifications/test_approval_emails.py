"""Approval emails through a real SMTP server: each approver's own links; a GET shows, only the
page's POST (with CSRF) decides, as that person, once; M of N and separation of duties hold across
email and inbox votes; a stale link says who decided and when; an answer instead of the call
reaches the agent; the refund happens exactly once."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from django.test import Client

from apps.accounts.actors import member_actor
from apps.approvals.models import ApprovalRequest
from apps.notifications import services as notifications
from apps.notifications import tasks
from apps.notifications.models import ApprovalLink, Notification
from apps.runs import decisions, services, worker
from apps.runs.models import RunEvent, ToolCall
from tests.approvals.test_decisions import A1001, finish
from tests.factories import add_member
from tests.notifications.conftest import links

pytestmark = pytest.mark.django_db  # nothing commits, so no session worker sends the mail first: the test does


def held_and_mailed(desk, crew, smtp, actor=None):
    """A run held on its refund, and the approval email sent through the SMTP server."""
    notifications.set_email_events(actor=desk.actor, events=["approval.requested"])
    run = worker.drive_run(run_id=services.start_run(actor=actor or desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    assert run.status == "waiting", run.error
    note = Notification.objects.get(event="approval.requested")
    assert tasks.send_notification_email.apply(args=[str(note.id)]).get() is True
    assert tasks.send_notification_email.apply(args=[str(note.id)]).get() is False  # once
    return run, ApprovalRequest.objects.get(run_id=run.id)


def path(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def confirm(client: Client, url: str, decision: str, comment: str = ""):
    """What a browser does on the confirmation page: GET it, then POST its form with the CSRF token."""
    page = client.get(path(url))
    assert page.status_code == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    return client.post(urlsplit(url).path, {"csrfmiddlewaretoken": token, "decision": decision, "comment": comment})


def test_each_approver_gets_their_own_links_and_a_get_decides_nothing(desk, org, owner, smtp, viewer):
    approver = add_member(org, "approver")
    run, request = held_and_mailed(desk, desk.refund_desk(), smtp)
    assert sorted(m["To"] for m in smtp.messages) == sorted([owner.user.email, approver.user.email])
    mine, theirs = links(smtp.to(approver.user.email)), links(smtp.to(owner.user.email))
    assert mine["approve"] != theirs["approve"]
    text = smtp.to(approver.user.email).get_body(preferencelist=("plain",)).get_content()
    assert "orders.refund_order" in text and '"amount_cents": 500' in text and "write" in text
    assert not ApprovalLink.objects.filter(token_hash__in=[mine["approve"]]).exists()  # only hashes are stored

    scanner = Client(enforce_csrf_checks=True)
    for url in mine.values():  # a mail scanner prefetching every link
        page = scanner.get(path(url))
        assert page.status_code == 200 and page["Referrer-Policy"] == "same-origin"
    assert 'amount_cents&quot;: 500' in page.content.decode() and approver.user.email in page.content.decode()
    forged = scanner.post(urlsplit(mine["approve"]).path, {"decision": "approve"})  # no CSRF token
    assert forged.status_code == 403
    request.refresh_from_db()
    assert request.status == "pending" and request.votes.count() == 0

    answer = confirm(Client(enforce_csrf_checks=True), mine["approve"], "approve")
    assert answer.status_code == 200 and "You approved this call." in answer.content.decode()
    request.refresh_from_db()
    assert request.status == "approved" and request.decided_by_id == approver.user_id
    assert request.decided_by_label == f"{approver.user.email} (email)"
    finish(run.id)
    assert list(desk.refunds()) == ["refund-A-1001"]  # exactly once
    assert ToolCall.objects.get(run=run, qualified_name="orders.refund_order").state == "succeeded"

    stale = Client().get(path(theirs["reject"]))
    body = stale.content.decode()
    assert "already approved by" in body and approver.user.email in body and 'data-testid="link-form"' not in body
    again = confirm_without_form(Client(enforce_csrf_checks=True), mine["approve"])
    assert again.status_code == 409 and "already approved" in again.content.decode()


def confirm_without_form(client: Client, url: str):
    """A POST with a valid CSRF token on a link that no longer shows a form (decided, used)."""
    client.get("/login/")
    return client.post(urlsplit(url).path, {"csrfmiddlewaretoken": client.cookies["csrftoken"].value,
                                            "decision": "approve"})


def test_two_of_two_counts_an_email_vote_and_an_inbox_vote_as_two_people_and_one_person_once(desk, org, smtp):
    first, second = add_member(org, "approver"), add_member(org, "approver")
    run, request = held_and_mailed(desk, desk.refund_desk(approvals_required=2), smtp)
    answer = confirm(Client(enforce_csrf_checks=True), links(smtp.to(first.user.email))["approve"], "approve")
    assert "1 of 2 approvals so far" in answer.content.decode()
    # The same person again through the inbox: still one vote.
    browser = Client()
    browser.force_login(first.user)
    browser.post(f"/inbox/{request.id}/decide/", {"decision": "approve", "args_hash": request.args_hash})
    request.refresh_from_db()
    assert request.status == "pending" and request.votes.count() == 1
    decisions.decide_approval(actor=member_actor(second), approval_id=request.id, decision="approve")
    request.refresh_from_db()
    assert request.status == "approved" and request.votes.count() == 2
    finish(run.id)
    assert list(desk.refunds()) == ["refund-A-1001"]


def test_the_starter_cannot_approve_through_their_email_when_duties_are_separated(desk, org, smtp):
    starter = add_member(org, "admin")
    _, request = held_and_mailed(desk, desk.refund_desk(separation_of_duties=True), smtp,
                                 actor=member_actor(starter))
    answer = confirm(Client(enforce_csrf_checks=True), links(smtp.to(starter.user.email))["approve"], "approve")
    assert answer.status_code == 403 and "separates duties" in answer.content.decode()
    request.refresh_from_db()
    assert request.status == "pending" and request.votes.count() == 0
    assert ApprovalLink.objects.get(membership=starter, approval_id=request.id).used_at is None


def test_a_demoted_members_link_is_refused(desk, org, smtp):
    member = add_member(org, "approver")
    _, request = held_and_mailed(desk, desk.refund_desk(), smtp)
    member.role = "viewer"
    member.save(update_fields=["role"])
    answer = confirm(Client(enforce_csrf_checks=True), links(smtp.to(member.user.email))["approve"], "approve")
    assert answer.status_code == 403 and "does not allow" in answer.content.decode()
    request.refresh_from_db()
    assert request.status == "pending"


def test_an_unknown_token_is_not_found(db):
    assert Client().get("/approvals/email/not-a-token/").status_code == 404


def test_answering_instead_sends_the_persons_words_to_the_agent_and_the_refund_never_runs(desk, org, smtp):
    approver = add_member(org, "approver")
    run, request = held_and_mailed(desk, desk.refund_desk(), smtp)
    empty = confirm(Client(enforce_csrf_checks=True), links(smtp.to(approver.user.email))["open"], "respond")
    assert empty.status_code == 400 and "Write the answer" in empty.content.decode()
    answer = confirm(Client(enforce_csrf_checks=True), links(smtp.to(approver.user.email))["open"], "respond",
                     "Do not refund; offer a voucher instead.")
    assert answer.status_code == 200 and "sent to the agent" in answer.content.decode()
    request.refresh_from_db()
    assert request.status == "answered" and request.decided_by_id == approver.user_id
    run = finish(run.id)
    call = ToolCall.objects.get(run=run, qualified_name="orders.refund_order")
    assert call.state == "rejected" and call.dispatched_at is None and desk.refunds() == {}
    assert call.result == {"person": f"{approver.user.email} (email)",
                           "text": "Do not refund; offer a voucher instead."}
    decided = RunEvent.objects.get(run=run, type="tool.decided", data__decision="answered")
    assert decided.data["answer"] == "Do not refund; offer a voucher instead."
    # What the model read as the call's result: the person's words, marked as a person's.
    from apps.runs.engine.tools import answer_text

    assert answer_text(call).startswith(f"NOT RUN. A person ({approver.user.email} (email)) answered")
    browser = Client()
    browser.force_login(approver.user)
    trace = browser.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="person-answer"' in trace and "offer a voucher" in trace
