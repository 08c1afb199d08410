"""Who gets asked: a crew's or a risk's route picks the people and channels of a held call; a reminder
goes, once, to those who have not voted before the request expires; after a wait the request is
escalated, once, to a second group, whose links decide like anyone's. Mail goes through a real SMTP server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.approvals.models import ApprovalRequest
from apps.core.errors import ValidationFailed
from apps.notifications import routing, tasks
from apps.notifications import services as notifications
from apps.notifications.models import ApprovalLink, Notification
from apps.runs import services, worker
from tests.approvals.test_decisions import A1001
from tests.factories import add_member
from tests.notifications.conftest import links
from tests.notifications.test_approval_emails import confirm

pytestmark = pytest.mark.django_db


def held(desk, crew):
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    return ApprovalRequest.objects.get(run_id=run.id)


def test_the_most_specific_route_picks_who_is_mailed(desk, org, owner, smtp):
    first, second = add_member(org, "approver"), add_member(org, "approver")
    crew, other = desk.refund_desk(), desk.refund_desk(name="Other desk")
    notifications.set_email_events(actor=desk.actor, events=["approval.requested"])
    routing.set_route(actor=desk.actor, risk="write", people=[second.user.email], channels=["email"])
    routing.set_route(actor=desk.actor, crew_id=crew.id, risk="write", people=[first.user.email.upper()],
                      channels=["email"])
    request = held(desk, crew)
    note = Notification.objects.get(event="approval.requested", payload__approval_id=str(request.id))
    assert note.email_to == [first.user.email]  # the crew's write route, not the org's write route
    assert tasks.send_notification_email.apply(args=[str(note.id)]).get() is True
    assert [m["To"] for m in smtp.messages] == [first.user.email]
    held(desk, other)
    note = Notification.objects.exclude(id=note.id).get(event="approval.requested")
    assert note.email_to == [second.user.email]
    assert routing.audience(org.id, note.payload).slack is False  # the route does not name Slack


def test_a_route_is_checked_field_by_field(desk, org):
    with pytest.raises(ValidationFailed) as bad:
        routing.set_route(actor=desk.actor, risk="huge", people=["nobody@elsewhere.test"], channels=["fax"],
                          escalate_after_minutes=10)
    assert set(bad.value.errors) == {"risk", "people", "channels", "escalate_to"}


def test_a_reminder_goes_once_to_who_has_not_voted_and_its_link_replaces_the_first(desk, org, owner, smtp):
    first, second = add_member(org, "approver"), add_member(org, "approver")
    crew = desk.refund_desk(approvals_required=2, approval_ttl_hours=1)
    routing.set_route(actor=desk.actor, crew_id=crew.id, people=[first.user.email, second.user.email],
                      channels=["email"], remind_before_minutes=61)  # the request expires within the hour
    request = held(desk, crew)
    note = Notification.objects.get(event="approval.requested")
    tasks.send_notification_email.apply(args=[str(note.id)])
    confirm(Client(enforce_csrf_checks=True), links(smtp.to(first.user.email))["approve"], "approve")
    first_mail_to_second = links(smtp.to(second.user.email))
    assert tasks.nudge_approvals.apply().get() == {"reminders": 1, "escalations": 0}
    assert tasks.nudge_approvals.apply().get() == {"reminders": 0, "escalations": 0}  # once
    reminders = [m for m in smtp.messages if m["Subject"].startswith("[Airlock] Reminder")]
    assert [m["To"] for m in reminders] == [second.user.email]  # not to the one who already voted
    stale = Client().get(first_mail_to_second["open"].split("127.0.0.1:8000")[-1])
    assert stale.status_code == 404  # the reminder's links replaced the first mail's
    fresh = links(reminders[0])
    confirm(Client(enforce_csrf_checks=True), fresh["approve"], "approve")
    request.refresh_from_db()
    assert request.status == "approved" and request.votes.count() == 2


def test_after_the_wait_the_second_group_is_asked_once_and_decides_like_anyone(desk, org, owner, smtp):
    first, manager = add_member(org, "approver"), add_member(org, "admin")
    crew = desk.refund_desk()
    routing.set_route(actor=desk.actor, risk="write", people=[first.user.email], channels=["email"],
                      escalate_after_minutes=30, escalate_to=[manager.user.email])
    request = held(desk, crew)
    assert tasks.nudge_approvals.apply().get() == {"reminders": 0, "escalations": 0}  # not waited long enough
    # Half an hour passes (the request's age is what the escalation reads).
    ApprovalRequest.objects.filter(id=request.id).update(created_at=timezone.now() - timedelta(minutes=31))
    assert tasks.nudge_approvals.apply().get() == {"reminders": 0, "escalations": 1}
    assert tasks.nudge_approvals.apply().get() == {"reminders": 0, "escalations": 0}  # idempotent
    escalation = smtp.to(manager.user.email)
    assert escalation["Subject"].startswith("[Airlock] Escalated to you")
    answer = confirm(Client(enforce_csrf_checks=True), links(escalation)["reject"], "reject", "Not this one.")
    assert "You rejected this call." in answer.content.decode()
    request.refresh_from_db()
    assert request.status == "rejected" and request.decided_by_id == manager.user_id
    assert ApprovalLink.objects.filter(approval_id=request.id, used_at__isnull=False).count() == 1


def test_an_admin_sets_a_route_in_settings_and_sees_it(desk, org, owner):
    first, manager = add_member(org, "approver"), add_member(org, "admin")
    crew = desk.refund_desk()
    browser = Client()
    browser.force_login(owner.user)
    bad = browser.post("/settings/notifications/", {"form": "route", "risk": "write", "people": "who@else.test",
                                                    "channels": ["email"], "escalate_after_minutes": "x"})
    assert bad.status_code == 422 and "Not approvers of this organisation: who@else.test" in bad.content.decode()
    page = browser.post("/settings/notifications/", {
        "form": "route", "crew_id": str(crew.id), "risk": "write", "people": first.user.email,
        "channels": ["email", "slack"], "remind_before_minutes": "30", "escalate_after_minutes": "60",
        "escalate_to": manager.user.email}, follow=True).content.decode()
    assert 'data-testid="route"' in page and "after 60 min to " + manager.user.email in page
    route = routing.route_for(org.id, crew_id=str(crew.id), risk="write")
    assert route.people == [first.user.email] and route.channels == ["email", "slack"]
