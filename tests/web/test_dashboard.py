"""The dashboard home: each tile's number from real rows, its link, the first-run checklist, and the
tiles re-rendered live over the dashboard socket."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.approvals import services as approvals
from apps.approvals.models import ApprovalRequest
from apps.costs import services as costs
from apps.crews import services as crews
from apps.registry.models import McpServer
from apps.runs import services as runs
from apps.runs.models import Run
from tests.agents.factories import make_agent, make_server, make_tool, order_desk
from tests.conftest import signed_in
from tests.processes import run_async

pytestmark = pytest.mark.django_db


def text(html: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}"[^>]*>(.*?)</(?:div|a)>', html, re.S)
    assert match, f"no {testid} on the page"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1))).strip()


def build_org(org):
    """A working organisation: the order desk, one agent in one crew, runs in every state, approvals, spend."""
    owner = member_actor(org.memberships.get(role="owner"))
    tools = order_desk(org)
    broken = make_server(org, "broken")
    McpServer.objects.filter(id=broken.id).update(status="error", last_error="connection refused")
    make_tool(broken, "changed", state="quarantined")
    make_tool(tools["refund_order"].server, "sneaky", state="quarantined")
    agent = make_agent(org, name="Desk", grants=[{"tool": "orders.refund_order", "policy": "approve"}])
    crew = crews.create_crew(actor=owner, name="Refunds",
                             tasks=[{"name": "refund", "description": "Refund it", "agent_id": str(agent.id)}])
    now = timezone.now()
    made = {}
    for name, status, finished in [("running", "running", None), ("waiting", "waiting", None),
                                   ("queued", "queued", None), ("failed", "failed", now - timedelta(hours=2)),
                                   ("timed_out", "timed_out", now - timedelta(hours=23)),
                                   ("old_failure", "failed", now - timedelta(hours=30)),
                                   ("cancelled", "cancelled", now - timedelta(hours=1)),
                                   ("succeeded", "succeeded", now - timedelta(minutes=5))]:
        run = runs.start_run(actor=owner, crew_id=crew.id, inputs={}, enqueue=False)
        Run.objects.filter(id=run.id).update(status=status, finished_at=finished)
        made[name] = run
    for hours_ago, status in [(3, "pending"), (1, "pending"), (5, "approved")]:
        request = approvals.open_request(
            org_id=org.id, run_id=made["waiting"].id, tool_call_id=None, agent_id=agent.id,
            tool_id=tools["refund_order"].id, title="Refund A-1001", arguments={"order_id": "A-1001"},
            args_hash="0" * 64, definition_hash=tools["refund_order"].definition_hash, risk="write",
            reason="needs a person", rule="approve", context={}, expires_at=None, requested_by_user_id=None)
        ApprovalRequest.objects.filter(id=request.id).update(
            created_at=now - timedelta(hours=hours_ago), status=status,
            decided_by_id=owner.user_id if status == "approved" else None)
    costs.set_model_price(actor=owner, model="desk-model", input_per_mtok=Decimal("1000"),
                          output_per_mtok=Decimal("0"))  # $1 per thousand input tokens
    costs.record_usage(org_id=org.id, provider="openai", model="desk-model", input_tokens=3000, output_tokens=0,
                       run_id=made["succeeded"].id, crew_id=crew.id, agent_id=agent.id)
    costs.record_usage(org_id=org.id, provider="openai", model="desk-model", input_tokens=50000,
                       output_tokens=0, run_id=made["failed"].id, crew_id=crew.id, at=now - timedelta(days=40))
    costs.set_budget(actor=owner, scope="org", amount_usd="4")
    return made


def test_an_empty_org_sees_zeros_and_the_whole_checklist(client, owner):
    page = signed_in(client, owner).get("/").content.decode()
    assert text(page, "tile-approvals-count") == "0"
    assert text(page, "tile-approvals-oldest") == "Nothing waiting for a person"
    assert text(page, "tile-runs-count") == "0"
    assert text(page, "tile-failures-count") == "0"
    assert text(page, "tile-spend-amount") == "$0.00"
    assert text(page, "tile-spend-budget") == "No monthly budget set"
    assert text(page, "tile-servers-quarantined") == "No servers registered"
    assert text(page, "checklist-progress") == "0 of 5 done"
    assert page.count('data-done="false"') == 5
    for href in ('href="/servers/"', 'href="/agents/"', 'href="/crews/"', 'href="/runs/"', 'href="/inbox/"'):
        assert href in page


def test_each_tile_counts_this_orgs_rows_and_links_to_its_page(client, owner, outsider):
    build_org(outsider.org)  # another organisation's numbers never leak in
    build_org(owner.org)
    page = signed_in(client, owner).get("/").content.decode()

    assert text(page, "tile-approvals-count") == "2"
    assert text(page, "tile-approvals-oldest") == "Oldest waiting 3 h"
    assert text(page, "tile-runs-count") == "3"
    assert "1 running · 1 waiting for a person · 1 queued" in page
    assert text(page, "tile-failures-count") == "2"  # failed 2 h ago, timed out 23 h ago; not 30 h, not cancelled
    assert text(page, "tile-spend-amount") == "$3.00"  # this month only
    assert text(page, "tile-spend-budget") == "75 % of the $4.00 monthly budget"
    assert text(page, "tile-servers-errors") == "1 of 2 with errors"
    assert text(page, "tile-servers-quarantined") == "2 tools quarantined"

    since = (timezone.now() - timedelta(hours=24)).date().isoformat()
    assert re.search(r'href="/inbox/"[^>]*data-testid="tile-approvals"', page)
    assert re.search(r'href="/runs/"[^>]*data-testid="tile-runs"', page)
    assert f'href="/runs/?status=failed&amp;since={since}" data-testid="tile-failures"' in page
    assert re.search(r'href="/costs/"[^>]*data-testid="tile-spend"', page)
    assert 'href="/servers/?status=error" data-testid="tile-servers"' in page
    for path in ("/inbox/", "/runs/", f"/runs/?status=failed&since={since}", "/costs/", "/servers/?status=error"):
        assert client.get(path).status_code == 200

    # all five first steps are done: the checklist has gone
    assert 'data-testid="checklist"' not in page
    activity = page[page.index('data-testid="recent-activity"'):]
    assert 'href="/audit/"' in activity and activity.count("<code>") == 8  # the owner reads the audit log's latest


def test_the_checklist_ticks_off_what_exists(client, owner):
    order_desk(owner.org)
    make_agent(owner.org, name="Solo")
    page = signed_in(client, owner).get("/").content.decode()
    assert text(page, "checklist-progress") == "2 of 5 done"
    steps = re.findall(r'data-testid="checklist-step" data-done="(true|false)"', page)
    assert steps == ["true", "true", "false", "false", "false"]


def test_the_seeded_demo_org_shows_the_checklist_until_a_person_runs_and_decides(client, settings, tmp_path):
    """The seed registers, defines, builds and leaves a held run: the newcomer has still to start a run
    and decide a held call themselves."""
    from apps.accounts.models import Membership
    from apps.demo.services import seed_demo

    settings.VAR_DIR = tmp_path
    seed_demo()
    owner = Membership.objects.filter(org__slug="demo", role="owner").select_related("user").first()
    page = signed_in(client, owner).get("/").content.decode()
    assert 'data-testid="checklist"' in page
    assert text(page, "checklist-progress") == "3 of 5 done"
    steps = re.findall(r'data-testid="checklist-step" data-done="(true|false)"', page)
    assert steps == ["true", "true", "true", "false", "false"]


def test_a_viewer_sees_recent_runs_instead_of_the_audit_log(client, viewer):
    made = build_org(viewer.org)
    page = signed_in(client, viewer).get("/").content.decode()
    activity = page[page.index('data-testid="recent-activity"'):]
    assert f'href="/runs/{made["succeeded"].id}/"' in activity and "Refunds" in activity
    assert 'href="/audit/"' not in page


def test_htmx_gets_only_the_tiles(client, owner):
    response = signed_in(client, owner).get("/", HTTP_HX_REQUEST="true")
    body = response.content.decode().lstrip()
    assert body.startswith('<div id="dashboard-tiles"')
    assert "<html" not in body


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_socket_sends_the_tiles_and_re_renders_them_on_org_events(owner, outsider):
    from channels.testing.websocket import WebsocketCommunicator
    from django.conf import settings

    from config.asgi import application
    from tests.web.test_realtime import session_cookie

    async def _connect(path: str, cookie: str):
        headers = [(b"origin", b"http://testserver"), (b"host", b"testserver"),
                   (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode())]
        communicator = WebsocketCommunicator(application, path, headers=headers)
        return communicator, await communicator.connect(timeout=20)

    cookie = session_cookie(owner)
    tools = order_desk(owner.org)

    async def scenario():
        refused, _ = await _connect(f"/ws/dashboard/{owner.org_id}/", session_cookie(outsider))
        closing = await refused.receive_output(timeout=20)
        communicator, _ = await _connect(f"/ws/dashboard/{owner.org_id}/", cookie)
        first = await communicator.receive_from(timeout=20)
        import asyncio

        from channels.db import database_sync_to_async

        await database_sync_to_async(approvals.open_request)(
            org_id=owner.org_id, run_id=None, tool_call_id=None, agent_id=None, tool_id=tools["refund_order"].id,
            title="Refund", arguments={}, args_hash="0" * 64, definition_hash="x", risk="write", reason="r",
            rule="approve", context={}, expires_at=None, requested_by_user_id=None)
        frames = []
        deadline = asyncio.get_running_loop().time() + 20
        while asyncio.get_running_loop().time() < deadline:
            frame = await communicator.receive_from(timeout=20)
            frames.append(frame)
            if re.search(r'data-testid="tile-approvals-count">\s*1\s*<', frame):
                break
        await communicator.disconnect()
        from django.db import connections

        await database_sync_to_async(connections.close_all)()  # the consumers' thread: let teardown drop the DB
        return closing, first, frames

    closing, first, frames = run_async(scenario())
    assert closing == {"type": "websocket.close", "code": 4403}
    assert first.lstrip().startswith('<div id="dashboard-tiles"') and 'hx-swap-oob="true"' in first
    assert text(first, "tile-approvals-count") == "0"
    assert text(frames[-1], "tile-approvals-count") == "1"
    assert text(frames[-1], "tile-approvals-oldest").startswith("Oldest waiting")
