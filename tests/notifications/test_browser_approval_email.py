"""In a real browser, on the live server and a real worker: an approver opens the approve link from
the email a real SMTP server received, reads the call on the confirmation page, confirms, and the run
finishes with the refund made once; a colleague's link then says who decided and when."""

from __future__ import annotations

import time

import pytest
from django.test import override_settings
from playwright.sync_api import Page, expect

from apps.approvals.models import ApprovalRequest
from apps.notifications.approval_links import send_approval_emails
from apps.notifications.models import Notification
from apps.runs.models import Run
from tests.approvals.test_browser import order_desk, start
from tests.factories import add_member
from tests.notifications.conftest import links
from tests.runs.test_browser_history import in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def wait_for(read, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = in_thread(read)
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("timed out")


def test_an_approver_follows_the_emailed_link_confirms_and_the_run_finishes(page: Page, live_url, worker, owner,
                                                                             org, smtp, tmp_path):
    data = tmp_path / "orders.json"
    desk = in_thread(order_desk, owner, data)
    crew = in_thread(desk.refund_desk)
    approver = in_thread(add_member, org, "approver")
    run = start(desk, crew, {"order_id": "A-1001", "amount_cents": 500})
    request = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run.id, status="pending").first())
    # What the worker's send_notification_email does for this notification, here, so the mail reaches this
    # test's SMTP server with links to this live server.
    note = Notification(org_id=org.id, event="approval.requested", payload={"approval_id": str(request.id)},
                        email_to=[owner.user.email, approver.user.email])
    with override_settings(AIRLOCK_BASE_URL=live_url):
        assert in_thread(lambda: send_approval_emails(notification=note)) == 2
    smtp.wait(2)
    mine, theirs = links(smtp.to(approver.user.email)), links(smtp.to(owner.user.email))

    page.goto(mine["approve"])  # not signed in: the link is the credential
    expect(page.get_by_test_id("link-member")).to_have_text(approver.user.email)
    expect(page.get_by_test_id("arguments")).to_contain_text('"amount_cents": 500')
    expect(page.get_by_test_id("reason")).to_contain_text("approve")
    assert in_thread(lambda: ApprovalRequest.objects.get(id=request.id).status) == "pending"  # the GET decided nothing
    page.get_by_test_id("confirm-approve").click()
    expect(page.get_by_test_id("link-done")).to_have_text("You approved this call.")
    wait_for(lambda: Run.objects.get(id=run.id).is_finished)
    assert in_thread(lambda: Run.objects.get(id=run.id).status) == "succeeded"
    assert list(desk.refunds()) == ["refund-A-1001"]  # the approved call ran exactly once

    page.goto(theirs["open"])
    stale = page.get_by_test_id("link-stale")
    expect(stale).to_contain_text(f"already approved by {approver.user.email} (email) at ")
    expect(page.get_by_test_id("link-form")).to_have_count(0)
