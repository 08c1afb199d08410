"""Slack approvals against a local fake of Slack's Web API: a held write is posted with its facts and
buttons to the crew's or the risk's channel; signed interactions decide it as the member whose verified
email Slack reports; bad signatures, old timestamps, unverified or unknown people and viewers are
refused; M of N and separation of duties hold across Slack and the inbox; the message is updated once
decided, also when decided elsewhere; an answer instead of the call reaches the agent."""

from __future__ import annotations

import time

import pytest
from django.test import Client, override_settings

from apps.accounts.actors import member_actor
from apps.approvals.models import ApprovalRequest
from apps.core.egress import EgressRefused
from apps.core.errors import ValidationFailed
from apps.notifications import slack, tasks
from apps.notifications.models import SlackConnection, SlackPost
from apps.runs import decisions, services, worker
from apps.runs.models import ToolCall
from tests.approvals.test_decisions import A1001, finish
from tests.factories import add_member
from tests.notifications.fake_slack import FakeSlack, answer_form, click, signed

pytestmark = pytest.mark.django_db
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-1111-2222-abcdefghijkl"


@pytest.fixture
def fake():
    server = FakeSlack()
    with override_settings(AIRLOCK_SLACK_API_URL=server.url):
        yield server
    server.close()


@pytest.fixture
def connection(desk, fake):
    return slack.connect(actor=desk.actor, bot_token=TOKEN, signing_secret=SECRET, channel="#approvals",
                         risk_channels={"write": "C-REFUNDS"})


