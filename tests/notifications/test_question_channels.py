"""An agent's question (`human.ask`) reaches people by email and Slack like a held call: each person of the
question's group gets their own single-use link to an answer page (a GET shows, only the page's POST with CSRF
answers, as that member); Slack posts the question with an Answer button whose form answers it as the member
whose verified email Slack reports (signed interactions only, the group checked); routes pick who is asked;
the answer resumes the run as a person's words."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from django.test import Client, override_settings

from apps.approvals.models import ApprovalRequest
from apps.notifications import routing, slack, tasks
from apps.notifications import services as notifications
from apps.notifications.models import Notification, SlackPost
from apps.runs import services, worker
from apps.runs.models import ToolCall
from tests.factories import add_member
from tests.notifications.fake_slack import FakeSlack, click, signed
from tests.web.test_accessibility import audit

pytestmark = pytest.mark.django_db
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-1111-2222-abcdefghijkl"
ANSWER_LINK = re.compile(r"https?://\S+/approvals/email/[\w-]+/")


def asking_crew(desk, ask="approvers"):
    step = {"tool": "human.ask", "args": {"question": "Refund {{input.order_id}}: full or half?", "ask": ask,
                                         "choices": ["full", "half"]}}
    agent = desk.agent("Asker", [{"call": [step]}, {"say": "They said: {{result}}\nSTATUS: done\nREASON: asked"}],
                       [{"tool": "human.ask", "policy": "auto"}])
    return desk.sequential("Ask desk", [("ask", agent, "Ask about {order_id}.", [])])


def asked(desk, crew):
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id,
                                                       inputs={"order_id": "A-1001", "amount_cents": 5},
                                                       enqueue=False).id)
    assert run.status == "waiting", run.error
    return run, ApprovalRequest.objects.get(run_id=run.id, kind="question")


def mailed(desk, crew):
    notifications.set_email_events(actor=desk.actor, events=["approval.requested"])
    run, request = asked(desk, crew)
    note = Notification.objects.get(event="approval.requested")
    assert tasks.send_notification_email.apply(args=[str(note.id)]).get() is True
    return run, request


def link_of(message) -> str:
    found = ANSWER_LINK.findall(message.get_body(preferencelist=("plain",)).get_content())
    assert len(found) == 1, found
    return urlsplit(found[0]).path


def csrf(page) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)


def test_the_question_email_links_to_an_answer_page_that_answers_as_that_member_once(desk, org, owner, smtp):
    approver, viewer = add_member(org, "approver"), add_member(org, "viewer")
    run, request = mailed(desk, asking_crew(desk))
    assert sorted(m["To"] for m in smtp.messages) == sorted([owner.user.email, approver.user.email])  # the group
    message = smtp.to(approver.user.email)
    assert "Question" in message["Subject"]
    text = message.get_body(preferencelist=("plain",)).get_content()
    assert "Refund A-1001: full or half?" in text and "full, half" in text and viewer.user.email not in text
    mine, theirs = link_of(message), link_of(smtp.to(owner.user.email))
    assert mine != theirs

    browser = Client(enforce_csrf_checks=True)
    page = browser.get(mine)  # a mail scanner's prefetch answers nothing
    body = page.content.decode()
    assert page.status_code == 200 and page["Referrer-Policy"] == "same-origin"
    assert 'data-testid="question"' in body and "Refund A-1001: full or half?" in body
    assert approver.user.email in body and 'data-testid="answer-form"' in body
    assert audit(body).problems() == []
    assert Client(enforce_csrf_checks=True).post(mine, {"answer": "full"}).status_code == 403  # no CSRF token
    empty = browser.post(mine, {"csrfmiddlewaretoken": csrf(page), "answer": "  "})
    assert empty.status_code == 422 and 'data-testid="answer-error"' in empty.content.decode()
    assert audit(empty.content.decode()).problems() == []
    request.refresh_from_db()
    assert request.status == "pending"

    done = browser.post(mine, {"csrfmiddlewaretoken": csrf(page), "answer": "half, please"})
    assert done.status_code == 200 and "Your answer was sent to the agent." in done.content.decode()
    request.refresh_from_db()
    assert request.status == "answered" and request.answer == {"text": "half, please"}
    assert request.decided_by_id == approver.user_id and request.decided_by_label == f"{approver.user.email} (email)"
    again = browser.get(mine).content.decode()
    assert 'data-testid="link-stale"' in again and "answered by" in again
    late = browser.post(theirs, {"csrfmiddlewaretoken": csrf(page), "answer": "full"})  # the owner's, too late
    assert late.status_code == 409
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded" and "half, please" in run.output and "Answer from a person" in run.output
    call = ToolCall.objects.get(run=run, qualified_name="human.ask")
    assert call.result["answered_by"] == f"{approver.user.email} (email)"


def test_a_question_for_builders_is_mailed_to_builders_and_a_route_narrows_who_is_asked(desk, org, owner, smtp):
    builder, approver = add_member(org, "builder"), add_member(org, "approver")
    crew = asking_crew(desk, ask="builders")
    mailed(desk, crew)
    assert sorted(m["To"] for m in smtp.messages) == sorted([owner.user.email, builder.user.email])
    assert approver.user.email not in [m["To"] for m in smtp.messages]  # approvers are not builders

    smtp.messages.clear()
    routing.set_route(actor=desk.actor, crew_id=crew.id, people=[owner.user.email], channels=["email"])
    _, request = asked(desk, crew)
    note = Notification.objects.filter(event="approval.requested").order_by("-created_at").first()
    assert note.payload["approval_id"] == str(request.id) and note.email_to == [owner.user.email]
    assert tasks.send_notification_email.apply(args=[str(note.id)]).get() is True
    assert [m["To"] for m in smtp.messages] == [owner.user.email]


@pytest.fixture
def fake():
    server = FakeSlack()
    with override_settings(AIRLOCK_SLACK_API_URL=server.url):
        yield server
    server.close()


def interact(connection, payload, **signing):
    body, headers = signed(SECRET, payload, **signing)
    return Client().post(f"/integrations/slack/{connection.id}/interactions/", body,
                         content_type="application/x-www-form-urlencoded", **headers)


def answered_in_form(approval_id, user: str, text: str) -> dict:
    return {"type": "view_submission", "user": {"id": user},
            "view": {"callback_id": "airlock_answer", "private_metadata": str(approval_id),
                     "state": {"values": {"answer": {"answer": {"type": "plain_text_input", "value": text}}}}}}


def test_slack_posts_the_question_and_its_answer_form_answers_as_the_member(desk, org, fake):
    connection = slack.connect(actor=desk.actor, bot_token=TOKEN, signing_secret=SECRET, channel="#questions")
    approver, viewer = add_member(org, "approver"), add_member(org, "viewer")
    fake.add_user("U-ANA", approver.user.email)
    fake.add_user("U-VIC", viewer.user.email)
    run, request = asked(desk, asking_crew(desk))
    assert tasks.post_to_slack.apply(args=[str(org.id), str(request.id)]).get() is True
    posted = fake.called("chat.postMessage")
    assert len(posted) == 1 and posted[0]["channel"] == "questions"
    blocks = str(posted[0]["blocks"])
    for fact in ("Asker", "Refund A-1001: full or half?", "full, half", "airlock_answer"):
        assert fact in blocks, fact
    assert "airlock_approve" not in blocks

    forged = interact(connection, answered_in_form(request.id, "U-ANA", "full"), signature="v0=" + "0" * 64)
    assert forged.status_code == 401
    assert interact(connection, click("answer", request.id, "U-VIC")).status_code == 200
    told = fake.called("chat.postEphemeral")
    assert len(told) == 1 and "not among them" in told[0]["text"] and fake.called("views.open") == []
    refused = interact(connection, answered_in_form(request.id, "U-VIC", "full")).json()
    assert refused["response_action"] == "errors" and "not among them" in refused["errors"]["answer"]

    interact(connection, click("answer", request.id, "U-ANA"))
    opened = fake.called("views.open")
    assert len(opened) == 1 and "Refund A-1001: full or half?" in str(opened[0]["view"])
    request.refresh_from_db()
    assert request.status == "pending"  # opening the form answers nothing
    empty = interact(connection, answered_in_form(request.id, "U-ANA", " ")).json()
    assert empty["response_action"] == "errors" and empty["errors"]["answer"] == "Write an answer."
    assert interact(connection, answered_in_form(request.id, "U-ANA", "full")).status_code == 200
    request.refresh_from_db()
    assert request.status == "answered" and request.decided_by_label == f"{approver.user.email} (Slack)"
    assert tasks.update_slack.apply(args=[str(org.id), str(request.id)]).get() is True
    update = fake.called("chat.update")[0]
    assert update["ts"] == SlackPost.objects.get().ts and "airlock_answer" not in str(update["blocks"])
    assert f"answered by {approver.user.email} (Slack)" in update["text"] and "“full”" in str(update["blocks"])
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded" and "full" in run.output


def test_a_questions_route_decides_whether_slack_is_asked(desk, org, owner):
    from apps.approvals.services import notification_payload

    crew = asking_crew(desk)
    routing.set_route(actor=desk.actor, crew_id=crew.id, people=[owner.user.email], channels=["email"])
    _, request = asked(desk, crew)
    payload = notification_payload(request)
    assert payload["kind"] == "question" and payload["ask"] == "approvers"
    assert routing.audience(org.id, payload) == routing.Audience(emails=[owner.user.email], slack=False)
    routing.set_route(actor=desk.actor, crew_id=crew.id, people=[owner.user.email], channels=["email", "slack"])
    assert routing.audience(org.id, payload).slack is True
