"""The MCP Inspector CLI (@modelcontextprotocol/inspector 0.15.0, a TypeScript-SDK client) against
the gateway. Its CLI has no option for request headers, so it reaches the endpoint the way a
stdio-only host does: through the `npx mcp-remote <url> --header "Authorization: Bearer ..."`
line the keys page shows. Straight over `--transport http` (no key) it is refused."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from apps.runs.models import ToolCall
from tests.gateway.conftest import OFFERED, TEST_MCP, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
NODE = TEST_MCP / "node"


def inspector(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(NODE), "npm_config_cache": str(NODE / ".npm-cache"),
           "MCP_REMOTE_CONFIG_DIR": str(NODE / ".mcp-auth"), "npm_config_update_notifier": "false"}
    return subprocess.run(["npx", "--no-install", "mcp-inspector", "--cli", *args], cwd=NODE, env=env,
                          capture_output=True, text=True, timeout=timeout)


def through_mcp_remote(url: str, key: str, *args: str) -> subprocess.CompletedProcess:
    return inspector(str(NODE / "node_modules" / ".bin" / "mcp-remote"), url, "--header",
                     f"Authorization: Bearer {key}", *args)


def test_the_inspector_lists_exactly_the_allowed_tools_and_calls_one(gateway_url, setup):
    key = setup.create_key(name="Inspector")["value"]

    listed = through_mcp_remote(gateway_url, key, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert {t["name"] for t in json.loads(listed.stdout)["tools"]} == OFFERED

    called = through_mcp_remote(gateway_url, key, "--method", "tools/call", "--tool-name",
                                "orders.get_order_status", "--tool-arg", "order_id=A-1003")
    assert called.returncode == 0, called.stderr[-2000:]
    result = json.loads(called.stdout)
    assert not result.get("isError") and result["structuredContent"]["status"] == "delivered"

    denied = through_mcp_remote(gateway_url, key, "--method", "tools/call", "--tool-name",
                                "orders.delete_customer", "--tool-arg", "customer_id=C-100")
    assert denied.returncode == 0, denied.stderr[-2000:]
    assert json.loads(denied.stdout)["isError"] is True
    wait_until(lambda: ToolCall.objects.filter(org_id=setup.org.id).count() == 2)


def test_the_inspector_over_http_without_a_key_is_refused(gateway_url, setup):
    refused = inspector(gateway_url, "--transport", "http", "--method", "tools/list", timeout=60)
    assert refused.returncode != 0
    assert '"error": "invalid_token"' in refused.stderr and "Authentication required" in refused.stderr
