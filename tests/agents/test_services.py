"""Agents and LLM connections through their services: rules, roles, tenants, versions, secrets."""

from __future__ import annotations

import pytest

from apps.accounts.actors import member_actor
from apps.agents import selectors, services
from apps.agents.models import AgentVersion, LlmConnection
from apps.audit.models import AuditEvent
from apps.core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from tests.agents.factories import make_agent, make_server, make_tool, order_desk, scripted_connection
from tests.agents.fake_llm import FakeLLM

pytestmark = pytest.mark.django_db


def test_a_builder_creates_a_scripted_agent_with_grants(org, builder):
    tools = order_desk(org)
    connection = scripted_connection(org)
    agent = services.create_agent(
        actor=member_actor(builder), name="Triage", role="order desk triage", connection_id=connection.id,
        script=[{"say": "hi"}],
        grants=[{"tool": "orders.get_order_status", "policy": "auto"},
                {"tool": str(tools["refund_order"].id), "policy": "approve"},
                {"tool": "orders.delete_customer", "policy": "deny"}])
    assert [(g.tool.qualified_name, g.policy) for g in selectors.agent_grants(agent)] == [
        ("orders.delete_customer", "deny"), ("orders.get_order_status", "auto"), ("orders.refund_order", "approve")]
    assert agent.version == 1
    assert AuditEvent.objects.filter(org_id=org.id, action="agent.created", target_id=str(agent.id)).exists()


@pytest.mark.parametrize("persona", ["viewer", "approver"])
def test_viewers_and_approvers_cannot_edit(request, org, persona):
    member = request.getfixturevalue(persona)
    connection = scripted_connection(org)
    with pytest.raises(PermissionDenied):
        services.create_agent(actor=member_actor(member), name="X", connection_id=connection.id)
    agent = make_agent(org)
    with pytest.raises(PermissionDenied):
        services.update_agent(actor=member_actor(member), agent_id=agent.id, role="changed")
    with pytest.raises(PermissionDenied):
        services.create_connection(actor=member_actor(member), name="c", provider="scripted")


def test_another_orgs_agent_is_not_found(org, outsider):
    agent = make_agent(org)
    with pytest.raises(NotFound):
        services.update_agent(actor=member_actor(outsider), agent_id=agent.id, role="mine now")
    with pytest.raises(NotFound):
        services.delete_agent(actor=member_actor(outsider), agent_id=agent.id)


def test_another_orgs_connection_and_tools_cannot_be_used(org, builder, outsider):
    other_connection = scripted_connection(outsider.org)
    order_desk(outsider.org)
    with pytest.raises(ValidationFailed) as caught:
        services.create_agent(actor=member_actor(builder), name="Thief", connection_id=other_connection.id,
                              grants=[{"tool": "orders.refund_order", "policy": "approve"}])
    assert set(caught.value.errors) == {"connection_id", "grants.0"}
    assert "No tool 'orders.refund_order'" in caught.value.errors["grants.0"]


@pytest.mark.parametrize(("risk", "tier", "state", "policy", "message"), [
    ("dangerous", "internal", "active", "auto", "dangerous, so it cannot be auto"),
    ("write", "third_party", "active", "auto", "third-party server, so it cannot be auto"),
    ("read", "internal", "quarantined", "auto", "is quarantined"),
    ("read", "internal", "removed", "approve", "is removed"),
])
def test_grants_policy_forbids_are_refused_with_the_reason(org, builder, risk, tier, state, policy, message):
    tool = make_tool(make_server(org, "srv", tier), "t", risk=risk, state=state)
    with pytest.raises(ValidationFailed) as caught:
        make_agent(org, grants=[{"tool": tool.qualified_name, "policy": policy}])
    assert message in caught.value.errors["grants.0"]


def test_conditions_are_checked_against_the_tools_arguments(org):
    order_desk(org)
    with pytest.raises(ValidationFailed) as caught:
        make_agent(org, grants=[{"tool": "orders.refund_order", "policy": "auto", "condition": "amount > 5000"},
                                {"tool": "orders.list_orders", "policy": "auto", "condition": "open("}])
    assert "has no argument 'amount'; it takes: amount_cents, order_id, reason" in caught.value.errors["grants.0"]
    assert "Not a valid condition" in caught.value.errors["grants.1"]
    agent = make_agent(org, grants=[{"tool": "orders.refund_order", "policy": "auto",
                                     "condition": "amount_cents > 5000"}])
    assert selectors.agent_grants(agent)[0].condition == "amount_cents > 5000"


def test_a_script_error_points_at_the_bad_turn(org):
    with pytest.raises(ValidationFailed) as caught:
        make_agent(org, script=[{"say": "fine"}, {"call": [{"args": {}}]}])
    assert caught.value.errors["script"].startswith("Turn 2: call 1 needs a \"tool\"")
    with pytest.raises(ValidationFailed) as caught:
        make_agent(org, script='[{"say": "x"},]')
    assert "not valid JSON" in caught.value.errors["script"]


def test_all_field_errors_come_back_together(org):
    connection = scripted_connection(org)
    with pytest.raises(ValidationFailed) as caught:
        services.create_agent(actor=member_actor(org.memberships.first()), name="", connection_id=connection.id,
                              temperature="hot", max_steps=0)
    assert set(caught.value.errors) == {"name", "temperature", "max_steps"}


