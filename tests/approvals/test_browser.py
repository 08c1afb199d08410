"""In a real browser, on the live server and a real worker: a held refund appears in the inbox
without a reload, an approver edits the amount on the run page and watches the run finish live;
another approver rejects with a comment and reads the model's answer to the rejection."""

from __future__ import annotations

import json
import sys

import pytest
from playwright.sync_api import Page, expect

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.registry import services as registry_services
from apps.runs import services
from tests.browser.test_foundation import sign_in
from tests.factories import add_member
from tests.runs.conftest import LOOK_UP, REFUND, ROOT, Desk
from tests.runs.test_browser_history import in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REJECTED = "I could not refund it: a person rejected the refund, so I stopped.\nSTATUS: done\nREASON: rejected"


def order_desk(owner, data) -> Desk:
    actor = member_actor(owner)
    server = registry_services.create_server(
        actor=actor, name="orders", transport="stdio", trust_tier="internal", command=sys.executable,
        args=["-m", "apps.demo.order_desk", "stdio"], cwd=str(ROOT), env={"ORDER_DESK_DATA": str(data)}, sync=False)
    registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    return Desk(actor, data, connection)


def start(desk, crew, inputs):
    return in_thread(lambda: services.start_run(actor=desk.actor, crew_id=crew.id, inputs=inputs))


def test_an_approver_sees_a_held_refund_live_edits_the_amount_and_watches_the_run_finish(
        page: Page, live_url, worker, owner, org, tmp_path):
    data = tmp_path / "orders.json"
    desk = in_thread(order_desk, owner, data)
    crew = in_thread(desk.refund_desk)
    approver = in_thread(add_member, org, "approver")
    sign_in(page, live_url, approver.user.email)
    page.goto(f"{live_url}/inbox/")
    expect(page.get_by_test_id("inbox-empty")).to_be_visible()
    page.wait_for_selector("[data-testid=inbox][data-live-state=open]")
    run = start(desk, crew, {"order_id": "A-1001", "amount_cents": 500})
    item = page.get_by_test_id("approval")
    expect(item).to_be_visible(timeout=60_000)  # no reload: pushed over the inbox socket
    expect(item.get_by_test_id("arguments")).to_contain_text('"amount_cents": 500')
    expect(item.get_by_test_id("reason")).to_contain_text("approve")
    expect(page.locator("#inbox-badge")).to_have_text("1")
    item.get_by_test_id("run-link").click()
    expect(page.get_by_test_id("run-live")).to_have_attribute("data-live-state", "open")
    expect(page.locator("#run-header [data-status]")).to_have_text("waiting")
    form = page.get_by_test_id("inline-decision")
    form.get_by_text("Edit the arguments before approving").click()
    form.get_by_label("amount_cents").fill("lots")
    form.get_by_role("button", name="Approve").click()
    expect(form.get_by_test_id("field-error")).to_contain_text("is not of type 'integer'")
    form.get_by_label("amount_cents").fill("250")
    form.get_by_role("button", name="Approve").click()
    expect(page.locator("#run-header [data-status]")).to_have_text("succeeded", timeout=60_000)
    expect(page.locator("#run-tree [data-state=succeeded]").filter(has_text="orders.refund_order")).to_be_visible()
    expect(page.get_by_test_id("decided-by").filter(has_text=approver.user.email)).to_be_visible()
    assert json.loads(data.read_text())["refunds"]["refund-A-1001"]["amount_cents"] == 250
    assert page.get_by_test_id("live-events").locator("li").count() > 3
    page.goto(f"{live_url}/runs/{run.id}/")  # a reload shows the same finished trace
    expect(page.locator("#run-header [data-status]")).to_have_text("succeeded")


def test_another_approver_rejects_with_a_comment_and_reads_the_models_answer(
        page: Page, live_url, worker, owner, org, tmp_path):
    data = tmp_path / "orders.json"
    desk = in_thread(order_desk, owner, data)

    def crew_that_answers_a_rejection():
        agent = desk.agent("Careful refunds", [{"call": [LOOK_UP]}, {"call": [REFUND]}, {"say": REJECTED}],
                           [{"tool": "orders.get_order_status", "policy": "auto"},
                            {"tool": "orders.refund_order", "policy": "approve"}])
        return desk.sequential("Careful desk", [("refund", agent, "Refund {order_id}.", [])])

    crew = in_thread(crew_that_answers_a_rejection)
    other = in_thread(add_member, org, "approver")
    sign_in(page, live_url, other.user.email)
    page.goto(f"{live_url}/inbox/")
    page.wait_for_selector("[data-testid=inbox][data-live-state=open]")
    run = start(desk, crew, {"order_id": "A-1002", "amount_cents": 900})
    item = page.get_by_test_id("approval")
    expect(item).to_be_visible(timeout=60_000)
    # The inbox socket re-renders the card as the decision commits, and the decision's own answer may come after
    # that (its after-commit work runs first). The answer is held here until the live update has come: it waits
    # for the answer, which must still bring the decided card, the outcome and the keyboard, however late.
    answers = []
    page.route("**/inbox/*/decide/", lambda route: answers.append((route, route.fetch())))
    item.get_by_label("Comment").fill("Customer already got store credit")
    item.get_by_role("button", name="Reject").click()
    expect(item).to_have_attribute("data-update-waiting", "")  # the live update came first
    expect(page.get_by_test_id("decision-status")).to_have_count(0)
    route, answer = answers[0]
    route.fulfill(response=answer)
    expect(item.get_by_test_id("decided")).to_contain_text(f"Rejected by {other.user.email}")
    expect(page.get_by_test_id("decision-status")).to_be_focused()  # the keyboard stays here
    expect(page.get_by_test_id("decision-status")).to_contain_text("Rejected")
    page.goto(f"{live_url}/runs/{run.id}/")
    expect(page.locator("#run-header [data-status]")).to_have_text("succeeded", timeout=60_000)
    refund = page.locator("#run-tree [data-state=rejected]")
    expect(refund).to_contain_text("Customer already got store credit")
    # the answer is the run's output, shown once, in the header
    expect(page.locator("#run-header")).to_contain_text("I could not refund it: a person rejected the refund")
    assert "refunds" not in json.loads(data.read_text() if data.exists() else "{}") or \
        json.loads(data.read_text())["refunds"] == {}
