"""An admin registers an OAuth-protected MCP server in a real browser: its sync finds the OAuth challenge,
the admin authorizes Airlock at the server's authorization server (a real one, django-oauth-toolkit, on
loopback) and comes back to a server whose tools are listed."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from apps.registry.models import McpServer, ServerStatus
from tests.browser.test_foundation import sign_in
from tests.registry.oauth_as import protected_server
from tests.registry.oauth_as.server import AS_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def protected(tmp_path):
    with protected_server(tmp_path) as p:
        yield p


def test_register_authorize_in_the_browser_and_see_the_tools(page: Page, live_url, worker, owner, protected):
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/servers/")
    form = page.locator("form.server-form")
    form.get_by_label("Name", exact=True).fill("guarded")
    form.get_by_label("Streamable HTTP (a URL)").check()
    form.get_by_label("URL", exact=True).fill(protected.mcp_url)
    form.get_by_label("Internal").check()
    form.get_by_role("button", name="Register").click()

    expect(page.get_by_test_id("needs-authorization")).to_be_visible(timeout=30_000)
    page.get_by_test_id("authorize").click()
    expect(page.get_by_test_id("authorization-server")).to_have_text(protected.as_url)
    page.get_by_test_id("continue-authorization").click()

    expect(page.get_by_role("heading", name="Test authorization server")).to_be_visible()
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(AS_PASSWORD)
    page.get_by_role("button", name="Sign in to the authorization server").click()
    page.get_by_role("button", name="Authorize").click()  # the authorization server's consent

    expect(page.get_by_text("Airlock is authorized with this server")).to_be_visible()
    expect(page.get_by_test_id("oauth-state")).to_contain_text("mcp:tools")
    expect(page.get_by_text("whoami").first).to_be_visible(timeout=30_000)
    server = McpServer.objects.get(name="guarded")
    assert server.status == ServerStatus.OK
    assert server.oauth_secrets["access_token"] not in page.content()
