"""Calls through the gateway meet the policy point and the inbox: denied tools, schema errors,
held writes approved through the API while the client waits, the retry after a timed-out wait,
and rate limits."""

from __future__ import annotations

import json
import re
import threading

import pytest
from django.db import connection
from django.test import Client as DjangoClient
from mcp import MCPError
from mcp.types import ToolListChangedNotification

from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.approvals.models import ApprovalRequest
from apps.gateway.models import GatewaySession
from apps.gateway.server import RATE_LIMITED
from apps.registry import services as registry_services
from apps.registry.models import Tool
from apps.runs.models import ToolCall
from tests.gateway.conftest import GRANTS, mcp_client, wait_for_ledgers, wait_until
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)
REFUND = {"order_id": "A-1003", "amount_cents": 700, "request_id": "refund-A-1003"}


def refunds(setup) -> dict:
    return json.loads(setup.data.read_text()).get("refunds", {}) if setup.data.exists() else {}


def approve_when_pending(setup, decisions: list, decision: str = "approve"):
    """In the background, like a person in the inbox: waits for the pending request and decides it."""
    def person():
        try:
            pending = wait_until(lambda: setup.approver_api.get("/api/v1/approvals?status=pending").json()["items"])
            response = setup.approver_api.post(f"/api/v1/approvals/{pending[0]['id']}/decision",
                                               {"decision": decision}, content_type="application/json")
            decisions.append((pending[0], response.status_code))
        finally:
            connection.close()

    thread = threading.Thread(target=person)
    thread.start()
    return thread


def test_denied_unknown_and_invalid_calls_are_refused_with_the_reason(gateway_url, setup):
    key = setup.create_key()["value"]

    async def scenario():
        async with mcp_client(gateway_url, key) as client:
            return [await client.call_tool("orders.delete_customer", {"customer_id": "C-100"}),
                    await client.call_tool("orders.cancel_everything", {}),
                    await client.call_tool("orders.get_order_status", {"order": 12})]

    denied, unknown, invalid = run_async(scenario())
    assert denied.is_error and "grant for orders.delete_customer is deny" in denied.content[0].text
    assert unknown.is_error and "not on this agent's allowlist" in unknown.content[0].text
    assert invalid.is_error and "input schema" in invalid.content[0].text
    assert "deleted_customers" not in (json.loads(setup.data.read_text()) if setup.data.exists() else {}) or \
        json.loads(setup.data.read_text())["deleted_customers"] == []
    rows = wait_until(lambda: list(ToolCall.objects.filter(org_id=setup.org.id)) if
                      ToolCall.objects.filter(org_id=setup.org.id).count() == 3 else None)
    assert {(r.qualified_name, r.state, r.rule) for r in rows} == {
        ("orders.delete_customer", "denied", "grant_deny"), ("orders.cancel_everything", "denied", "not_granted"),
        ("orders.get_order_status", "denied", "invalid_arguments")}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_held_write_is_approved_through_the_api_while_the_client_waits(gateway_url, setup, mode):
    key = setup.create_key(hold_wait_s=120)["value"]
    progress, decisions = [], []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    async def scenario():
        async with mcp_client(gateway_url, key, mode=mode, timeout=150) as client:
            return await client.call_tool("orders.refund_order", REFUND, progress_callback=on_progress)

    person = approve_when_pending(setup, decisions)
    result = run_async(scenario())
    person.join(30)
    assert decisions and decisions[0][1] == 200 and decisions[0][0]["tool"] == "orders.refund_order"
    assert not result.is_error, result.content
    assert result.structured_content["refunded_cents"] == 700 and result.structured_content["repeated"] is False
    assert list(refunds(setup)) == ["refund-A-1003"]
    assert progress and "inbox" in progress[0][2]
    row = ToolCall.objects.get(qualified_name="orders.refund_order")
    assert row.state == "succeeded" and row.approval.status == "approved"
    assert GatewaySession.objects.get(run_id=row.run_id).key.name == "Claude Desktop"


def test_a_timed_out_hold_says_pending_and_the_same_call_after_approval_runs_once(gateway_url, setup, approver):
    key = setup.create_key(hold_wait_s=1)["value"]
    person = DjangoClient()
    person.force_login(approver.user)

    async def call():
        async with mcp_client(gateway_url, key) as client:
            return await client.call_tool("orders.refund_order", REFUND)

    first = run_async(call())
    assert first.is_error and first.content[0].text.startswith("PENDING APPROVAL")
    approval = ApprovalRequest.objects.get(status="pending")
    assert f"/inbox/#approval-{approval.id}" in first.content[0].text
    # the link lands on the item: its card carries the anchor (and again once decided, in "Recently decided")
    assert re.search(rf'<div class="card mb-3 inbox-item" id="approval-{approval.id}"', person.get("/inbox/").text)
    again = run_async(call())  # the same call before anyone decided: still the one request, not a second
    assert again.is_error and ApprovalRequest.objects.count() == 1
    assert refunds(setup) == {}
    decided = setup.approver_api.post(f"/api/v1/approvals/{approval.id}/decision", {"decision": "approve"},
                                      content_type="application/json")
    assert decided.status_code == 200
    assert re.search(rf'<li [^>]*id="approval-{approval.id}"[^>]*>', person.get("/inbox/").text)
    retried = run_async(call())
    assert not retried.is_error and retried.structured_content["repeated"] is False
    assert list(refunds(setup)) == ["refund-A-1003"]
    fresh = run_async(call())  # after it ran, the same arguments are a new call: held again, not sent
    assert fresh.is_error and "PENDING APPROVAL" in fresh.content[0].text
    assert ApprovalRequest.objects.filter(status="pending").count() == 1
    assert ToolCall.objects.filter(qualified_name="orders.refund_order", state="succeeded").count() == 1


