"""In a real browser with a real worker: try an agent from its page, re-run that run, compare the two, and fork
it with an edited prompt. Screenshots go to var/test/<run id>/artifacts/."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Page, expect

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.registry import services as registry_services
from apps.registry.pool import pool
from apps.runs.models import Run
from tests.browser.test_accessibility import serious_violations
from tests.browser.test_foundation import sign_in
from tests.runs.conftest import ROOT
from tests.runs.test_browser_history import in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOOK = {"tool": "orders.get_order_status", "args": {"order_id": "A-1001"}}


def a_looker(owner, data: Path):
    actor = member_actor(owner)
    server = registry_services.create_server(
        actor=actor, name="orders", transport="stdio", trust_tier="internal", command=sys.executable,
        args=["-m", "apps.demo.order_desk", "stdio"], cwd=str(ROOT), env={"ORDER_DESK_DATA": str(data)}, sync=False)
    try:
        registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    finally:
        pool.close_all()
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    script = [{"call": [LOOK]}, {"say": "A-1001 is shipped.\nSTATUS: done\nREASON: ok"}]
    return agent_services.create_agent(actor=actor, name="Looker", connection_id=connection.id, script=script,
                                       grants=[{"tool": "orders.get_order_status", "policy": "auto"}])


def _succeeded(page: Page) -> None:
    header = page.locator("#run-header")
    for _ in range(30):
        if "succeeded" in header.inner_text().lower():
            return
        page.wait_for_timeout(500)
        page.reload()
    expect(header).to_contain_text("succeeded", ignore_case=True)


def test_a_builder_tries_an_agent_reruns_compares_and_forks(page: Page, live_url, worker, owner, tmp_path):
    agent = in_thread(a_looker, owner, tmp_path / "orders.json")
    artifacts = Path(settings.VAR_DIR) / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/agents/{agent.id}/")
    assert not (found := serious_violations(page)), "\n".join(found)  # WCAG 2.1 AA on each page of the flow (axe-core)

    page.get_by_role("button", name="Try it").click()
    expect(page.get_by_text("Required.")).to_be_visible()  # the error at the field, in view
    page.get_by_label("Message").fill("Where is order A-1001?")
    page.screenshot(path=str(artifacts / "try-agent.png"), full_page=True)
    page.get_by_role("button", name="Try it").click()
    expect(page.get_by_test_id("run-lineage")).to_contain_text("An agent tried on its own")
    _succeeded(page)
    expect(page.locator("#run-header")).to_contain_text("A-1001 is shipped.")
    assert not (found := serious_violations(page)), "\n".join(found)
    trial = in_thread(lambda: Run.objects.get(origin="trial"))

    page.get_by_role("button", name="Re-run").click()
    expect(page.get_by_test_id("run-lineage")).to_contain_text("Re-run of")
    _succeeded(page)
    page.get_by_role("link", name="Compare with the original").click()
    table = page.get_by_test_id("compare-table")
    expect(table).to_contain_text("Where is order A-1001?")
    expect(table.get_by_role("row", name="Outcome")).not_to_contain_text("differs")
    assert not (found := serious_violations(page)), "\n".join(found)
    page.screenshot(path=str(artifacts / "compare-runs.png"), full_page=True)

    page.goto(f"{live_url}/runs/{trial.id}/")
    page.get_by_role("link", name="Fork from a step").click()
    expect(page.get_by_label("Prompt of that step's task")).to_be_visible()
    assert not (found := serious_violations(page)), "\n".join(found)
    page.get_by_label("Prompt of that step's task").fill("Answer in one word: {message}")
    page.get_by_role("button", name="Start the fork").click()
    expect(page.get_by_test_id("run-lineage")).to_contain_text("Forked from")
    _succeeded(page)
    fork, trial = in_thread(lambda: (Run.objects.get(origin="fork"), Run.objects.get(id=trial.id)))
    assert fork.parent_id == trial.id and fork.snapshot["crew"]["tasks"][0]["description"].startswith("Answer in")
    assert trial.snapshot["crew"]["tasks"][0]["description"] == "{message}"  # the original untouched
