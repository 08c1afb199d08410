"""In a real browser, on the live server and a real worker: a member of the question's group opens the answer
link from the email a real SMTP server received, reads the agent's question, answers it, and the run finishes
with that answer as a person's words; the link then says who answered."""

from __future__ import annotations

import pytest
from django.test import override_settings
from playwright.sync_api import Page, expect

from apps.approvals.models import ApprovalRequest
from apps.notifications.approval_links import send_approval_emails
from apps.notifications.models import Notification
from apps.runs.models import Run
from tests.approvals.test_browser import order_desk, start
from tests.factories import add_member
from tests.notifications.test_browser_approval_email import wait_for
from tests.notifications.test_question_channels import ANSWER_LINK, asking_crew
from tests.runs.test_browser_history import in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_member_answers_the_emailed_question_in_the_browser_and_the_run_finishes(page: Page, live_url, worker,
                                                                                    owner, org, smtp, tmp_path):
    desk = in_thread(order_desk, owner, tmp_path / "orders.json")
    crew = in_thread(asking_crew, desk)
    approver = in_thread(add_member, org, "approver")
    run = start(desk, crew, {"order_id": "A-1001", "amount_cents": 5})
    request = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run.id, status="pending").first())
    note = Notification(org_id=org.id, event="approval.requested",
                        payload={"approval_id": str(request.id), "kind": "question"},
                        email_to=[owner.user.email, approver.user.email])
    with override_settings(AIRLOCK_BASE_URL=live_url):
        assert in_thread(lambda: send_approval_emails(notification=note)) == 2
    smtp.wait(2)
    link = ANSWER_LINK.findall(smtp.to(approver.user.email).get_body(preferencelist=("plain",)).get_content())[0]

    page.goto(link)  # not signed in: the link is the credential
    expect(page.get_by_test_id("link-member")).to_have_text(approver.user.email)
    expect(page.get_by_test_id("question")).to_have_text("Refund A-1001: full or half?")
    assert in_thread(lambda: ApprovalRequest.objects.get(id=request.id).status) == "pending"
    page.get_by_label("Your answer").fill("half, please")
    page.get_by_test_id("send-answer").click()
    expect(page.get_by_test_id("link-done")).to_have_text("Your answer was sent to the agent.")
    wait_for(lambda: Run.objects.get(id=run.id).is_finished)
    finished = in_thread(lambda: Run.objects.get(id=run.id))
    assert finished.status == "succeeded" and "half, please" in finished.output
    page.goto(link)
    expect(page.get_by_test_id("link-stale")).to_contain_text(f"answered by {approver.user.email} (email)")
    expect(page.get_by_test_id("answer-form")).to_have_count(0)
