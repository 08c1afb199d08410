"""The gateway endpoint with the official MCP SDK client, in both protocol eras."""

from __future__ import annotations

import pytest
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from apps.audit.models import AuditEvent
from apps.gateway.models import GatewaySession
from apps.runs.models import Run, ToolCall
from tests.gateway.conftest import OFFERED, mcp_client, wait_until
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)
ERAS = ["auto", "legacy"]  # auto negotiates 2026-07-28 with the gateway; legacy does the initialize handshake


@pytest.mark.parametrize("mode", ERAS)
def test_list_shows_exactly_the_allowed_tools_and_reads_reach_both_servers(gateway_url, setup, mode):
    key = setup.create_key()["value"]

    async def scenario():
        async with mcp_client(gateway_url, key, mode=mode) as client:
            era = client.protocol_version
            tools = {t.name: t for t in (await client.list_tools()).tools}
            order = await client.call_tool("orders.get_order_status", {"order_id": "A-1001"})
            now = await client.call_tool("time.get_current_time", {"timezone": "Europe/Paris"})
            return era, tools, order, now

    era, tools, order, now = run_async(scenario())
    assert (era in MODERN_PROTOCOL_VERSIONS) == (mode == "auto")
    assert set(tools) == OFFERED
    assert tools["orders.get_order_status"].annotations.read_only_hint is True
    assert tools["orders.refund_order"].annotations.read_only_hint is False
    assert tools["orders.refund_order"].input_schema["required"] == ["order_id", "amount_cents", "request_id"]
    assert not order.is_error and order.structured_content["status"] == "shipped"
    assert not now.is_error and now.structured_content["timezone"] == "Europe/Paris"
    session = wait_until(lambda: GatewaySession.objects.filter(key__name="Claude Desktop").first())
    run = Run.objects.get(id=session.run_id)
    assert run.crew_name == "Gateway · Claude Desktop" and run.status == "running" and run.cost_usd == 0
    rows = wait_until(lambda: list(ToolCall.objects.filter(run=run).order_by("created_at"))
                      if ToolCall.objects.filter(run=run).count() == 2 else None)
    assert [(r.qualified_name, r.state) for r in rows] == [("orders.get_order_status", "succeeded"),
                                                          ("time.get_current_time", "succeeded")]
    assert all(r.dispatched_at and r.finished_at for r in rows)
    assert AuditEvent.objects.filter(org=setup.org, action="gateway.tool_call").count() == 2
    listed = setup.admin_api.get("/api/v1/runs").json()["items"]
    assert [(r["id"], r["status"], float(r["cost_usd"])) for r in listed] == [(str(run.id), "running", 0.0)]
    events = [e["type"] for e in setup.admin_api.get(f"/api/v1/runs/{run.id}/events").json()]
    assert events[0] == "run.started" and events.count("tool.completed") == 2
