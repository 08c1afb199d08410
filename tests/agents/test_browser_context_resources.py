"""A builder gives an agent a resource as read-only context on its page, in a real browser: only active, pinned
resources are offered; the agent's page then names it and says it taints a run; both pages pass axe."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from apps.agents.models import ContextResource
from tests.agents.factories import make_agent, make_resource, make_server, order_desk
from tests.browser.test_accessibility import serious_violations
from tests.browser.test_foundation import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_builder_gives_an_agent_a_pinned_resource_as_context(page: Page, live_url, builder):
    order_desk(builder.org)
    notes = make_server(builder.org, "notes")
    handbook = make_resource(notes, "notes://handbook", description="The refund handbook.")
    make_resource(notes, "notes://drafts", state="quarantined")  # changed since its pin: not offered
    agent = make_agent(builder.org, name="Refunds", grants=[{"tool": "orders.refund_order", "policy": "approve"}])

    sign_in(page, live_url, builder.user.email)
    page.goto(f"{live_url}/agents/{agent.id}/edit/")
    context = page.get_by_test_id("context-resources")
    expect(context).to_contain_text("The refund handbook.")
    expect(context).not_to_contain_text("notes://drafts")
    assert serious_violations(page) == []

    context.get_by_label("notes://handbook").check()
    page.get_by_role("button", name="Save agent").click()

    expect(page.get_by_role("heading", name="Refunds")).to_be_visible()
    given = page.get_by_test_id("agent-context-resources")
    expect(given).to_contain_text("notes://handbook")
    expect(given).to_contain_text("taints the run")
    expect(page.get_by_test_id("history")).to_contain_text("changed context_resources")
    assert serious_violations(page) == []
    assert list(ContextResource.objects.filter(agent=agent).values_list("resource_id", flat=True)) == [handbook.id]
