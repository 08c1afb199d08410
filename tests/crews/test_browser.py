"""A builder in a real browser builds a crew, meets a validation error, fixes it, and reorders tasks."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.agents.factories import make_agent
from tests.browser.test_foundation import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_builder_creates_a_crew_and_fixes_a_validation_error(page: Page, live_url, builder):
    make_agent(builder.org, name="Triage")
    make_agent(builder.org, name="Refunds")
    sign_in(page, live_url, builder.user.email)
    page.get_by_role("link", name="Crews").first.click()
    page.get_by_role("link", name="New crew").first.click()

    page.get_by_label("Name", exact=True).fill("Refund desk")
    page.get_by_role("button", name="Add input").click()
    page.get_by_label("Input name").fill("order_id")
    task = page.locator(".task-row").nth(0)
    task.get_by_label("Task name").fill("refund")
    task.get_by_label("Agent").select_option(label="Refunds")
    task.get_by_label("Task description").fill("Refund order {order}")
    page.get_by_role("button", name="Add task").click()
    second = page.locator(".task-row").nth(1)
    second.get_by_label("Task name").fill("triage")
    second.get_by_label("Agent").select_option(label="Triage")
    second.get_by_label("Task description").fill("Look up {order_id}")
    page.get_by_role("button", name="Create crew").click()
    expect(page.get_by_test_id("form-errors")).to_be_visible()
    expect(page.locator(".task-row").nth(0)).to_contain_text("{order} is not a declared input (inputs: order_id)")

    page.locator(".task-row").nth(0).get_by_label("Task description").fill("Refund order {order_id}")
    page.locator(".task-row").nth(0).get_by_label("Receives outputs of").fill("triage")
    page.locator(".task-row").nth(1).get_by_role("button", name="Move up").click()
    expect(page.locator(".task-row").nth(0).get_by_label("Task name")).to_have_value("triage")
    page.get_by_role("button", name="Create crew").click()

    expect(page.get_by_role("heading", name="Refund desk")).to_be_visible()
    steps = page.locator(".list-group-numbered li")
    expect(steps.nth(0)).to_contain_text("triage")
    expect(steps.nth(1)).to_contain_text("receives: triage")
