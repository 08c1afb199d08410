"""A person in a real browser: signs in, manages members and tokens, sees live updates."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.factories import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def sign_in(page: Page, live_url: str, email: str) -> None:
    page.goto(f"{live_url}/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


def test_an_owner_adds_a_member_and_creates_a_token(page: Page, live_url, owner):
    sign_in(page, live_url, owner.user.email)
    expect(page.locator("#inbox-badge")).to_have_text("0")

    page.get_by_role("link", name="Settings").first.click()
    page.get_by_label("Email").fill("not-an-email")
    page.get_by_role("button", name="Add member").click()
    expect(page.locator("#id_email-error")).to_be_visible()
    page.get_by_label("Email").fill("new.colleague@example.com")
    page.get_by_label("Role", exact=True).select_option("approver")
    page.get_by_role("button", name="Add member").click()
    expect(page.get_by_text("Give new.colleague@example.com this password")).to_be_visible()
    expect(page.locator("#members-panel tbody")).to_contain_text("new.colleague@example.com")

    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("nightly report")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token").inner_text()
    assert re.fullmatch(r"al_[A-Za-z0-9_-]{40,}", token)
    page.reload()
    expect(page.locator("#tokens-panel")).to_contain_text("nightly report")
    expect(page.locator("#new-token")).to_have_count(0)


def test_a_worker_check_updates_the_page_live(page: Page, live_url, worker, owner):
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/settings/system/")
    # The answer is pushed over the page's socket: it must be open before we ask.
    expect(page.locator("body[data-live=connected]")).to_have_count(1, timeout=30_000)
    page.get_by_role("button", name="Check a worker now").click()
    expect(page.locator("[data-state=answered]")).to_contain_text("answered", timeout=20_000)


def test_a_worker_check_is_answered_when_the_live_socket_is_down(page: Page, live_url, worker, owner):
    """The pushed answer can be missed: a fast worker answers before the waiting message is swapped in,
    or the socket is down. The waiting message then reads the answer itself."""
    page.route_web_socket(re.compile(r".*/ws/org/.*"), lambda socket: socket.close())
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/settings/system/")
    page.get_by_role("button", name="Check a worker now").click()
    expect(page.locator("[data-state=answered]")).to_contain_text("answered", timeout=20_000)


def test_the_layout_works_on_a_phone(page: Page, live_url, viewer):
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, live_url, viewer.user.email)
    nav = page.get_by_role("link", name="Crews")
    expect(nav).to_be_hidden()
    page.wait_for_load_state("load")  # the collapse behaviour comes with the deferred Tabler script
    page.get_by_role("button", name="Toggle navigation").click()
    expect(nav).to_be_visible()
