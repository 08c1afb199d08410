"""Editing a server in the browser re-syncs it through the same service as the API's PATCH: a definition
that changed because of the edit is held for review, as after any change."""

from __future__ import annotations

import sys
import time

import pytest

from apps.approvals.definition_changes import inbox
from apps.registry import selectors, services
from tests.conftest import signed_in
from tests.registry.conftest import ROOT, SERVERS, register_python, write_tools

pytestmark = pytest.mark.django_db(transaction=True)


def _until(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("timed out")


def test_editing_the_environment_resyncs_and_holds_a_changed_tool(client, admin, worker, tmp_path):
    from apps.accounts.actors import member_actor

    first = write_tools(tmp_path / "one.json", [{"name": "look", "description": "v1"}])
    second = write_tools(tmp_path / "two.json", [{"name": "look", "description": "v2, after the edit"}])
    server = register_python(member_actor(admin), "conf", "configurable.py", env={"TOOLS_FILE": str(first)})
    services.sync_server(actor=member_actor(admin), server_id=server.id, review=inbox)
    tool = selectors.get_tool_by_qualified_name(org_id=admin.org_id, qualified_name="conf.look")
    assert tool.state == "active"
    synced = server.__class__.objects.get(pk=server.pk).last_synced_at

    signed_in(client, admin).post(f"/servers/{server.id}/edit/", {
        "name": "conf", "transport": "stdio", "trust_tier": "internal", "command": sys.executable,
        "args": str(SERVERS / "configurable.py"), "cwd": str(ROOT), "env": f"TOOLS_FILE={second}"})

    _until(lambda: server.__class__.objects.get(pk=server.pk).last_synced_at != synced)
    tool.refresh_from_db()
    assert tool.state == "quarantined" and "definition changed" in tool.state_reason
    assert "v2, after the edit" in client.get(f"/tools/{tool.id}/").content.decode()