def test_every_change_writes_a_version_with_a_diff(org, builder):
    order_desk(org)
    agent = make_agent(org, name="Refunds", instructions="Be careful.")
    services.update_agent(actor=member_actor(builder), agent_id=agent.id, instructions="Be very careful.",
                          grants=[{"tool": "orders.refund_order", "policy": "approve"}])
    services.update_agent(actor=member_actor(builder), agent_id=agent.id, instructions="Be very careful.")  # no-op
    versions = list(selectors.agent_versions(agent=agent))
    assert [v.number for v in versions] == [2, 1]
    latest = versions[0]
    assert latest.actor_label == builder.user.email
    assert latest.changes["instructions"] == ["Be careful.", "Be very careful."]
    assert latest.changes["grants"][1] == [{"tool": "orders.refund_order", "tool_id": str(
        selectors.agent_grants(selectors.get_agent(org_id=org.id, agent_id=agent.id))[0].tool_id),
        "policy": "approve", "condition": ""}]
    assert selectors.get_agent(org_id=org.id, agent_id=agent.id).version == 2


def test_an_existing_grant_survives_its_tool_being_quarantined(org, builder):
    tools = order_desk(org)
    agent = make_agent(org, grants=[{"tool": "orders.get_order_status", "policy": "auto"}])
    tools["get_order_status"].state = "quarantined"
    tools["get_order_status"].save()
    agent = services.update_agent(actor=member_actor(builder), agent_id=agent.id, role="still here",
                                  grants=[{"tool": "orders.get_order_status", "policy": "auto"}])
    permission = selectors.effective_permissions(agent)[0]
    assert permission.now.decision == "deny"
    assert "quarantined" in permission.now.reason


def test_effective_permissions_explain_each_grant(org):
    order_desk(org)
    agent = make_agent(org, grants=[
        {"tool": "orders.get_order_status", "policy": "auto"},
        {"tool": "orders.refund_order", "policy": "auto", "condition": "amount_cents > 5000"},
        {"tool": "orders.delete_customer", "policy": "approve"}])
    rows = {p.grant.tool.qualified_name: p for p in selectors.effective_permissions(agent)}
    assert rows["orders.get_order_status"].now.decision == "allow"
    assert rows["orders.get_order_status"].tainted.decision == "allow"  # reads stay free after taint
    assert "unless amount_cents > 5000" in rows["orders.refund_order"].now.reason
    assert rows["orders.refund_order"].tainted.decision == "hold"
    assert rows["orders.delete_customer"].now.decision == "hold"
    assert "dangerous" in rows["orders.delete_customer"].now.reason


def test_an_agent_used_by_a_crew_cannot_be_deleted_but_can_be_disabled(org, builder):
    from apps.crews import services as crews

    agent = make_agent(org, name="Worker")
    crews.create_crew(actor=member_actor(builder), name="Desk", process="sequential",
                      tasks=[{"name": "do", "description": "Do it", "agent_id": agent.id}])
    with pytest.raises(Conflict, match="used by the crew Desk"):
        services.delete_agent(actor=member_actor(builder), agent_id=agent.id)
    disabled = services.set_agent_enabled(actor=member_actor(builder), agent_id=agent.id, enabled=False)
    assert not disabled.enabled
    assert [v.number for v in selectors.agent_versions(agent=agent)] == [2, 1]


def test_an_unused_agent_is_deleted_with_its_last_snapshot_in_the_audit(org, builder):
    agent = make_agent(org, name="Temp", role="short-lived")
    services.delete_agent(actor=member_actor(builder), agent_id=agent.id)
    event = AuditEvent.objects.get(org_id=org.id, action="agent.deleted")
    assert event.data["snapshot"]["role"] == "short-lived"
    assert not AgentVersion.objects.filter(agent_id=agent.id).exists()


def test_api_keys_are_encrypted_and_never_in_the_audit(org, builder):
    connection = services.create_connection(actor=member_actor(builder), name="OpenAI", provider="openai",
                                            api_key="sk-live-abcdefghijklmnopqrstuvwxyz")
    from django.db import connection as db

    with db.cursor() as cursor:
        cursor.execute("SELECT api_key FROM agents_llmconnection WHERE id = %s", [connection.id.hex])
        stored = cursor.fetchone()[0]
    assert "sk-live" not in stored
    assert LlmConnection.objects.get(id=connection.id).api_key == "sk-live-abcdefghijklmnopqrstuvwxyz"
    services.update_connection(actor=member_actor(builder), connection_id=connection.id, name="OpenAI prod")
    assert LlmConnection.objects.get(id=connection.id).api_key == "sk-live-abcdefghijklmnopqrstuvwxyz"  # kept
    events = AuditEvent.objects.filter(org_id=org.id, action__startswith="llm_connection")
    assert events.count() == 2
    assert all("sk-live" not in str(e.data) for e in events)


def test_an_openai_compatible_connection_needs_a_base_url(org, builder):
    with pytest.raises(ValidationFailed) as caught:
        services.create_connection(actor=member_actor(builder), name="Local", provider="openai_compatible")
    assert "base URL" in caught.value.errors["base_url"]
    with pytest.raises(ValidationFailed) as caught:
        services.create_connection(actor=member_actor(builder), name="Local", provider="openai_compatible",
                                   base_url="ftp://x")
    assert "http://" in caught.value.errors["base_url"]


def test_a_connection_in_use_cannot_be_deleted(org, builder):
    connection = scripted_connection(org, "Shared")
    make_agent(org, name="User", connection=connection)
    with pytest.raises(Conflict, match="used by User"):
        services.delete_connection(actor=member_actor(builder), connection_id=connection.id)


def test_testing_a_connection_stores_the_outcome(org, builder):
    with FakeLLM("openai") as fake:
        connection = services.create_connection(actor=member_actor(builder), name="Local", base_url=fake.base_url,
                                                provider="openai_compatible", default_model="llama3")
        result = services.test_connection(actor=member_actor(builder), connection_id=connection.id)
    assert result.ok
    stored = LlmConnection.objects.get(id=connection.id)
    assert stored.last_check_ok is True
    assert "replied 'OK'" in stored.last_check_message
