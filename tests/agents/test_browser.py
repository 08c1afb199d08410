"""A builder in a real browser: a connection, then an agent with an allowlist, from an empty org."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.agents.factories import order_desk, scripted_connection
from tests.browser.test_foundation import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CUT_OFF = """t => {
  const room = t.parentElement, right = t.getBoundingClientRect().right, width = document.documentElement.clientWidth;
  return room.scrollWidth > room.clientWidth + 1 || right > width + 1
    ? `table ${room.scrollWidth} px in ${room.clientWidth} px, right edge ${right} of ${width}` : "";
}"""


def test_a_builder_creates_an_agent_with_an_allowlist(page: Page, live_url, builder):
    order_desk(builder.org)  # the registry an admin set up
    sign_in(page, live_url, builder.user.email)
    page.get_by_role("link", name="Agents").first.click()
    expect(page.get_by_text("No agents yet")).to_be_visible()

    page.get_by_role("link", name="LLM connections").click()
    page.get_by_label("Name").fill("Scripted")
    page.get_by_role("button", name="Add connection").click()
    expect(page.locator("#connections-panel")).to_contain_text("Scripted (built in, deterministic)")
    page.get_by_role("button", name="Test connection").click()
    expect(page.get_by_test_id("connection-result")).to_contain_text("built in")

    page.locator(".nav-tabs").get_by_role("link", name="Agents").click()
    page.get_by_role("link", name="New agent").first.click()
    preview = page.get_by_test_id("prompt-preview")
    page.get_by_label("Name", exact=True).fill("Refunds")
    page.get_by_label("Role", exact=True).fill("refund clerk")
    expect(preview).to_contain_text("You are Refunds, refund clerk.")
    page.get_by_label("Out of scope").fill("Deleting customers.")
    expect(preview).to_contain_text("## Out of scope\nDeleting customers.")

    page.get_by_label("Risk", exact=True).select_option("dangerous")
    page.get_by_role("button", name="Add orders.delete_customer").click()
    page.get_by_label("Policy for orders.delete_customer").select_option("auto")
    page.get_by_label("Search tools").fill("refund")
    page.get_by_label("Risk", exact=True).select_option("")
    page.get_by_role("button", name="Add orders.refund_order").click()
    page.get_by_label("Condition for orders.refund_order").fill("amount_cents > 5000")
    page.get_by_label("Policy for orders.refund_order").select_option("auto")
    page.get_by_role("button", name="Create agent").click()
    expect(page.locator(".grant-error")).to_have_text(
        "orders.delete_customer is dangerous, so it cannot be auto: choose approve or deny.")
    expect(page.get_by_label("Role", exact=True)).to_have_value("refund clerk")  # nothing typed is lost

    page.get_by_label("Policy for orders.delete_customer").select_option("deny")
    page.get_by_role("button", name="Create agent").click()
    expect(page.get_by_role("heading", name="Refunds")).to_be_visible()
    permissions = page.get_by_test_id("effective-permissions")
    expect(permissions).to_contain_text("Runs without asking, unless amount_cents > 5000")
    expect(permissions).to_contain_text("This agent's grant for orders.delete_customer is deny.")
    for width in (1280, 800):  # the table fits its card and the window: no column cut off on the right
        page.set_viewport_size({"width": width, "height": 900})
        assert permissions.evaluate(CUT_OFF) == "", width
    expect(page.get_by_test_id("history")).to_contain_text("v1")


def test_adding_a_tool_keeps_focus_and_the_picker_will_not_add_it_twice(page: Page, live_url, builder):
    order_desk(builder.org)
    scripted_connection(builder.org)
    sign_in(page, live_url, builder.user.email)
    page.goto(f"{live_url}/agents/new/")
    page.get_by_role("button", name="Add orders.list_orders").click()
    policy = page.get_by_label("Policy for orders.list_orders")
    expect(policy).to_be_focused()  # the keyboard lands in the new row, not at the top of the page
    expect(page.get_by_role("button", name="orders.list_orders is already in the allowlist")).to_be_disabled()
    page.get_by_label("Search tools").fill("list")
    expect(page.get_by_role("button", name="orders.list_orders is already in the allowlist")).to_be_disabled()
    expect(page.locator("tr.grant-row[data-tool='orders.list_orders']")).to_have_count(1)
    page.get_by_role("button", name="Remove orders.list_orders").click()
    expect(page.get_by_label("Search tools")).to_be_focused()
    expect(page.get_by_role("button", name="Add orders.list_orders")).to_be_enabled()
