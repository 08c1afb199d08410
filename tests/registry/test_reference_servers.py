"""Third-party reference servers installed by scripts/setup-test-env outside the project venv."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from apps.approvals.definition_changes import inbox
from apps.registry import pool, selectors, services
from apps.registry.connection import spec_for
from apps.registry.models import McpServer
from apps.registry.pool import Pool
from tests.registry.conftest import NODE_BIN, TIME_SERVER, register


def _tools(server):
    return {t.name: t for t in selectors.tools_for_org(org_id=server.org_id, server=server.id)}


def _no_high_findings(tools):
    return {n: t.findings for n, t in tools.items() if t.max_severity == "high"} == {}


def test_mcp_server_time_speaks_2026_and_its_read_tool_works(actor):
    server = register(actor, name="time", trust_tier="official", command=str(TIME_SERVER),
                      args=["--local-timezone", "UTC"])

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert report.status == "ok", report.error
    assert report.protocol_version == "2026-07-28"
    tools = _tools(server)
    assert {n: t.risk for n, t in tools.items()} == {"get_current_time": "read", "convert_time": "read"}
    assert _no_high_findings(tools)
    result = pool.call_tool(server.id, "get_current_time", {"timezone": "UTC"}, timeout=10)
    assert not result.is_error
    assert result.structured_content["timezone"] == "UTC"


def test_third_party_time_server_runs_sandboxed_with_annotations_ignored(actor):
    server = register(actor, name="time", trust_tier="third_party", command=str(TIME_SERVER),
                      args=["--local-timezone", "UTC"])

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert report.status == "ok", report.error
    tools = _tools(server)
    assert {(t.risk, t.risk_source, t.state) for t in tools.values()} == {("write", "default", "quarantined")}
    assert not selectors.tools_for_org(org_id=actor.org_id, usable_only=True).exists()
    services.pin_tool(actor=actor, tool_id=tools["get_current_time"].id, review=inbox)
    assert [t.name for t in selectors.tools_for_org(org_id=actor.org_id, usable_only=True)] == ["get_current_time"]
    result = pool.call_tool(server.id, "get_current_time", {"timezone": "Europe/Paris"}, timeout=10)
    assert result.structured_content["timezone"] == "Europe/Paris"


def test_server_everything_annotations_give_risks_and_echo_works(actor):
    server = register(actor, name="everything", trust_tier="official", command="node",
                      args=[str(NODE_BIN / "mcp-server-everything"), "stdio"])

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert report.status == "ok", report.error
    assert report.protocol_version == "2025-11-25"
    tools = _tools(server)
    assert tools["echo"].risk == "read" and tools["get-sum"].risk == "read"
    assert tools["toggle-simulated-logging"].risk == "write"
    assert tools["everything.get-sum" and "get-sum"].qualified_name == "everything.get-sum"
    assert _no_high_findings(tools)
    server.refresh_from_db()
    assert server.prompts and server.resources and server.capabilities["tools"]["listChanged"] is True
    result = pool.call_tool(server.id, "echo", {"message": "hi"}, timeout=10)
    assert "hi" in result.text


@pytest.mark.django_db(transaction=True)
def test_a_list_changed_notice_resyncs_the_server(owner):
    from apps.accounts.actors import member_actor

    actor = member_actor(owner)
    server = register(actor, name="everything", trust_tier="official", command="node",
                      args=[str(NODE_BIN / "mcp-server-everything"), "stdio"])
    resynced = []

    def resync(server_id):
        resynced.append(services.sync_server(actor=actor, server_id=server_id, review=inbox))
        connection.close()

    listening = Pool(on_list_changed=resync)
    try:
        listening.ensure_session(spec_for(server))  # server-everything announces tools/list_changed after init
        deadline = time.monotonic() + 15
        while not resynced and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        listening.close_all()
    assert resynced and resynced[0].status == "ok"
    assert McpServer.objects.get(pk=server.pk).last_synced_at is not None


def test_server_filesystem_reads_are_read_and_writes_dangerous(actor, tmp_path):
    server = register(actor, name="files", trust_tier="official", command="node",
                      args=[str(NODE_BIN / "mcp-server-filesystem"), str(tmp_path)])

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert report.status == "ok", report.error
    tools = _tools(server)
    assert tools["read_text_file"].risk == "read"
    assert tools["write_file"].risk == "dangerous" and tools["move_file"].risk == "dangerous"
    assert tools["create_directory"].risk == "write"
    assert _no_high_findings(tools)
    (tmp_path / "hello.txt").write_text("hello there")
    result = pool.call_tool(server.id, "read_text_file", {"path": str(tmp_path / "hello.txt")}, timeout=10)
    assert "hello there" in result.text
