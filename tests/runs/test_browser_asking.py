"""In a real browser, on the live server and a real worker: an approver answers an agent's question by
picking one of its choices, then fills in the form a server asked for mid-call; both runs finish with the
person's answer."""

from __future__ import annotations

import functools

import pytest
from playwright.sync_api import Page, expect

from apps.runs.models import Run
from tests.approvals.test_browser import order_desk, start
from tests.browser.test_foundation import sign_in
from tests.factories import add_member
from tests.runs.test_browser_history import in_thread
from tests.runs.test_human_ask import asking_crew
from tests.runs.test_server_requests import REFUND, asking_server, crew_calling, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
INPUTS = {"order_id": "A-1001", "amount_cents": 5}


def finished(run_id) -> Run:
    return wait_for(lambda: in_thread(lambda: Run.objects.filter(id=run_id, status__in=["succeeded", "failed"])
                                      .first()), what="the run to finish")


def test_an_approver_answers_a_question_and_a_servers_form_in_the_inbox(page: Page, live_url, worker, owner, org,
                                                                        tmp_path):
    desk = in_thread(order_desk, owner, tmp_path / "orders.json")
    in_thread(functools.partial(asking_server, allow_elicitation=True), desk.actor)
    approver = in_thread(add_member, org, "approver")
    sign_in(page, live_url, approver.user.email)

    question_run = start(desk, in_thread(asking_crew, desk), INPUTS)
    page.goto(f"{live_url}/inbox/")
    item = page.locator("[data-testid=approval][data-kind=question]")
    expect(item).to_be_visible(timeout=60_000)
    expect(item.get_by_test_id("question")).to_contain_text("Refund A-1001: full or half?")
    item.get_by_role("button", name="half").click()
    expect(item.get_by_test_id("answer")).to_contain_text("half")  # the card now says who answered what
    run = finished(question_run.id)
    assert run.status == "succeeded" and "half" in run.output and "Answer from a person" in run.output

    form_run = start(desk, in_thread(crew_calling, desk, REFUND), INPUTS)
    page.goto(f"{live_url}/inbox/")
    pending = page.locator("[data-testid=approval][data-kind=elicitation][data-status=pending]")
    expect(pending).to_be_visible(timeout=60_000)
    item = page.locator(f"#{pending.get_attribute('id')}")
    expect(item.get_by_test_id("call-deadline")).to_contain_text("a worker slot")
    item.get_by_label("Amount Cents").fill("not a number")
    item.get_by_role("button", name="Send").click()
    expect(item.get_by_test_id("field-error")).to_be_visible()
    item.get_by_label("Amount Cents").fill("250")
    item.get_by_label("Reason").fill("late parcel")
    item.get_by_role("button", name="Send").click()
    expect(item.get_by_test_id("answer")).to_have_text('accept {"amount_cents": 250, "reason": "late parcel"}')  # JSON
    run = finished(form_run.id)
    assert run.status == "succeeded", run.error
    assert "refunded 250 cents on A-1001 (late parcel)" in run.output