def test_a_rejected_hold_is_refused(gateway_url, setup):
    key = setup.create_key()["value"]
    decisions = []

    async def scenario():
        async with mcp_client(gateway_url, key, timeout=90) as client:
            return await client.call_tool("orders.refund_order", REFUND)

    person = approve_when_pending(setup, decisions, decision="reject")
    result = run_async(scenario())
    person.join(30)
    assert result.is_error and "rejected" in result.content[0].text
    assert refunds(setup) == {}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_call_over_the_keys_rate_gets_http_429_with_retry_after_and_a_json_rpc_error(gateway_url, setup, mode):
    key = setup.create_key(rate_limit_per_minute=2)["value"]
    answers = []

    async def note(response):
        if response.request.method == "POST" and b"tools/call" in response.request.content:
            answers.append((response.status_code, response.headers.get("retry-after")))

    async def scenario():
        async with mcp_client(gateway_url, key, mode=mode, event_hooks={"response": [note]}) as client:
            results = [await client.call_tool("orders.get_order_status", {"order_id": "A-1001"}) for _ in range(2)]
            with pytest.raises(MCPError) as refused:
                await client.call_tool("orders.get_order_status", {"order_id": "A-1001"})
            return results, refused.value

    results, refused = run_async(scenario())
    assert [r.is_error for r in results] == [False, False]
    assert refused.code == RATE_LIMITED and "allows 2 calls per minute" in refused.message
    assert refused.data["limit_per_minute"] == 2 and 1 <= refused.data["retry_after_s"] <= 120
    assert answers[:2] == [(200, None), (200, None)]
    assert answers[2] == (429, str(refused.data["retry_after_s"]))
    wait_for_ledgers(gateway_url)
    assert ToolCall.objects.filter(run__gateway_session__key__prefix=key[:10]).count() == 2  # a refusal is no call


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_connected_clients_hear_when_the_agents_tools_change(gateway_url, setup, mode):
    key = setup.create_key()["value"]
    heard = []

    async def on_message(message):
        if isinstance(message, ToolListChangedNotification):
            heard.append(message)

    async def scenario():
        import anyio

        async with mcp_client(gateway_url, key, mode=mode, message_handler=on_message) as client:
            before = {t.name for t in (await client.list_tools()).tools}
            if mode == "auto":
                async with client.listen(tools_list_changed=True) as subscription:
                    await anyio.to_thread.run_sync(revoke_a_grant)
                    with anyio.fail_after(30):
                        async for event in subscription:
                            heard.append(event)
                            break
            else:
                await anyio.to_thread.run_sync(revoke_a_grant)
                with anyio.fail_after(30):
                    while not heard:
                        await anyio.sleep(0.1)
            after = {t.name for t in (await client.list_tools(cache_mode="refresh")).tools}
            return before, after

    def revoke_a_grant():
        grants = [g for g in GRANTS if g["tool"] != "orders.list_orders"]
        try:
            agent_services.update_agent(actor=setup.actor, agent_id=setup.agent.id, grants=grants)
        finally:
            connection.close()

    before, after = run_async(scenario())
    assert heard
    assert "orders.list_orders" in before and before - after == {"orders.list_orders"}


@pytest.mark.parametrize("source", ["time.get_current_time", "orders.get_order_status"])
def test_after_reading_untrusted_content_a_sessions_auto_write_waits_for_a_person(gateway_url, setup, source):
    """A third-party tool's result, or an internal tool's that an admin marked outside content, taints the
    gateway session as it taints a run: a write the grant runs by itself now waits (issue 27)."""
    if source == "orders.get_order_status":
        tool = Tool.objects.get(org_id=setup.org.id, qualified_name=source)
        registry_services.set_output_trust(actor=setup.actor, tool_id=tool.id, trust="outside", review=inbox)
    grants = [{"tool": "orders.get_order_status", "policy": "auto"}, {"tool": "orders.refund_order", "policy": "auto"},
              {"tool": "time.get_current_time", "policy": "auto"}]
    agent = agent_services.create_agent(actor=setup.actor, name="Desk, auto refunds", script=[], grants=grants,
                                        connection_id=setup.agent.connection_id)
    key = setup.create_key(agent=agent, hold_wait_s=1)["value"]
    read_args = {"timezone": "UTC"} if source.startswith("time.") else {"order_id": "A-1001"}

    async def clean():
        async with mcp_client(gateway_url, key) as client:
            return await client.call_tool("orders.refund_order", REFUND)

    async def after_reading():
        async with mcp_client(gateway_url, key) as client:
            read = await client.call_tool(source, read_args)
            return read, await client.call_tool("orders.refund_order", {**REFUND, "request_id": "refund-2"})

    assert not run_async(clean()).is_error  # a session that read nothing untrusted: the grant decides
    read, write = run_async(after_reading())
    assert not read.is_error, read.content
    assert write.is_error and write.content[0].text.startswith("PENDING APPROVAL"), write.content[0].text
    assert list(refunds(setup)) == ["refund-A-1003"]
    held = wait_until(lambda: ToolCall.objects.filter(qualified_name="orders.refund_order", state="held").first())
    assert held.rule == "tainted" and source in held.reason, held.reason
