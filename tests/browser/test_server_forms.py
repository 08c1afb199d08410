"""The server forms in a real browser: only the picked transport's fields show (with or without
JavaScript), and a server is edited in place."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_foundation import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _check_transport_switch(page: Page) -> None:
    form = page.locator("form.server-form")
    expect(form.get_by_label("Command", exact=True)).to_be_visible()  # stdio is the default
    expect(form.get_by_label("URL", exact=True)).to_be_hidden()
    expect(form.get_by_label("Bearer token", exact=True)).to_be_hidden()
    form.get_by_label("Streamable HTTP (a URL)").check()
    expect(form.get_by_label("URL", exact=True)).to_be_visible()
    expect(form.get_by_label("Headers", exact=True)).to_be_visible()
    expect(form.get_by_label("Command", exact=True)).to_be_hidden()
    expect(form.get_by_label("Environment", exact=True)).to_be_hidden()
    form.get_by_label("stdio (a local command)").check()
    expect(form.get_by_label("Command", exact=True)).to_be_visible()
    expect(form.get_by_label("URL", exact=True)).to_be_hidden()


def test_the_register_form_shows_the_picked_transports_fields(page: Page, live_url, owner):
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/servers/")
    _check_transport_switch(page)


def test_it_works_without_javascript_too(browser, live_url, owner):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    try:
        sign_in(page, live_url, owner.user.email)
        page.goto(f"{live_url}/servers/")
        _check_transport_switch(page)
    finally:
        context.close()
