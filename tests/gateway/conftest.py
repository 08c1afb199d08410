"""Gateway tests: a real gateway process (`gateway_url`), the bundled order desk and the
third-party mcp-server-time behind it, an agent whose grants are the key's rules, and MCP
clients (the official SDK in both protocol eras, the MCP Inspector CLI)."""

from __future__ import annotations

import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import pytest
from django.db import connection
from django.test import Client as DjangoClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.registry import resources
from apps.registry import services as registry_services
from apps.registry.models import Resource, Tool
from apps.registry.pool import pool
from tests.factories import token_for

ROOT = Path(__file__).resolve().parents[2]
TEST_MCP = ROOT / "var" / "test-mcp"
TIME_SERVER = TEST_MCP / "venv" / "bin" / "mcp-server-time"
INSPECTOR = TEST_MCP / "node" / "node_modules" / ".bin" / "mcp-inspector"
SERVERS = Path(__file__).resolve().parent / "servers"

GRANTS = [
    {"tool": "orders.get_order_status", "policy": "auto"},
    {"tool": "orders.list_orders", "policy": "auto"},
    {"tool": "orders.refund_order", "policy": "approve"},
    {"tool": "orders.delete_customer", "policy": "deny"},
    {"tool": "time.get_current_time", "policy": "auto"},
]
OFFERED = {"orders.get_order_status", "orders.list_orders", "orders.refund_order", "time.get_current_time"}


@pytest.fixture(scope="session")
def other_gateway_url(django_db_setup, process_logs):
    """A second gateway process on the same database, Redis and channel layer. It re-reads views
    only when a change notice tells it to (its safety-net re-read is an hour away), so whatever
    its clients hear came from another process's change."""
    from tests.processes import gateway_server

    with gateway_server(process_logs, AIRLOCK_GATEWAY_POLL_S="0.3", AIRLOCK_GATEWAY_VIEW_REFRESH_S="3600") as (url, _):
        yield url


@pytest.fixture(scope="module")
def oauth_gateway(live_url, process_logs):
    """A gateway that names the live web app as its authorization server: (gateway URL, its log)."""
    from tests.processes import free_port, gateway_server

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with gateway_server(process_logs, port=port, AIRLOCK_GATEWAY_POLL_S="0.3", AIRLOCK_BASE_URL=live_url,
                        AIRLOCK_GATEWAY_URL=url) as (url, _):
        yield url, process_logs / f"gateway-{port}.log"
    wait_for_ledgers(url)


@dataclass
class Setup:
    org: object
    actor: object
    agent: object
    data: Path
    admin_api: DjangoClient
    approver_api: DjangoClient

    def create_key(self, name: str = "Claude Desktop", agent=None, **extra) -> dict:
        body = {"name": name, "agent_id": str((agent or self.agent).id), **extra}
        response = self.admin_api.post("/api/v1/gateway-keys", body, content_type="application/json")
        assert response.status_code == 201, response.content
        return response.json()


def register_and_pin(actor, *, read: tuple[str, ...] = (), pin_resources: bool = True, **fields):
    """Registers, syncs and pins every tool and resource (as an admin would); `read` tools get the read risk
    class."""
    server = registry_services.create_server(actor=actor, sync=False, **fields)
    report = registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert report.status == "ok", report.error
    for tool in Tool.objects.filter(server=server):
        if not tool.is_pinned or tool.state != "active":
            registry_services.pin_tool(actor=actor, tool_id=tool.id, review=inbox)
        if tool.name in read:
            registry_services.update_tool(actor=actor, tool_id=tool.id, risk="read", review=inbox)
    for resource in Resource.objects.filter(server=server) if pin_resources else ():
        resources.pin_resource(actor=actor, resource_id=resource.id, review=inbox)
    return server


def wait_for_ledgers(*urls: str, timeout: float = 15) -> None:
    """Until each gateway has committed its queued ledger rows: a test's database teardown must not
    race a batch (TRUNCATE against the batch's transaction deadlocks)."""
    deadline = time.monotonic() + timeout
    for url in urls:
        health = url.removesuffix("/mcp") + "/healthz"
        while time.monotonic() < deadline:
            try:
                if httpx2.get(health, timeout=5).json().get("ledger_idle"):
                    break
            except httpx2.HTTPError:
                break  # a gateway that is gone writes nothing
            time.sleep(0.05)


@pytest.fixture
def setup(org, owner, tmp_path, request):
    actor = member_actor(owner)
    data = tmp_path / "orders.json"
    register_and_pin(actor, name="orders", transport="stdio", trust_tier="internal", command=sys.executable,
                     args=["-m", "apps.demo.order_desk", "stdio"], cwd=str(ROOT), env={"ORDER_DESK_DATA": str(data)})
    register_and_pin(actor, name="time", transport="stdio", trust_tier="third_party", command=str(TIME_SERVER),
                     args=["--local-timezone", "UTC"], read=("get_current_time", "convert_time"))
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    agent = agent_services.create_agent(actor=actor, name="Desk via gateway", connection_id=connection.id,
                                        script=[], grants=GRANTS)
    admin = DjangoClient(headers={"Authorization": f"Bearer {token_for(org, 'admin')}"})
    approver = DjangoClient(headers={"Authorization": f"Bearer {token_for(org, 'approver', name='approver')}"})
    yield Setup(org, actor, agent, data, admin, approver)
    pool.close_all()
    wait_for_ledgers(*(request.getfixturevalue(name) for name in ("gateway_url", "other_gateway_url")
                       if name in request.fixturenames))


@asynccontextmanager
async def mcp_client(url: str, key: str, *, mode: str = "auto", timeout: float = 60, event_hooks=None, **kwargs):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(timeout),
                              event_hooks=event_hooks)
    async with Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=timeout,
                      **kwargs) as client:
        yield client


def wait_until(predicate, timeout: float = 30, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def consented_redirect(browser: DjangoClient, authorize_url: str, agent_id: str) -> str:
    """The signed-in person on Airlock's consent page: sees the host, picks the agent, allows; where the browser
    goes next (the host's redirect URI with the code)."""
    try:
        parts = urlsplit(authorize_url)
        page = browser.get(f"{parts.path}?{parts.query}")
        assert page.status_code == 200, page.content[:500]
        form = page.context["form"]
        fields = {name: form[name].value() or "" for name in form.fields if form[name].is_hidden}
        answer = browser.post(parts.path, {**fields, "agent": agent_id, "allow": "Authorize"})
        assert answer.status_code == 302, answer.content[:500]
        return answer["Location"]
    finally:
        connection.close()
