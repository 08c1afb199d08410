"""An admin in a real browser pastes a Claude Desktop config, reads the preview (secrets masked, a taken name
renamed, an SSE-only entry refused) and registers the chosen servers in one confirmation."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from apps.accounts.actors import member_actor
from apps.registry import services
from apps.registry.models import McpServer
from tests.browser.test_accessibility import serious_violations
from tests.browser.test_foundation import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CONFIG = {"mcpServers": {
    "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
               "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_browser_secret_value"}},
    "reports": {"command": "/opt/acme/bin/reports-mcp", "args": ["--stdio"]},
    "events": {"type": "sse", "url": "https://events.example.com/sse"},
}}


def test_paste_preview_and_confirm_registers_the_chosen_servers(page: Page, live_url, owner):
    services.create_server(actor=member_actor(owner), name="github", transport="stdio", trust_tier="internal",
                           command="/bin/true", sync=False)
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/servers/")
    page.get_by_role("link", name="Import a config").click()
    assert serious_violations(page) == []
    page.get_by_label("Config (JSON)").fill(json.dumps(CONFIG, indent=2))
    page.get_by_role("button", name="Preview").click()

    table = page.get_by_role("table", name="Servers to import")
    expect(table).to_contain_text("GITHUB_PERSONAL_ACCESS_TOKEN=•••")
    expect(page.locator("body")).not_to_contain_text("ghp_browser_secret_value")
    expect(page.get_by_label("Name for github")).to_have_value("github-2")
    expect(page.get_by_label("Trust tier for github")).to_have_value("third_party")
    expect(page.get_by_label("Trust tier for reports")).to_have_value("internal")
    expect(page.get_by_label("Import events")).to_be_disabled()
    expect(table).to_contain_text("SSE-only")
    assert serious_violations(page) == []

    page.get_by_label("Name for reports").fill("acme-reports")
    page.get_by_role("button", name="Register the chosen servers").click()

    expect(page.get_by_text("Imported 2 servers")).to_be_visible()
    expect(page.locator("tbody")).to_contain_text("github-2")
    expect(page.locator("tbody")).to_contain_text("acme-reports")
    names = set(McpServer.objects.filter(org_id=owner.org_id).exclude(transport="builtin")
                .values_list("name", flat=True))
    assert names == {"github", "github-2", "acme-reports"}
    assert McpServer.objects.get(org_id=owner.org_id, name="github-2").env == {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_browser_secret_value"}
