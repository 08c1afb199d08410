"""Crews through their services: validation with field errors, roles, tenants, versions."""

from __future__ import annotations

import pytest

from apps.accounts.actors import member_actor
from apps.audit.models import AuditEvent
from apps.core.errors import NotFound, PermissionDenied, ValidationFailed
from apps.crews import selectors, services
from tests.agents.factories import make_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def agents(org):
    return {name: make_agent(org, name=name) for name in ("Triage", "Refunds", "Boss")}


def sequential(agents, **overrides):
    values = {
        "name": "Refund desk", "process": "sequential",
        "inputs": [{"name": "order_id", "type": "string", "required": True}],
        "tasks": [
            {"name": "triage", "description": "Look up order {order_id}", "agent_id": agents["Triage"].id},
            {"name": "refund", "description": "Refund {order_id} if late", "agent_id": agents["Refunds"].id,
             "context": ["triage"]},
        ],
    }
    return {**values, **overrides}


def errors_of(builder, **values):
    with pytest.raises(ValidationFailed) as caught:
        services.create_crew(actor=member_actor(builder), **values)
    return caught.value.errors


def test_a_builder_creates_a_sequential_crew(builder, agents):
    crew = services.create_crew(actor=member_actor(builder), **sequential(agents))
    assert [(t.name, t.agent.name, t.context) for t in crew.tasks.all()] == [
        ("triage", "Triage", []), ("refund", "Refunds", ["triage"])]
    assert (crew.max_hops, crew.version) == (6, 1)
    assert AuditEvent.objects.filter(action="crew.created", target_id=str(crew.id)).exists()


def test_unknown_input_placeholders_are_caught(builder, agents):
    values = sequential(agents)
    values["tasks"][1]["description"] = "Refund {order} now"
    errors = errors_of(builder, **values)
    assert errors == {"tasks.1.description": "{order} is not a declared input (inputs: order_id). "
                                             "Declare it under Inputs or fix the name."}


def test_cycles_in_task_context_are_caught(builder, agents):
    values = sequential(agents)
    values["tasks"][0]["context"] = ["refund"]
    errors = errors_of(builder, **values)
    assert "cycle: triage → refund → triage" in errors["tasks.0.context"]


def test_context_must_name_earlier_existing_tasks(builder, agents):
    values = sequential(agents)
    values["tasks"][1]["context"] = ["nope"]
    assert errors_of(builder, **values) == {"tasks.1.context": "There is no task named 'nope'."}
    values["tasks"][1]["context"] = ["refund"]
    assert errors_of(builder, **values) == {"tasks.1.context": "A task cannot receive its own output."}
    values = sequential(agents)
    values["tasks"].append({"name": "notify", "description": "Tell them", "agent_id": agents["Triage"].id})
    values["tasks"][1]["context"] = ["notify"]
    assert "'notify' runs after this task" in errors_of(builder, **values)["tasks.1.context"]


def test_missing_agents_are_caught(builder, agents, outsider):
    stranger = make_agent(outsider.org, name="Stranger")
    values = sequential(agents)
    values["tasks"][0]["agent_id"] = stranger.id
    values["tasks"][1]["agent_id"] = None
    errors = errors_of(builder, **values)
    assert "does not exist" in errors["tasks.0.agent_id"]
    assert errors["tasks.1.agent_id"] == "Choose an agent for this task."


def test_a_supervisor_cannot_be_its_own_member(builder, agents):
    errors = errors_of(builder, name="Sup", process="supervisor", supervisor_agent_id=agents["Boss"].id,
                       members=[agents["Boss"].id, agents["Refunds"].id])
    assert errors == {"members": "Boss is the supervisor; it cannot also be one of its own members."}


def test_a_supervisor_crew_with_routing_rules(builder, agents):
    crew = services.create_crew(actor=member_actor(builder), name="Sup", process="supervisor",
                                supervisor_agent_id=agents["Boss"].id,
                                members=[agents["Triage"].id, agents["Refunds"].id],
                                routing_rules=[{"contains": "refund", "route": "Refunds"}])
    assert [m.agent.name for m in crew.members.all()] == ["Triage", "Refunds"]
    errors = errors_of(builder, name="Sup2", process="supervisor", supervisor_agent_id=agents["Boss"].id,
                       members=[agents["Triage"].id], routing_rules=[{"contains": "refund", "route": "Refunds"}])
    assert "“Refunds” is not a member of this crew. Members: Triage" in errors["routing_rules.0"]


def test_limits_and_inputs_are_checked(builder, agents):
    errors = errors_of(builder, **sequential(agents, max_hops=0, timeout_s="soon", budget_usd="0",
                                             inputs=[{"name": "order id"}, {"name": "x", "type": "date"}]))
    assert set(errors) == {"max_hops", "timeout_s", "budget_usd", "inputs.0", "inputs.1", "tasks.0.description",
                           "tasks.1.description"}


@pytest.mark.parametrize("persona", ["viewer", "approver"])
def test_viewers_and_approvers_cannot_edit_crews(request, builder, agents, persona):
    crew = services.create_crew(actor=member_actor(builder), **sequential(agents))
    member = member_actor(request.getfixturevalue(persona))
    with pytest.raises(PermissionDenied):
        services.create_crew(actor=member, **sequential(agents, name="Other"))
    with pytest.raises(PermissionDenied):
        services.update_crew(actor=member, crew_id=crew.id, description="x")
    with pytest.raises(PermissionDenied):
        services.delete_crew(actor=member, crew_id=crew.id)


def test_another_orgs_crew_is_not_found(builder, agents, outsider):
    crew = services.create_crew(actor=member_actor(builder), **sequential(agents))
    with pytest.raises(NotFound):
        services.update_crew(actor=member_actor(outsider), crew_id=crew.id, description="mine")


def test_reordering_tasks_writes_a_version_with_the_diff(builder, agents):
    crew = services.create_crew(actor=member_actor(builder), **sequential(agents))
    values = sequential(agents)
    values["tasks"][1]["context"] = []
    reordered = [values["tasks"][1], values["tasks"][0]]
    crew = services.update_crew(actor=member_actor(builder), crew_id=crew.id, tasks=reordered)
    assert [t.name for t in crew.tasks.all()] == ["refund", "triage"]
    latest = selectors.crew_versions(crew=crew).first()
    assert (latest.number, sorted(latest.changes)) == (2, ["tasks"])
    assert [t["name"] for t in latest.changes["tasks"][0]] == ["triage", "refund"]


def test_disabling_keeps_history_and_deleting_keeps_the_snapshot(builder, agents):
    crew = services.create_crew(actor=member_actor(builder), **sequential(agents))
    services.set_crew_enabled(actor=member_actor(builder), crew_id=crew.id, enabled=False)
    assert [v.number for v in selectors.crew_versions(crew=crew)] == [2, 1]
    services.delete_crew(actor=member_actor(builder), crew_id=crew.id)
    event = AuditEvent.objects.get(action="crew.deleted")
    assert [t["name"] for t in event.data["snapshot"]["tasks"]] == ["triage", "refund"]
