"""In a real browser: a person keeps a run's page open while the run goes through a held call, their
approval and its finish, and every panel follows the run without a reload (header counters, step tree,
Live events, Timeline, Spend per agent, the Cancel button, the final answer), on the embedded channel
layer (no Redis: live updates through the database) and on Redis. A reload then shows the same."""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

import pytest
from channels.layers import channel_layers
from django.conf import settings
from django.test import override_settings
from django.utils import timezone
from playwright.sync_api import Page, expect

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.approvals.models import ApprovalRequest
from apps.costs import services as costs
from apps.registry import services as registry_services
from apps.registry.pool import pool
from apps.runs import services, worker
from apps.runs.models import Run
from tests.browser.test_foundation import sign_in
from tests.processes import web_server
from tests.reliability.conftest import wait_until
from tests.runs.conftest import ROOT, Desk
from tests.runs.test_browser_history import in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

EMBEDDED = {"default": {"BACKEND": "apps.core.channel_layer.DatabaseChannelLayer", "CONFIG": {"poll_interval": 0.1}}}
CANCEL = re.compile(r"^\W*Cancel$")  # the button's name has its icon's glyph first
MODES = ["embedded", "redis"] if settings.REDIS_URL else ["embedded"]


@contextmanager
def layer(mode: str):
    """This process publishes on the same layer as the web process the browser talks to."""
    if mode == "redis":
        yield
        return
    with override_settings(CHANNEL_LAYERS=EMBEDDED):
        channel_layers.backends.clear()
        try:
            yield
        finally:
            channel_layers.backends.clear()
    channel_layers.backends.clear()


@pytest.fixture(scope="module")
def embedded_url(django_db_setup, process_logs):
    """A web process with no Redis (REDIS_URL empty): the embedded channel layer, on the test database."""
    with web_server(process_logs, REDIS_URL="") as url:
        yield url


@pytest.fixture(params=MODES)
def mode_url(request):
    return request.param, request.getfixturevalue("embedded_url" if request.param == "embedded" else "live_url")


def refund_run(owner, data):
    actor = member_actor(owner)
    server = registry_services.create_server(
        actor=actor, name="orders", transport="stdio", trust_tier="internal", command=sys.executable,
        args=["-m", "apps.demo.order_desk", "stdio"], cwd=str(ROOT), env={"ORDER_DESK_DATA": str(data)}, sync=False)
    registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    costs.set_model_price(actor=actor, model="scripted", provider="scripted", input_per_mtok=Decimal(100),
                          output_per_mtok=Decimal(100), effective_from=timezone.now() - timedelta(days=1))
    desk = Desk(actor, data, connection)
    crew = desk.refund_desk()
    return services.start_run(actor=actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 500},
                              enqueue=False)


def drive(run_id):
    try:
        return worker.drive_run(run_id=run_id)
    finally:
        pool.close_all()


def assert_finished_page(page: Page, run: Run) -> None:
    header, tree = page.locator("#run-header"), page.get_by_test_id("run-tree")
    expect(header).to_contain_text(re.compile(r"Status\s*succeeded", re.I))
    expect(header).to_contain_text(f"{run.tokens_in} / {run.tokens_out}")
    expect(header).to_contain_text(f"${run.cost_usd:.4f}")
    expect(page.get_by_role("button", name=CANCEL)).to_have_count(0)
    expect(page.get_by_test_id("rerun")).to_be_visible()  # the actions follow the run: a finished run is re-run
    expect(page.get_by_test_id("fork")).to_be_visible()
    expect(tree.locator("[data-testid=tool-call][data-state=succeeded]")).to_have_count(3)
    expect(header).to_contain_text("Refunded.")  # the final answer, once: in the header (the tree does not repeat it)
    expect(page.get_by_test_id("live-events").locator(f'li[data-seq="{run.last_seq}"]')).to_have_count(1)
    spend = page.get_by_test_id("agent-spend")
    expect(spend).to_contain_text("Refund desk refunds")
    expect(spend.locator("tbody tr", has_text="Refund desk refunds").locator("td").nth(1)).to_have_text("3")
    expect(page.get_by_test_id("waterfall")).to_contain_text("orders.refund_order")
    # not re-sent by the socket (it moves when someone edits the crew), and still on the page after every live update
    expect(page.get_by_test_id("config-same")).to_be_visible()


def test_every_panel_of_the_run_page_follows_the_run_live(page: Page, mode_url, owner, admin, tmp_path):
    mode, url = mode_url
    with layer(mode):
        run = in_thread(refund_run, owner, tmp_path / "orders.json")
        sign_in(page, url, admin.user.email)  # may cancel and decide; not the starter
        page.goto(f"{url}/runs/{run.id}/")
        live = page.get_by_test_id("run-live")
        expect(live).to_have_attribute("data-live-state", "open", timeout=20_000)
        expect(page.get_by_role("button", name=CANCEL)).to_be_visible()
        expect(page.get_by_test_id("rerun")).to_have_count(0)
        expect(page.locator("#run-history")).to_contain_text("No steps yet")

        held = in_thread(drive, run.id)  # the worker's part, up to the held refund
        assert held.status == "waiting"
        header, tree = page.locator("#run-header"), page.get_by_test_id("run-tree")
        expect(header).to_contain_text(re.compile(r"Status\s*waiting", re.I), timeout=15_000)
        expect(header).to_contain_text(f"{held.tokens_in} / {held.tokens_out}")
        expect(tree.locator("[data-testid=tool-call][data-state=held]")).to_have_count(1)
        expect(page.get_by_test_id("waterfall")).to_contain_text("orders.get_order_status")
        expect(page.get_by_test_id("agent-spend")).to_contain_text("Refund desk triage")
        expect(page.get_by_test_id("live-events").locator(f'li[data-seq="{held.last_seq}"]')).to_contain_text(
            "run.waiting")
        expect(page.get_by_role("button", name=CANCEL)).to_be_visible()

        page.get_by_test_id("inline-decision").get_by_role("button", name="Approve").click()
        wait_until(lambda: ApprovalRequest.objects.get(run_id=run.id).status == "approved", 15, "the decision")
        in_thread(drive, run.id)  # the worker's part (or a session worker's, which took the resume first)
        finished = wait_until(lambda: (r := Run.objects.get(id=run.id)).is_finished and r, 60, "the run to finish")
        assert finished.status == "succeeded", finished.error
        assert_finished_page(page, finished)  # live, no reload
        page.reload()
        assert_finished_page(page, finished)
