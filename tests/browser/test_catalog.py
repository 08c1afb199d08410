"""An admin in a real browser registers the bundled demo server from the catalog and sees its tools."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_foundation import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_servers_catalog_register_sync_and_tools_listed(page: Page, live_url, worker, owner):
    sign_in(page, live_url, owner.user.email)
    page.get_by_role("link", name="Servers").first.click()
    expect(page.get_by_text("No MCP servers yet")).to_be_visible()

    page.get_by_role("link", name="Add from catalog").click()
    expect(page.get_by_role("heading", name="Server catalog")).to_be_visible()
    page.get_by_role("button", name="Register Order desk (bundled demo) now").click()

    expect(page.get_by_role("heading", name="orders")).to_be_visible()
    expect(page.get_by_text("registered from the catalog")).to_be_visible()
    # The worker syncs it; the page follows the sync and then lists what it found.
    tools = page.get_by_role("table").filter(has_text="Findings")
    expect(tools).to_contain_text("orders.get_order_status", timeout=30_000)
    expect(tools).to_contain_text("orders.refund_order")
    expect(page.locator("#server-status")).to_contain_text("OK")

    page.get_by_role("link", name="MCP servers").click()
    expect(page.locator("tbody")).to_contain_text("2 read")


def test_times_show_in_the_readers_time_zone(browser, live_url, owner):
    context = browser.new_context(timezone_id="Asia/Tokyo", locale="en-GB")
    page = context.new_page()
    try:
        sign_in(page, live_url, owner.user.email)
        stamp = page.locator("time[datetime]").first  # recent activity: the sign-in just now
        expect(stamp).to_have_attribute("data-localised", "1")
        expect(stamp).to_have_attribute("title", re.compile(r"GMT\+9$"))
        expect(stamp).to_have_text(re.compile(r"just now|minute"))
    finally:
        context.close()
