"""In a real browser with a real worker: triaging the inbox with the keyboard (j / a / x) and deciding the
selected items together; each item is its own decision and its run goes on. Screenshot in artifacts/."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Page, expect

from apps.approvals.models import ApprovalRequest
from apps.runs import worker
from tests.approvals.test_browser import order_desk
from tests.browser.test_accessibility import serious_violations
from tests.browser.test_foundation import sign_in
from tests.runs.test_browser_history import in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def held_runs(owner, data, count):
    from apps.runs import services

    desk = order_desk(owner, data)
    crew = desk.refund_desk()
    ids = []
    for n in range(count):
        run = services.start_run(actor=desk.actor, crew_id=crew.id,
                                 inputs={"order_id": f"A-100{n + 1}", "amount_cents": 100 + n}, enqueue=False)
        worker.drive_run(run_id=run.id)
        ids.append(run.id)
    return ids


def test_an_owner_triages_the_inbox_with_the_keyboard_and_decides_two_items_together(
        page: Page, live_url, worker, owner, tmp_path):
    run_ids = in_thread(held_runs, owner, tmp_path / "orders.json", 3)
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/inbox/")
    items = page.locator("#inbox-items [data-testid=approval]")
    expect(items).to_have_count(3)
    expect(items.first.get_by_test_id("arguments")).to_contain_text('"amount_cents": 100')  # oldest first
    expect(items.first.get_by_test_id("waited")).to_contain_text("waiting")
    page.get_by_text("Keyboard shortcuts").click()
    expect(page.get_by_test_id("inbox-keys")).to_contain_text("next / previous item")
    artifacts = Path(settings.VAR_DIR) / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(artifacts / "inbox-triage.png"), full_page=True)
    assert not (found := serious_violations(page)), "\n".join(found)  # WCAG 2.1 AA on the inbox as triaged (axe-core)

    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("j")
    expect(items.first).to_be_focused()
    page.keyboard.press("a")  # approve the focused item (this call only)
    expect(page.locator(f"#approval-{in_thread(first_request, run_ids[0])}")
           .get_by_test_id("decided")).to_contain_text("Approved")

    page.get_by_test_id("inbox-keys-on").uncheck()  # single-key shortcuts can be turned off
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("j")
    expect(items.nth(1)).not_to_be_focused()
    page.reload()
    expect(page.get_by_test_id("inbox-keys-on")).not_to_be_checked()  # remembered

    for box in page.get_by_test_id("select-item").all():
        box.check()
    page.get_by_test_id("reject-selected").click()
    expect(page.locator(".alert").filter(has_text="Rejected 2 items")).to_be_visible()
    statuses = in_thread(lambda: [ApprovalRequest.objects.get(run_id=r).status for r in run_ids])
    assert statuses == ["approved", "rejected", "rejected"]


def first_request(run_id):
    return ApprovalRequest.objects.get(run_id=run_id).id


def test_a_live_update_keeps_what_the_person_ticked_and_typed(page: Page, live_url, worker, owner, tmp_path):
    """The inbox socket re-renders items (when it connects, on a vote, on any change): a box the person
    ticked and a comment they began stay as they were, in the new markup."""
    from apps.approvals.services import publish_item

    run_ids = in_thread(held_runs, owner, tmp_path / "orders.json", 2)
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/inbox/")
    expect(page.get_by_test_id("inbox")).to_have_attribute("data-live-state", "open")
    items = page.locator("#inbox-items [data-testid=approval]")
    expect(items).to_have_count(2)
    items.first.get_by_test_id("select-item").check()
    items.nth(1).get_by_label("Comment", exact=True).fill("not this one, ask finance")
    page.evaluate("document.querySelectorAll('#inbox-items [data-testid=approval]')"
                  ".forEach(el => el.dataset.before = 'yes')")  # gone once an item is re-rendered

    for run_id in run_ids:
        in_thread(lambda r=run_id: publish_item(ApprovalRequest.objects.get(run_id=r)))
    expect(page.locator("#inbox-items [data-before=yes]")).to_have_count(0)  # both items are new markup

    expect(items).to_have_count(2)
    expect(items.first.get_by_test_id("select-item")).to_be_checked()
    expect(items.nth(1).get_by_test_id("select-item")).not_to_be_checked()
    expect(items.nth(1).get_by_label("Comment", exact=True)).to_have_value("not this one, ask finance")


def test_a_live_update_of_the_item_being_typed_in_keeps_the_caret_there(page: Page, live_url, worker, owner,
                                                                        tmp_path):
    """A person is typing a comment when a live update re-renders that item: the new comment box has their text
    and their cursor, so the next keys go on into it, not to the page, where single keys are the inbox's
    shortcuts ("a" approves the focused item)."""
    from apps.approvals.services import publish_item

    run_id = in_thread(held_runs, owner, tmp_path / "orders.json", 1)[0]
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/inbox/")
    expect(page.get_by_test_id("inbox")).to_have_attribute("data-live-state", "open")
    comment = page.locator("#inbox-items [data-testid=approval]").first.get_by_label("Comment", exact=True)
    comment.click()
    page.keyboard.type("not this")
    page.evaluate("document.querySelectorAll('#inbox-items [data-testid=approval]')"
                  ".forEach(el => el.dataset.before = 'yes')")  # gone once the item is re-rendered
    in_thread(lambda: publish_item(ApprovalRequest.objects.get(run_id=run_id)))
    expect(page.locator("#inbox-items [data-before=yes]")).to_have_count(0)

    expect(comment).to_be_focused()
    page.keyboard.type(" one, ask finance")
    expect(comment).to_have_value("not this one, ask finance")
    assert in_thread(lambda: ApprovalRequest.objects.get(run_id=run_id).status) == "pending"
