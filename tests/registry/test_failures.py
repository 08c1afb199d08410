"""Every way a server can fail ends as a readable last_error and status, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.test import override_settings

from apps.approvals.definition_changes import inbox
from apps.core.egress import EgressRefused, check_url
from apps.registry import pool, services
from apps.registry.pool import ToolCallFailed
from tests.processes import free_port, wait_for_port
from tests.registry.conftest import ROOT, SERVERS, register, register_python


def _sync_error(actor, server):
    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)
    server.refresh_from_db()
    assert report.status == "error" and server.status == "error"
    assert server.last_error == report.error
    assert "Traceback" not in server.last_error
    return server.last_error


def test_command_not_found(actor):
    server = register(actor, name="ghost", command="/nonexistent/mcp-ghost")
    assert _sync_error(actor, server) == "Command not found: /nonexistent/mcp-ghost"


def test_crash_on_start_shows_the_servers_last_words(actor):
    server = register_python(actor, "crashy", "crash_on_start.py")
    error = _sync_error(actor, server)
    assert error.startswith("The server closed the connection")
    assert "cannot open database /nonexistent.db" in error


def test_output_that_is_not_json_rpc(actor):
    server = register_python(actor, "chatty", "not_json_rpc.py", timeout_s=5)
    error = _sync_error(actor, server)
    assert "not valid MCP/JSON-RPC" in error or "No answer" in error


def test_a_hanging_server_times_out(actor):
    server = register_python(actor, "hangs", "silent.py", timeout_s=2)
    assert _sync_error(actor, server) == "No answer from the server within 2 s."


def test_refused_connection(actor):
    url = f"http://127.0.0.1:{free_port()}/mcp"
    server = register(actor, name="nobody", transport="http", url=url)
    assert _sync_error(actor, server).startswith(f"Could not connect to {url}")


@pytest.fixture
def guarded_url(tmp_path):
    port = free_port()
    log = tmp_path / "guarded.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(SERVERS / "token_http.py"), str(port)], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, env={"MCP_TOKEN": "s3cret-token-value", "PATH": "/usr/bin"})
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


def test_bad_token_and_good_token(actor, guarded_url):
    server = register(actor, name="guarded", transport="http", url=guarded_url, bearer_token="wrong-token-value")
    error = _sync_error(actor, server)
    assert "refused the credentials (HTTP 401)" in error
    assert "wrong-token-value" not in error

    services.update_server(actor=actor, server_id=server.id, bearer_token="s3cret-token-value", sync=False,
                           review=inbox)
    assert services.sync_server(actor=actor, server_id=server.id, review=inbox).status == "ok"
    assert pool.call_tool(server.id, "ping", {}, timeout=5).text == "pong"


def test_egress_guard_blocks_internal_addresses_unless_allowed(actor):
    for url in ("http://127.0.0.1:9/mcp", "http://2130706433/mcp", "http://0x7f.1/mcp", "http://[::ffff:127.0.0.1]/",
                "http://169.254.169.254/latest", "http://10.1.2.3/"):
        with pytest.raises(EgressRefused):
            check_url(url, allow_private=False)
    with pytest.raises(EgressRefused, match="Only http and https"):
        check_url("file:///etc/passwd", allow_private=True)
    server = register(actor, name="internal", transport="http", url="http://127.0.0.1:9/mcp")
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False):  # registered while allowed, then forbidden
        assert "loopback/private/reserved" in _sync_error(actor, server)


def test_a_crashed_pool_session_is_replaced_on_the_next_call(actor):
    server = register_python(actor, "probe", "probe.py")
    assert pool.call_tool(server.id, "connect", {"port": 9}, timeout=10).text.startswith("REFUSED")

    with pytest.raises(ToolCallFailed, match="closed the connection"):
        pool.call_tool(server.id, "crash", {}, timeout=5)

    assert pool.call_tool(server.id, "connect", {"port": 9}, timeout=10).text.startswith("REFUSED")
