"""Who may call: a revoked or missing key is refused (401), another organisation's key sees
nothing of this one; and a downstream server killed mid-session fails only its own calls."""

from __future__ import annotations

import sys

import httpx2
import pytest

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.runs.models import Run, ToolCall
from tests.gateway.conftest import ROOT, SERVERS, Setup, mcp_client, register_and_pin, wait_until
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}


def post(url: str, key: str | None) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx2.post(url, json=INITIALIZE, headers=headers, timeout=30)


def test_a_missing_wrong_or_revoked_key_gets_401(gateway_url, setup):
    created = setup.create_key()
    assert post(gateway_url, created["value"]).status_code == 200
    assert post(gateway_url, None).status_code == 401
    assert post(gateway_url, created["value"][:-2] + "xx").status_code == 401
    revoked = setup.admin_api.delete(f"/api/v1/gateway-keys/{created['key']['id']}")
    assert revoked.status_code == 204
    # keys are re-checked at least every second: the revoked key stops within that
    assert wait_until(lambda: post(gateway_url, created["value"]).status_code == 401, timeout=10)

    statuses = []

    async def note(response):
        statuses.append(response.status_code)

    async def connect():
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {created['value']}"},
                                  event_hooks={"response": [note]})
        async with Client(streamable_http_client(gateway_url, http_client=http)) as client:
            await client.list_tools()

    with pytest.raises(BaseException):  # the SDK client cannot connect (it reports 401 as a generic error)
        run_async(connect())
    assert statuses and set(statuses) == {401}


def test_another_organisations_key_sees_nothing_of_this_one(gateway_url, setup, outsider):
    owner_key = setup.create_key()["value"]
    other = member_actor(outsider)
    connection = agent_services.create_connection(actor=other, name="Scripted", provider="scripted")
    agent = agent_services.create_agent(actor=other, name="Outsider", connection_id=connection.id, script=[],
                                        grants=[])
    from django.test import Client

    from tests.factories import token_for

    other_setup = Setup(outsider.org, other, agent, setup.data,
                        Client(headers={"Authorization": f"Bearer {token_for(outsider.org, 'admin')}"}), None)
    other_key = other_setup.create_key(name="Globex host")["value"]
    # the other org cannot even name this org's agent for its key
    foreign = other_setup.admin_api.post("/api/v1/gateway-keys", {"name": "x", "agent_id": str(setup.agent.id)},
                                         content_type="application/json")
    assert foreign.status_code == 404

    async def scenario():
        async with mcp_client(gateway_url, other_key) as client:
            tools = (await client.list_tools()).tools
            resources = (await client.list_resources()).resources
            call = await client.call_tool("orders.get_order_status", {"order_id": "A-1001"})
        async with mcp_client(gateway_url, owner_key) as client:
            mine = (await client.list_tools()).tools
        return tools, resources, call, mine

    tools, resources, call, mine = run_async(scenario())
    assert tools == [] and resources == []
    assert call.is_error and "not on this agent's allowlist" in call.content[0].text
    assert len(mine) == 4
    wait_until(lambda: ToolCall.objects.filter(org_id=outsider.org.id).exists())
    assert not ToolCall.objects.filter(org_id=setup.org.id).exists()
    assert not Run.objects.filter(org_id=setup.org.id).exists()


def test_a_downstream_server_killed_mid_session_fails_only_its_own_calls(gateway_url, setup):
    register_and_pin(setup.actor, name="mortal", transport="stdio", trust_tier="internal", command=sys.executable,
                     args=[str(SERVERS / "mortal.py")], cwd=str(ROOT))
    agent_services.update_agent(actor=setup.actor, agent_id=setup.agent.id, grants=[
        {"tool": "orders.get_order_status", "policy": "auto"}, {"tool": "time.get_current_time", "policy": "auto"},
        {"tool": "mortal.ping", "policy": "auto"}, {"tool": "mortal.die", "policy": "auto"}])
    key = setup.create_key()["value"]

    async def scenario():
        async with mcp_client(gateway_url, key, mode="legacy") as client:
            pong = await client.call_tool("mortal.ping", {})
            died = await client.call_tool("mortal.die", {})
            order = await client.call_tool("orders.get_order_status", {"order_id": "A-1002"})
            now = await client.call_tool("time.get_current_time", {"timezone": "UTC"})
            again = await client.call_tool("mortal.ping", {})
            return pong, died, order, now, again

    pong, died, order, now, again = run_async(scenario())
    assert not pong.is_error and pong.content[0].text.startswith("pong from")
    assert died.is_error and "closed the connection" in died.content[0].text
    assert not order.is_error and order.structured_content["status"] == "processing"
    assert not now.is_error
    assert not again.is_error and again.content[0].text != pong.content[0].text  # a new server process
    row = wait_until(lambda: ToolCall.objects.filter(qualified_name="mortal.die").first())
    assert row.state == "failed" and row.error_class == "transient"


