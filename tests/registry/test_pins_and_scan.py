"""Pins, drift quarantine with a diff, removed tools, name rules, and the poisoning scan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.approvals.definition_changes import inbox
from apps.core.errors import Conflict, ValidationFailed
from apps.registry import selectors, services
from apps.registry.definitions import canonical_definition
from apps.registry.scanner import scan_definition
from tests.registry.conftest import register, register_python, write_tools

FIXTURES = Path(__file__).resolve().parent / "fixtures"
READ_ONLY = {"readOnlyHint": True}


def _definition(item):
    return canonical_definition(name=item["name"], title="", description=item.get("description", ""),
                                input_schema=item.get("input_schema", {}), output_schema=None, annotations=None)


def _configurable(actor, tools_file, name="conf", tier="internal"):
    return register_python(actor, name, "configurable.py", env={"TOOLS_FILE": str(tools_file)}, trust_tier=tier)


def _tool(actor, qualified):
    return selectors.get_tool_by_qualified_name(org_id=actor.org_id, qualified_name=qualified)


def test_every_poisoned_fixture_is_flagged_high():
    for item in json.loads((FIXTURES / "poisoned_tools.json").read_text()):
        severities = {f["severity"] for f in scan_definition(_definition(item))}
        assert "high" in severities, item["name"]


def test_benign_fixtures_have_no_high_finding():
    for item in json.loads((FIXTURES / "benign_tools.json").read_text()):
        findings = scan_definition(_definition(item))
        assert [f for f in findings if f["severity"] == "high"] == [], item["name"]


def test_long_descriptions_and_urls_are_noted_without_quarantine():
    findings = scan_definition(_definition({"name": "x", "description": "Plain words. " * 100}))
    assert [(f["code"], f["severity"]) for f in findings] == [("too_long", "medium")]


def test_a_changed_definition_is_quarantined_with_a_diff_until_pinned(actor, tmp_path):
    tools_file = write_tools(tmp_path / "tools.json", [
        {"name": "lookup", "description": "Look a word up.", "annotations": {"read_only_hint": True}}])
    server = _configurable(actor, tools_file)
    assert services.sync_server(actor=actor, server_id=server.id, review=inbox).tools_added == 1
    assert _tool(actor, "conf.lookup").is_usable

    write_tools(tools_file, [{"name": "lookup", "description": "Look a word up in the Oxford dictionary.",
                              "annotations": {"read_only_hint": True}}])
    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    tool = _tool(actor, "conf.lookup")
    assert report.tools_changed == 1 and report.quarantined == ["conf.lookup"]
    assert tool.state == "quarantined" and not tool.is_usable and tool.has_drift
    diff = services.tool_diff(tool)
    assert '-  "description": "Look a word up."' in diff
    assert '+  "description": "Look a word up in the Oxford dictionary."' in diff

    services.pin_tool(actor=actor, tool_id=tool.id, review=inbox)
    tool.refresh_from_db()
    assert tool.is_usable and services.tool_diff(tool) == ""
    assert services.sync_server(actor=actor, server_id=server.id, review=inbox).quarantined == []


def test_a_poisoned_tool_is_quarantined_even_on_a_trusted_server(actor, tmp_path):
    poisoned = json.loads((FIXTURES / "poisoned_tools.json").read_text())[:2]
    tools_file = write_tools(tmp_path / "tools.json", [*poisoned, {"name": "fine", "description": "Says hi."}])
    server = _configurable(actor, tools_file)

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert sorted(report.quarantined) == ["conf.add", "conf.weather"]
    add = _tool(actor, "conf.add")
    assert add.state_reason.startswith("Poisoning scan") and add.max_severity == "high" and not add.pinned_hash
    assert _tool(actor, "conf.fine").is_usable


def test_a_tool_the_server_drops_becomes_removed(actor, tmp_path):
    tools_file = write_tools(tmp_path / "tools.json", [{"name": "a"}, {"name": "b"}])
    server = _configurable(actor, tools_file)
    services.sync_server(actor=actor, server_id=server.id, review=inbox)
    write_tools(tools_file, [{"name": "a"}])

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert report.tools_removed == 1
    assert _tool(actor, "conf.b").state == "removed"
    with pytest.raises(Conflict):
        services.pin_tool(actor=actor, tool_id=_tool(actor, "conf.b").id, review=inbox)


def test_tool_names_a_model_cannot_use_are_refused_with_a_reason(actor, tmp_path):
    tools_file = write_tools(tmp_path / "tools.json", [{"name": "ok_tool"}, {"name": "has.dot"}, {"name": "x" * 60}])
    server = _configurable(actor, tools_file)

    services.sync_server(actor=actor, server_id=server.id, review=inbox)

    server.refresh_from_db()
    assert [t.name for t in server.tools.all()] == ["ok_tool"]
    assert any("'has.dot' cannot be a model tool name" in w for w in server.sync_warnings)
    assert any("too long" in w for w in server.sync_warnings)


def test_server_names_clash_or_break_qualified_names(actor):
    register(actor, name="orders", command="true")
    with pytest.raises(Conflict, match="already exists"):
        register(actor, name="orders", command="true")
    with pytest.raises(ValidationFailed) as exc:
        register(actor, name="Bad.Name", command="true")
    assert "name" in exc.value.errors


def test_admin_risk_override_survives_sync_and_is_audited(actor, tmp_path):
    from apps.audit.models import AuditEvent

    tools_file = write_tools(tmp_path / "tools.json", [{"name": "peek", "annotations": {"read_only_hint": True}}])
    server = _configurable(actor, tools_file)
    services.sync_server(actor=actor, server_id=server.id, review=inbox)
    tool = _tool(actor, "conf.peek")
    assert (tool.risk, tool.risk_source) == ("read", "annotations")

    services.update_tool(actor=actor, tool_id=tool.id, risk="dangerous", review=inbox)
    services.sync_server(actor=actor, server_id=server.id, review=inbox)

    tool.refresh_from_db()
    assert (tool.risk, tool.risk_source) == ("dangerous", "admin")
    event = AuditEvent.objects.get(org_id=actor.org_id, action="tool.risk_changed")
    assert event.data == {"from": "read", "to": "dangerous"}
