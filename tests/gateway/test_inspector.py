"""The MCP Inspector CLI (@modelcontextprotocol/inspector 0.15.0, a TypeScript-SDK client) against
the gateway. Its CLI has no option for request headers and no OAuth (its HTTP transport is built with
neither an auth provider nor headers; OAuth is in its browser UI only), so it reaches the endpoint the way a
stdio-only host does: through mcp-remote (0.15.1), with the `--header "Authorization: Bearer ..."` line the
keys page shows, or with no key at all, when mcp-remote does the gateway's OAuth flow (discovery, dynamic
registration, PKCE; the browser it opens is a script here, and the consent is the signed-in person's).
Straight over `--transport http` (no key) it is refused."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from urllib.parse import urlsplit

import httpx2
import pytest
from django.test import Client as DjangoClient

from apps.accounts.actors import member_actor
from apps.gateway import services as gateway_services
from apps.gateway.models import OAuthGrant
from apps.runs.models import ToolCall
from tests.conftest import signed_in
from tests.factories import owner_of
from tests.gateway.conftest import OFFERED, TEST_MCP, consented_redirect, wait_until
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)
NODE = TEST_MCP / "node"


def inspector_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HOME": str(NODE), "npm_config_cache": str(NODE / ".npm-cache"),
            "MCP_REMOTE_CONFIG_DIR": str(NODE / ".mcp-auth"), "npm_config_update_notifier": "false", **extra}


def inspector_argv(*args: str) -> list[str]:
    return ["npx", "--no-install", "mcp-inspector", "--cli", *args]


def start_inspector(*args: str, **env: str) -> subprocess.Popen:
    """The Inspector CLI in a process group of its own: the mcp-remote it starts goes with it (`stop`)."""
    return subprocess.Popen(inspector_argv(*args), cwd=NODE, env=inspector_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # e.g. an mcp-remote still waiting for a consent that will not come
    proc.wait()


def inspector(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    proc = start_inspector(*args, **env)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        stop(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


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


def test_the_inspector_through_mcp_remote_does_the_gateways_oauth_and_is_refused_after_revoke(
        oauth_gateway, setup, live_url, tmp_path):
    url, _ = oauth_gateway
    owner = owner_of(setup.org)
    browser = signed_in(DjangoClient(HTTP_HOST=urlsplit(live_url).netloc), owner)
    opened = tmp_path / "opened-url"
    opener = tmp_path / "browser"  # what mcp-remote opens the authorization page with (xdg-open uses $BROWSER)
    opener.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {opened}\n')
    opener.chmod(0o755)
    env = {"BROWSER": str(opener), "MCP_REMOTE_CONFIG_DIR": str(tmp_path / "mcp-auth")}
    port = str(free_port())  # mcp-remote's callback (its redirect URI): the same for every run, as registered

    def remote(auth_timeout: int = 120) -> list[str]:
        return [str(NODE / "node_modules" / ".bin" / "mcp-remote"), url, port, "--auth-timeout", str(auth_timeout)]

    listing = start_inspector(*remote(), "--method", "tools/list", **env)
    try:
        authorize_url = wait_until(lambda: opened.exists() and opened.read_text(), timeout=90)
        assert "code_challenge=" in authorize_url and "resource=" in authorize_url
        callback = consented_redirect(browser, authorize_url, str(setup.agent.id))
        assert httpx2.get(callback, timeout=30).status_code == 200  # the browser lands on mcp-remote's callback
        out, err = listing.communicate(timeout=120)
    finally:
        stop(listing)
    assert listing.returncode == 0, err[-2000:]
    assert {t["name"] for t in json.loads(out)["tools"]} == OFFERED
    grant = OAuthGrant.objects.get(org=setup.org, revoked_at__isnull=True)
    assert grant.agent_id == setup.agent.id

    opened.unlink()  # the next run uses the stored token: no browser, no person
    called = inspector(*remote(), "--method", "tools/call", "--tool-name", "orders.get_order_status",
                       "--tool-arg", "order_id=A-1003", **env)
    assert called.returncode == 0, called.stderr[-2000:]
    assert json.loads(called.stdout)["structuredContent"]["status"] == "delivered" and not opened.exists()

    gateway_services.revoke_oauth_grant(actor=member_actor(owner), grant_id=grant.id)
    refused = inspector(*remote(auth_timeout=5), "--method", "tools/list", **env)  # nobody consents again
    assert refused.returncode != 0 and opened.exists()  # refused, mcp-remote asks for a new consent
    wait_until(lambda: ToolCall.objects.filter(org_id=setup.org.id).count() == 1)