def test_a_foreign_host_or_origin_gets_421_and_an_oversized_body_413(gateway_url, setup):
    key = setup.create_key()["value"]
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "Authorization": f"Bearer {key}"}
    rebound = httpx2.post(gateway_url, json=INITIALIZE, headers={**headers, "Host": "evil.example"}, timeout=30)
    assert rebound.status_code == 421
    cross = httpx2.post(gateway_url, json=INITIALIZE, headers={**headers, "Origin": "https://evil.example"},
                        timeout=30)
    assert cross.status_code in (403, 421)
    huge = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "orders.get_order_status", "arguments": {"order_id": "x" * (2 * 1024 * 1024)}}}
    for version in ("2026-07-28", None):
        extra = {"MCP-Protocol-Version": version} if version else {}
        too_big = httpx2.post(gateway_url, json=huge, headers={**headers, **extra}, timeout=30)
        assert too_big.status_code == 413, (version, too_big.status_code)


def test_resources_and_prompts_of_allowed_servers_are_served(gateway_url, setup):
    from tests.gateway.conftest import TEST_MCP

    node_bin = TEST_MCP / "node" / "node_modules" / ".bin"
    register_and_pin(setup.actor, name="everything", transport="stdio", trust_tier="official", command="node",
                     args=[str(node_bin / "mcp-server-everything"), "stdio"])
    agent_services.update_agent(actor=setup.actor, agent_id=setup.agent.id, grants=[
        {"tool": "everything.echo", "policy": "auto"}])
    key = setup.create_key()["value"]

    async def scenario():
        async with mcp_client(gateway_url, key, mode="legacy") as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            resources = (await client.list_resources()).resources
            read = await client.read_resource(str(resources[0].uri))
            prompts = (await client.list_prompts()).prompts
            simple = next(p for p in prompts if p.name == "everything.simple-prompt")
            prompt = await client.get_prompt(simple.name)
            echo = await client.call_tool("everything.echo", {"message": "hello gateway"})
            return tools, resources, read, prompts, prompt, echo

    tools, resources, read, prompts, prompt, echo = run_async(scenario())
    assert tools == ["everything.echo"]
    assert resources and read.contents
    assert all(p.name.startswith("everything.") for p in prompts) and prompt.messages
    assert not echo.is_error and "hello gateway" in echo.content[0].text


def test_a_resource_is_offered_only_while_it_is_active_and_pinned(gateway_url, setup):
    """A listed resource an agent would not be given (quarantined: changed, poisoned, by an admin) is neither
    listed nor read through the gateway; re-activated, it is both again."""
    from apps.registry import resources as registry_resources
    from apps.registry.models import Resource
    from tests.gateway.conftest import TEST_MCP

    node_bin = TEST_MCP / "node" / "node_modules" / ".bin"
    server = register_and_pin(setup.actor, name="everything", transport="stdio", trust_tier="official",
                              command="node", args=[str(node_bin / "mcp-server-everything"), "stdio"])
    agent_services.update_agent(actor=setup.actor, agent_id=setup.agent.id, grants=[
        {"tool": "everything.echo", "policy": "auto"}])
    key = setup.create_key()["value"]
    chosen = Resource.objects.filter(server=server, state="active").first()

    async def listed_and_read():
        async with mcp_client(gateway_url, key, mode="legacy") as client:
            uris = [str(r.uri) for r in (await client.list_resources()).resources]
            try:
                read = await client.read_resource(chosen.uri)
            except Exception as exc:  # the SDK raises the gateway's MCP error
                read = exc
            return uris, read

    uris, read = run_async(listed_and_read())
    assert chosen.uri in uris and read.contents

    registry_resources.set_resource_state(actor=setup.actor, resource_id=chosen.id, state="quarantined", review=inbox)
    uris, read = wait_until(lambda: (found := run_async(listed_and_read()))[0] and chosen.uri not in found[0]
                            and found)
    assert uris and "Resource not found" in str(read)

    registry_resources.pin_resource(actor=setup.actor, resource_id=chosen.id, review=inbox)  # lifts the quarantine
    uris, read = wait_until(lambda: (found := run_async(listed_and_read()))[0] and chosen.uri in found[0] and found)
    assert read.contents and str(read.contents[0].uri) == chosen.uri
