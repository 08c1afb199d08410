"""What a run's start reads of its crew (apps/crews/run_read.py): the one-round-trip read and its plain ORM twin
give the same snapshot for every shape of crew, a run holds that snapshot, and neither door reads across
organisations. Real stdio MCP servers (the order desk, a resources server), real Postgres."""

from __future__ import annotations

import pytest

from apps.agents import services as agent_services
from apps.agents.models import Agent
from apps.approvals.definition_changes import inbox
from apps.core.errors import NotFound
from apps.crews import run_read
from apps.crews import selectors as crews
from apps.crews import services as crew_services
from apps.crews.models import CrewTask
from apps.registry import services as registry_services
from apps.runs import services
from tests.factories import make_org, owner_of
from tests.runs.conftest import LOOK_UP, REFUND
from tests.runs.test_context_resources import notes  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

DOORS = {"one round trip": run_read.crew_for_run, "plain": run_read.crew_for_run_plain}
SAY = {"say": "Done.\nSTATUS: done\nREASON: ok"}


def read(door, actor, crew_id) -> tuple[dict, list[str], list[str]]:
    """What a run's start takes from a door: the snapshot, the agents it uses and the disabled ones."""
    crew = DOORS[door](org_id=actor.org_id, crew_id=crew_id)
    return services.build_snapshot(crew), [a.name for a in crews.crew_agents(crew)], crews.disabled_agents(crew)


@pytest.fixture
def crews_of_every_shape(desk, notes):  # noqa: F811 (the fixture imported above)
    """A sequential crew (one agent in two tasks, grants on two servers, a context resource, a disabled agent) and
    a supervisor crew (its supervisor with no grants, members that are also task agents elsewhere)."""
    actor = desk.actor
    registry_services.set_trusted_output(actor=actor, trusted=True, review=inbox, server_id=notes.server.id)
    triage = desk.agent("Triage", [{"call": [LOOK_UP]}, SAY], [{"tool": "orders.get_order_status", "policy": "auto"}],
                        role="Looks orders up", instructions="Be brief.", in_scope="Orders", out_of_scope="Refunds",
                        temperature=0.2, max_steps=5)
    refunds = desk.agent("Refunds", [{"call": [REFUND]}, SAY],
                         [{"tool": "orders.get_order_status", "policy": "auto"},
                          {"tool": "orders.refund_order", "policy": "approve"},
                          {"tool": "orders.delete_customer", "policy": "deny"}])
    reader = agent_services.create_agent(actor=actor, name="Reader", connection_id=desk.connection.id, script=[SAY],
                                         grants=[], context_resources=[str(notes.resource().id)])
    idle = desk.agent("Idle", [SAY], [])
    agent_services.set_agent_enabled(actor=actor, agent_id=idle.id, enabled=False)
    sequential = desk.sequential("Pipeline", [("look", triage, "Look up {order_id}.", []),
                                              ("read", reader, "Read the handbook.", ["look"]),
                                              ("refund", refunds, "Refund {amount_cents} on {order_id}.", ["read"]),
                                              ("idle", idle, "Nothing.", []),
                                              ("look again", triage, "Look again.", ["refund"])])
    boss = desk.agent("Boss", [SAY], [])
    supervised = crew_services.create_crew(actor=actor, name="Desk", process="supervisor",
                                           supervisor_agent_id=boss.id, members=[str(triage.id), str(reader.id)],
                                           routing_rules=[{"contains": "refund", "route": "Triage"}])
    return sequential, supervised


def test_both_doors_read_the_same_snapshot_of_every_shape_of_crew(desk, crews_of_every_shape):
    for crew in crews_of_every_shape:
        fast, plain = read("one round trip", desk.actor, crew.id), read("plain", desk.actor, crew.id)
        assert fast == plain
    snapshot, used, disabled = read("one round trip", desk.actor, crews_of_every_shape[0].id)
    assert used == ["Triage", "Reader", "Refunds", "Idle"] and disabled == ["Idle"]
    assert set(snapshot["tools"]) == {"orders.get_order_status", "orders.refund_order", "orders.delete_customer"}
    reader = next(a for a in snapshot["agents"].values() if a["name"] == "Reader")
    assert [c["uri"] for c in reader["context_resources"]] == ["notes://handbook"]
    assert [t["name"] for t in snapshot["crew"]["tasks"]] == ["look", "read", "refund", "idle", "look again"]
    snapshot, used, _ = read("one round trip", desk.actor, crews_of_every_shape[1].id)
    assert used == ["Boss", "Triage", "Reader"]
    boss = next(a for a in snapshot["agents"].values() if a["name"] == "Boss")
    assert "Triage" in boss["system_prompt"] and "Reader" in boss["system_prompt"]


def test_a_run_holds_the_crew_as_it_is_when_the_run_starts(desk, crews_of_every_shape):
    _, supervised = crews_of_every_shape
    first = services.start_run(actor=desk.actor, crew_id=supervised.id, enqueue=False)
    assert first.snapshot == read("plain", desk.actor, supervised.id)[0]
    crew_services.update_crew(actor=desk.actor, crew_id=supervised.id,
                              members=[str(a.id) for a in Agent.objects.filter(name__in=["Triage", "Refunds"])])
    agent_services.update_agent(actor=desk.actor, agent_id=Agent.objects.get(name="Triage").id,
                                grants=[{"tool": "orders.get_order_status", "policy": "approve"}])
    second = services.start_run(actor=desk.actor, crew_id=supervised.id, enqueue=False)
    assert second.snapshot == read("plain", desk.actor, supervised.id)[0] != first.snapshot
    names = sorted(a["name"] for a in second.snapshot["agents"].values())
    assert names == ["Boss", "Refunds", "Triage"]
    triage = next(a for a in second.snapshot["agents"].values() if a["name"] == "Triage")
    assert triage["grants"] == [{"tool": "orders.get_order_status", "tool_id": triage["grants"][0]["tool_id"],
                                 "policy": "approve", "condition": ""}]


@pytest.mark.parametrize("door", DOORS)
def test_neither_door_reads_another_organisation_s_crew_or_agents(desk, crews_of_every_shape, door):
    sequential, _ = crews_of_every_shape
    other = owner_of(make_org("Other"))
    for crew_id in (sequential.id, "not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        with pytest.raises(NotFound, match="No such crew"):
            DOORS[door](org_id=other.org_id, crew_id=crew_id)
    # A task pointing at another organisation's agent (no service writes one; a row changed by hand could).
    stranger = Agent.objects.create(org_id=other.org_id, name="Stranger", connection=Agent.objects.get(
        name="Triage").connection)
    CrewTask.objects.filter(crew=sequential, name="idle").update(agent=stranger)
    with pytest.raises(NotFound, match="No such agent"):
        DOORS[door](org_id=desk.actor.org_id, crew_id=sequential.id)