def held(desk, crew, actor=None):
    run = worker.drive_run(run_id=services.start_run(actor=actor or desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    request = ApprovalRequest.objects.get(run_id=run.id)
    assert tasks.post_to_slack.apply(args=[str(request.org_id), str(request.id)]).get() is True
    return run, request


def interact(connection, payload, **signing):
    body, headers = signed(SECRET, payload, **signing)
    return Client().post(f"/integrations/slack/{connection.id}/interactions/", body,
                         content_type="application/x-www-form-urlencoded", **headers)


def test_connecting_checks_the_fields_and_keeps_the_secrets_write_only(desk, fake):
    with pytest.raises(ValidationFailed) as bad:
        slack.connect(actor=desk.actor, bot_token="nope", signing_secret="short", channel="",
                      risk_channels={"huge": "C1"})
    assert set(bad.value.errors) == {"bot_token", "signing_secret", "channel", "risk_channels"}
    connection = slack.connect(actor=desk.actor, bot_token=TOKEN, signing_secret=SECRET, channel="#approvals")
    assert connection.channel == "approvals"
    again = slack.connect(actor=desk.actor, channel="ops")  # empty token and secret keep the stored ones
    assert again.credentials == {"bot_token": TOKEN, "signing_secret": SECRET} and again.channel == "ops"
    from django.db import connection as db

    with db.cursor() as cursor:
        cursor.execute("SELECT credentials::text FROM notifications_slackconnection")
        assert TOKEN not in cursor.fetchone()[0]  # encrypted at rest


def test_a_held_write_is_posted_and_a_slack_approval_decides_as_the_member_and_updates_the_message(
        desk, org, fake, connection):
    approver = add_member(org, "approver")
    fake.add_user("U-ANA", approver.user.email.upper())  # Slack's email, matched case-insensitively
    run, request = held(desk, desk.refund_desk())
    posted = fake.called("chat.postMessage")
    assert len(posted) == 1 and posted[0]["channel"] == "C-REFUNDS" and posted[0]["_auth"] == f"Bearer {TOKEN}"
    text = str(posted[0]["blocks"])
    for fact in ("orders.refund_order", "risk *write*", "Why it waits", '"amount_cents": 500', desk.actor.label,
                 "airlock_approve", "airlock_reject", "airlock_respond"):
        assert fact in text, fact
    assert tasks.post_to_slack.apply(args=[str(org.id), str(request.id)]).get() is False  # posted once

    answer = interact(connection, click("approve", request.id, "U-ANA"))
    assert answer.status_code == 200
    request.refresh_from_db()
    assert request.status == "approved" and request.decided_by_id == approver.user_id
    assert request.decided_by_label == f"{approver.user.email} (Slack)"
    assert tasks.update_slack.apply(args=[str(org.id), str(request.id)]).get() is True
    update = fake.called("chat.update")[0]
    assert update["ts"] == SlackPost.objects.get().ts and "airlock_approve" not in str(update["blocks"])
    assert f"approved by {approver.user.email} (Slack) at" in update["text"]
    finish(run.id)
    assert list(desk.refunds()) == ["refund-A-1001"]  # exactly once


def test_a_bad_signature_or_an_old_timestamp_is_refused_and_decides_nothing(desk, org, fake, connection):
    approver = add_member(org, "approver")
    fake.add_user("U-ANA", approver.user.email)
    _, request = held(desk, desk.refund_desk())
    forged = interact(connection, click("approve", request.id, "U-ANA"), signature="v0=" + "0" * 64)
    old = interact(connection, click("approve", request.id, "U-ANA"), at=time.time() - 6 * 60)
    assert forged.status_code == 401 and old.status_code == 401
    unsigned = Client().post(f"/integrations/slack/{connection.id}/interactions/", {"payload": "{}"})
    assert unsigned.status_code == 401
    request.refresh_from_db()
    assert request.status == "pending" and request.votes.count() == 0
    assert fake.called("users.info") == []  # nobody was looked up for an unverified request


@pytest.mark.parametrize("who", ["viewer", "unverified", "stranger"])
def test_people_who_may_not_decide_are_told_why_and_nothing_is_decided(desk, org, fake, connection, who):
    member = add_member(org, "viewer" if who == "viewer" else "approver")
    fake.add_user("U-X", member.user.email if who != "stranger" else "someone@elsewhere.test",
                  confirmed=who != "unverified")
    _, request = held(desk, desk.refund_desk())
    assert interact(connection, click("approve", request.id, "U-X")).status_code == 200
    told = fake.called("chat.postEphemeral")
    expected = {"viewer": "does not allow", "unverified": "no verified email",
                "stranger": "is not a member"}[who]
    assert len(told) == 1 and expected in told[0]["text"] and told[0]["user"] == "U-X"
    request.refresh_from_db()
    assert request.status == "pending" and request.votes.count() == 0


def test_two_of_two_counts_people_across_slack_and_the_inbox_and_the_starter_is_kept_out(desk, org, fake,
                                                                                       connection):
    starter, first, second = (add_member(org, "admin"), add_member(org, "approver"), add_member(org, "approver"))
    for slack_id, member in (("U-S", starter), ("U-1", first)):
        fake.add_user(slack_id, member.user.email)
    run, request = held(desk, desk.refund_desk(approvals_required=2, separation_of_duties=True),
                        actor=member_actor(starter))
    interact(connection, click("approve", request.id, "U-S"))
    assert "separates duties" in fake.called("chat.postEphemeral")[-1]["text"]
    interact(connection, click("approve", request.id, "U-1"))
    interact(connection, click("approve", request.id, "U-1"))  # the same person again: one vote
    assert "already voted" in fake.called("chat.postEphemeral")[-1]["text"]
    request.refresh_from_db()
    assert request.status == "pending" and request.votes.count() == 1
    assert tasks.update_slack.apply(args=[str(org.id), str(request.id)]).get() is False  # still open
    # The second approval in the inbox decides it; the Slack message is updated all the same.
    decisions.decide_approval(actor=member_actor(second), approval_id=request.id, decision="approve")
    assert tasks.update_slack.apply(args=[str(org.id), str(request.id)]).get() is True
    assert f"approved by {second.user.email} at" in fake.called("chat.update")[0]["text"]
    finish(run.id)
    assert list(desk.refunds()) == ["refund-A-1001"]


def test_answer_instead_opens_a_form_and_its_text_reaches_the_agent(desk, org, fake, connection):
    approver = add_member(org, "approver")
    fake.add_user("U-ANA", approver.user.email)
    run, request = held(desk, desk.refund_desk())
    interact(connection, click("respond", request.id, "U-ANA"))
    opened = fake.called("views.open")
    assert len(opened) == 1 and opened[0]["trigger_id"] == "trigger-1"
    assert str(request.id) in str(opened[0]["view"])
    request.refresh_from_db()
    assert request.status == "pending"  # opening the form decides nothing
    empty = interact(connection, answer_form(request.id, "U-ANA", "  "))
    assert empty.json()["response_action"] == "errors"
    assert interact(connection, answer_form(request.id, "U-ANA", "Offer a voucher instead.")).status_code == 200
    request.refresh_from_db()
    assert request.status == "answered" and request.comment == "Offer a voucher instead."
    run = finish(run.id)
    call = ToolCall.objects.get(run=run, qualified_name="orders.refund_order")
    assert call.dispatched_at is None and call.result["text"] == "Offer a voucher instead." and desk.refunds() == {}


def test_the_crews_channel_wins_over_the_risks_and_the_api_host_passes_the_egress_guard(desk, org, fake):
    crew = desk.refund_desk()
    slack.connect(actor=desk.actor, bot_token=TOKEN, signing_secret=SECRET, channel="approvals",
                  risk_channels={"write": "C-REFUNDS"}, crew_channels={str(crew.id): "C-CREW"})
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False, AIRLOCK_EGRESS_ALLOW=""):
        run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                           enqueue=False).id)
        request = ApprovalRequest.objects.get(run_id=run.id)
        with pytest.raises(EgressRefused):
            slack.post_approval(org_id=org.id, approval_id=request.id)
    assert fake.calls == []
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False, AIRLOCK_EGRESS_ALLOW="127.0.0.1"):
        slack.post_approval(org_id=org.id, approval_id=request.id)
    assert fake.called("chat.postMessage")[0]["channel"] == "C-CREW"
    assert SlackConnection.objects.count() == 1


