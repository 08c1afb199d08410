"""The bundled demo server, over stdio and Streamable HTTP: sync, risks, calls, idempotent refunds."""

from __future__ import annotations

import json

from apps.approvals.definition_changes import inbox
from apps.registry import pool, selectors, services
from tests.registry.conftest import order_desk_stdio, register

EXPECTED_RISKS = {"get_order_status": "read", "list_orders": "read", "refund_order": "write",
                  "delete_customer": "dangerous"}


def _risks(server):
    return {t.name: t.risk for t in selectors.tools_for_org(org_id=server.org_id, server=server.id)}


def test_stdio_sync_finds_the_four_tools_pinned_with_their_risks(actor, order_desk_data):
    server = order_desk_stdio(actor, order_desk_data)

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert report.status == "ok", report.error
    assert report.tools_added == 4
    assert report.protocol_version == "2026-07-28"
    assert _risks(server) == EXPECTED_RISKS
    tools = selectors.tools_for_org(org_id=actor.org_id, usable_only=True)
    assert sorted(t.qualified_name for t in tools) == sorted(f"orders.{n}" for n in EXPECTED_RISKS)
    assert all(t.risk_source == "annotations" and not t.findings for t in tools)
    server.refresh_from_db()
    assert server.server_info["name"] == "order-desk"
    assert "request_id" in server.instructions


def test_a_repeated_refund_request_refunds_once(actor, order_desk_data):
    server = order_desk_stdio(actor, order_desk_data)
    args = {"order_id": "A-1001", "amount_cents": 500, "request_id": "req-1"}

    first = pool.call_tool(server.id, "refund_order", args, timeout=10)
    second = pool.call_tool(server.id, "refund_order", args, timeout=10)

    assert not first.is_error and first.structured_content["repeated"] is False
    assert second.structured_content["repeated"] is True
    stored = json.loads(order_desk_data.read_text())
    assert stored["orders"]["A-1001"]["refunded_cents"] == 500
    assert list(stored["refunds"]) == ["req-1"]
    status = pool.call_tool(server.id, "get_order_status", {"order_id": "A-1001"}, timeout=10)
    assert status.structured_content["refunded_cents"] == 500
    missing = pool.call_tool(server.id, "get_order_status", {"order_id": "nope"}, timeout=10)
    assert missing.is_error and "No order with id nope" in missing.text


def test_http_sync_and_call(actor, order_desk_http):
    server = register(actor, name="orders-http", transport="http", url=order_desk_http)

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert report.status == "ok", report.error
    assert _risks(server) == EXPECTED_RISKS
    result = pool.call_tool(server.id, "list_orders", {"customer_id": "C-100"}, timeout=10)
    assert [o["order_id"] for o in result.structured_content["orders"]] == ["A-1001", "A-1002"]


def test_seed_demo_registers_and_syncs_the_order_desk_once(db, settings, tmp_path):
    from apps.demo.services import seed_demo
    from apps.registry.models import McpServer

    settings.VAR_DIR = tmp_path
    seed_demo()
    server = McpServer.objects.get(org__slug="demo", name="orders")
    assert server.status == "ok", server.last_error
    assert sorted(server.tools.values_list("risk", flat=True)) == ["dangerous", "read", "read", "write"]
    assert seed_demo().created is False
    assert McpServer.objects.filter(org__slug="demo").exclude(transport="builtin").count() == 1  # besides human
