"""In a real browser with a real worker: from a finished run's trace, edit a tool call's arguments (a bad
edit is shown at the field), fork, and watch the fork replay up to that call and finish with the edit; the
original is untouched. A screenshot goes to var/test/<run id>/artifacts/."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Page, expect

from apps.accounts.actors import member_actor
from apps.runs import trial
from apps.runs.models import Run, ToolCall
from tests.browser.test_foundation import sign_in
from tests.runs.test_browser_history import in_thread
from tests.runs.test_browser_replay import _succeeded, a_looker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_builder_edits_a_tool_calls_arguments_and_forks_from_that_model_call(page: Page, live_url, worker, owner,
                                                                                tmp_path):
    agent = in_thread(a_looker, owner, tmp_path / "orders.json")
    parent = in_thread(lambda: trial.start_trial(actor=member_actor(owner), agent_id=agent.id,
                                                 message="Where is order A-1001?"))
    artifacts = Path(settings.VAR_DIR) / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    sign_in(page, live_url, owner.user.email)
    page.goto(f"{live_url}/runs/{parent.id}/")
    _succeeded(page)

    page.get_by_role("link", name="Edit arguments and fork").first.click()
    field = page.get_by_label("Arguments of orders.get_order_status (JSON)")
    expect(field).to_have_value('{\n  "order_id": "A-1001"\n}')
    field.fill('{"order_id": 1002}')
    page.get_by_role("button", name="Start the fork").click()
    expect(page.get_by_test_id("error-arguments.order_id")).to_contain_text("is not of type 'string'")
    page.get_by_label("Arguments of orders.get_order_status (JSON)").fill('{"order_id": "A-1002"}')
    page.screenshot(path=str(artifacts / "fork-call.png"), full_page=True)
    page.get_by_role("button", name="Start the fork").click()
    expect(page.get_by_test_id("run-lineage")).to_contain_text("Forked from")
    _succeeded(page)
    fork = in_thread(lambda: Run.objects.get(origin="fork", parent_id=parent.id))
    calls = in_thread(lambda: list(ToolCall.objects.filter(run=fork).values_list("arguments", flat=True)))
    assert calls == [{"order_id": "A-1002"}]
    original = in_thread(lambda: list(ToolCall.objects.filter(run_id=parent.id).values_list("arguments", flat=True)))
    assert original == [{"order_id": "A-1001"}]