def test_an_admin_connects_slack_in_settings_and_the_secrets_are_never_shown(desk, org, owner, fake):
    crew = desk.refund_desk()
    browser = Client()
    browser.force_login(owner.user)
    bad = browser.post("/settings/notifications/", {"form": "slack", "bot_token": "nope", "channel": ""})
    assert bad.status_code == 422 and "starts with xoxb-" in bad.content.decode()
    answer = browser.post("/settings/notifications/", {
        "form": "slack", "bot_token": TOKEN, "signing_secret": SECRET, "channel": "#approvals",
        "channel_dangerous": "C-DANGER", f"crew_{crew.id}": "C-CREW"}, follow=True)
    page = answer.content.decode()
    assert 'data-testid="slack-connected"' in page and TOKEN not in page and SECRET not in page
    connection = SlackConnection.objects.get(org=org)
    assert f"/integrations/slack/{connection.id}/interactions/" in page
    assert connection.risk_channels == {"dangerous": "C-DANGER"}
    assert connection.crew_channels == {str(crew.id): "C-CREW"}
    viewer = add_member(org, "viewer")
    other = Client()
    other.force_login(viewer.user)
    assert other.post("/settings/notifications/", {"form": "slack", "bot_token": TOKEN, "signing_secret": SECRET,
                                                   "channel": "x"}).status_code in (302, 403)
    assert SlackConnection.objects.get(org=org).channel == "approvals"


def test_an_escalation_mentions_the_second_group_in_the_messages_thread(desk, org, fake, connection):
    from datetime import timedelta

    from django.utils import timezone

    from apps.notifications import routing

    manager, outsider_email = add_member(org, "admin"), add_member(org, "approver").user.email
    fake.add_user("U-BOSS", manager.user.email)
    routing.set_route(actor=desk.actor, risk="write", channels=["slack"], escalate_after_minutes=30,
                      escalate_to=[manager.user.email, outsider_email])
    _, request = held(desk, desk.refund_desk())
    ApprovalRequest.objects.filter(id=request.id).update(created_at=timezone.now() - timedelta(minutes=31))
    assert tasks.nudge_approvals.apply().get() == {"reminders": 0, "escalations": 1}
    assert tasks.nudge_approvals.apply().get() == {"reminders": 0, "escalations": 0}
    reply = fake.called("chat.postMessage")[-1]
    assert reply["thread_ts"] == SlackPost.objects.get().ts and reply["reply_broadcast"] is True
    assert "<@U-BOSS>" in reply["text"] and outsider_email in reply["text"]  # Slack did not know the second


def test_slack_answering_an_error_is_retried_and_the_request_is_posted_and_closed_once(desk, org, fake,
                                                                                       connection):
    fake.errors["chat.postMessage"] = ["ratelimited"]
    fake.errors["chat.update"] = ["internal_error", "ratelimited"]
    _, request = held(desk, desk.refund_desk())  # posted on the second try
    assert len(fake.called("chat.postMessage")) == 2 and SlackPost.objects.filter(approval_id=request.id).count() == 1
    decisions.decide(actor=member_actor(add_member(org, "approver")), approval_id=request.id, decision="approve")
    assert tasks.update_slack.apply(args=[str(org.id), str(request.id)]).get() is True  # on the third
    assert len(fake.called("chat.update")) == 3
    assert SlackPost.objects.get(approval_id=request.id).closed_at is not None


def test_slack_refusing_every_try_fails_the_task_with_slacks_code_and_posts_nothing(desk, fake, connection):
    fake.errors["chat.postMessage"] = ["invalid_auth"] * 6
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=desk.refund_desk().id, inputs=A1001,
                                                       enqueue=False).id)
    request = ApprovalRequest.objects.get(run_id=run.id)
    with pytest.raises(slack.SlackError) as refused:
        tasks.post_to_slack.apply(args=[str(request.org_id), str(request.id)]).get()
    assert refused.value.error == "invalid_auth" and len(fake.called("chat.postMessage")) == 6  # 1 + 5 retries
    assert not SlackPost.objects.filter(approval_id=request.id).exists()
