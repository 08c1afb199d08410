"""The official MCP conformance suite (@modelcontextprotocol/conformance 0.1.16) against the gateway.

The gateway fronts the suite's own reference server (tests/gateway/servers/conformance_everything.ts, run by
Node 22 from var/test-mcp/conformance), registered, pinned and granted to one agent as an admin would, with
elicitation and sampling allowed. The suite sends no Authorization header, so it talks to a small proxy
that adds the gateway key (tests/gateway/servers/header_proxy.py). Every server scenario of the suite's
active set runs in one go; each one listed in EXPECTED must pass all its checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.gateway import services as gateway_services
from apps.registry import services as registry_services
from apps.registry.models import Tool
from apps.registry.pool import pool
from tests.gateway.conftest import ROOT, SERVERS, TEST_MCP, wait_for_ledgers
from tests.processes import free_port, stop, wait_for_port

pytestmark = pytest.mark.django_db(transaction=True)

CONFORMANCE = TEST_MCP / "conformance"
NODE22 = CONFORMANCE / "node_modules" / ".bin" / "node"
SUITE = CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

# Every server scenario in the suite's active set (0.1.16: 31 scenarios), all of which must pass.
EXPECTED = {
    "server-initialize", "ping", "tools-list", "tools-call-simple-text", "tools-call-image", "tools-call-audio",
    "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error",
    "tools-call-with-logging", "logging-set-level", "tools-call-with-progress", "completion-complete",
    "tools-call-sampling", "tools-call-elicitation", "elicitation-sep1034-defaults", "elicitation-sep1330-enums",
    "server-sse-multiple-streams", "resources-list", "resources-read-text", "resources-read-binary",
    "resources-templates-read", "resources-subscribe", "resources-unsubscribe", "prompts-list",
    "prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource", "prompts-get-with-image",
    "dns-rebinding-protection",
}


def spawn(args: list[str], log: Path, **env: str) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(args, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=ROOT)


@pytest.fixture
def reference_server(tmp_path, process_logs):
    """The suite's reference server on a free port: its URL. Copied next to the suite's node_modules (an ES
    module resolves its imports from where the file is)."""
    folder = tmp_path / "reference"
    folder.mkdir()
    (folder / "node_modules").symlink_to(CONFORMANCE / "node_modules")
    (folder / "package.json").write_text('{"type": "module"}')
    (folder / "server.ts").write_text((SERVERS / "conformance_everything.ts").read_text())
    port = free_port()
    log = process_logs / f"conformance-reference-{port}.log"
    proc = spawn([str(NODE22), str(folder / "server.ts")], log, PORT=str(port))
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


@pytest.fixture
def keyed_gateway(gateway_url, org, owner, reference_server, process_logs):
    """The gateway with the reference server behind it, reached through the header-adding proxy: its URL."""
    actor = member_actor(owner)
    server = registry_services.create_server(actor=actor, name="conformance", transport="http",
                                             trust_tier="internal", url=reference_server, sync=False)
    report = registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert report.status == "ok", report.error
    for tool in Tool.objects.filter(server=server):
        if not tool.is_pinned or tool.state != "active":
            registry_services.pin_tool(actor=actor, tool_id=tool.id, review=inbox)
        registry_services.update_tool(actor=actor, tool_id=tool.id, risk="read", review=inbox)
    registry_services.set_server_requests(actor=actor, server_id=server.id, allow_elicitation=True,
                                          allow_sampling=True)
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    agent = agent_services.create_agent(
        actor=actor, name="Conformance host", connection_id=connection.id, script=[],
        grants=[{"tool": t.qualified_name, "policy": "auto"} for t in Tool.objects.filter(server=server)])
    _, key = gateway_services.create_key(actor=actor, name="Conformance suite", agent_id=agent.id)
    port = free_port()
    log = process_logs / f"header-proxy-{port}.log"
    proxy = spawn([sys.executable, "-m", "tests.gateway.servers.header_proxy", str(port)], log,
                  PROXY_TARGET=gateway_url.removesuffix("/mcp"), PROXY_HEADER=f"Authorization: Bearer {key}")
    try:
        wait_for_port(port, proxy, log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proxy)
        pool.close_all()
        wait_for_ledgers(gateway_url)


def run_suite(url: str, out: Path) -> dict[str, list[dict]]:
    """Runs the suite's active server scenarios against `url`: each scenario's checks, by scenario name."""
    done = subprocess.run([str(NODE22), str(SUITE), "server", "--url", url, "-o", str(out)], capture_output=True,
                          text=True, timeout=600, cwd=CONFORMANCE)
    results = {}
    for checks in out.glob("server-*/checks.json"):
        name = checks.parent.name.removeprefix("server-").rsplit("-", 6)[0]
        results[name] = json.loads(checks.read_text())
    assert results, done.stdout[-3000:] + done.stderr[-3000:]
    return results


def test_the_suites_server_scenarios_pass_through_the_gateway(keyed_gateway, tmp_path):
    results = run_suite(keyed_gateway, tmp_path / "results")

    failed = {name: [c.get("errorMessage") or c["status"] for c in checks if c["status"] != "SUCCESS"]
              for name, checks in results.items()}
    failed = {name: problems for name, problems in failed.items() if problems}
    unexpected = {name: failed[name] for name in sorted(EXPECTED & set(failed))}
    assert not unexpected, "\n".join(f"{name}: {problems}" for name, problems in unexpected.items())
    assert set(results) >= EXPECTED, sorted(EXPECTED - set(results))
