"""In a real browser: filter the run history to a crew, open a run, read its cost, then see spend
drawn on the costs page (Chart.js on a canvas). A screenshot goes to var/test/<run id>/artifacts/."""

from __future__ import annotations

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone
from playwright.sync_api import Page, expect

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.costs import services as costs
from apps.registry import services as registry_services
from apps.registry.pool import pool
from apps.runs import services, worker
from tests.browser.test_foundation import sign_in
from tests.runs.conftest import LOOK_UP, ROOT, Desk

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def in_thread(fn, *args):
    """Run setup on its own thread: Playwright keeps an event loop running in the test thread, and
    syncing the MCP server and driving the engine run their own loops."""
    def call():
        try:
            return fn(*args)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def two_crews_with_runs(owner, data: Path):
    """The order desk, a refund desk run (held) and an order lookup run, the scripted model priced."""
    actor = member_actor(owner)
    server = registry_services.create_server(
        actor=actor, name="orders", transport="stdio", trust_tier="internal", command=sys.executable,
        args=["-m", "apps.demo.order_desk", "stdio"], cwd=str(ROOT), env={"ORDER_DESK_DATA": str(data)}, sync=False)
    registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    desk = Desk(actor, data, connection)
    costs.set_model_price(actor=actor, model="scripted", provider="scripted", input_per_mtok=Decimal(100),
                          output_per_mtok=Decimal(100), effective_from=timezone.now() - timedelta(days=1))
    try:
        drive(desk, desk.refund_desk(), {"order_id": "A-1001", "amount_cents": 500})
        looker = desk.agent("Looker", [{"call": [LOOK_UP]}, {"say": "done"}],
                            [{"tool": "orders.get_order_status", "policy": "auto"}])
        crew = desk.sequential("Order lookups", [("look", looker, "Look at {order_id}.", [])])
        return crew, drive(desk, crew, {"order_id": "A-1002", "amount_cents": 1})
    finally:
        pool.close_all()


def drive(desk, crew, inputs):
    started = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=inputs, enqueue=False)
    return worker.drive_run(run_id=started.id)


def test_a_member_filters_runs_reads_a_cost_and_sees_the_spend_chart(page: Page, live_url, owner, tmp_path):
    crew, looked = in_thread(two_crews_with_runs, owner, tmp_path / "orders.json")
    assert looked.status == "succeeded" and looked.cost_usd > 0

    sign_in(page, live_url, owner.user.email)
    page.get_by_role("link", name="Runs").first.click()
    rows = page.get_by_test_id("runs").locator("tbody tr")
    expect(rows).to_have_count(2)
    page.get_by_label("Crew").select_option(label="Order lookups")
    expect(rows).to_have_count(1)
    expect(page).to_have_url(re.compile(rf"crew={crew.id}"))
    rows.first.get_by_role("link", name="Order lookups").click()

    expect(page.get_by_role("heading", name="Order lookups")).to_be_visible()
    expect(page.locator("#run-header")).to_contain_text(f"${looked.cost_usd:.4f}")
    expect(page.get_by_test_id("agent-spend")).to_contain_text("Looker")

    page.get_by_role("link", name="Costs").first.click()
    chart = page.get_by_test_id("spend-chart")
    expect(chart).to_have_attribute("data-drawn", re.compile(r"[1-9]"))
    drawn = page.evaluate("""() => {
        const canvas = document.getElementById("spend-chart");
        const data = Chart.getChart(canvas).data.datasets[0].data;
        const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        let painted = 0;
        for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) painted++;
        return {spend: data.reduce((a, b) => a + (b || 0), 0), painted};
    }""")
    assert drawn["spend"] > float(looked.cost_usd)  # both runs' spend, drawn as bars
    assert drawn["painted"] > 1000  # axes, labels and bars on the canvas, not a blank one
    expect(page.get_by_test_id("by-crew")).to_contain_text("Order lookups")
    artifacts = Path(settings.VAR_DIR) / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(artifacts / "costs-page.png"), full_page=True)
    assert (artifacts / "costs-page.png").stat().st_size > 10_000
