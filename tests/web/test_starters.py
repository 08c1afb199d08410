"""Agent and crew templates prefill the editors; what they suggest saves through the same services."""

from __future__ import annotations

import re

import pytest

from apps.agents import services as agent_services
from apps.agents.starters import STARTERS as AGENT_STARTERS
from apps.agents.starters import agent_starter, starter_values, suggested_grants
from apps.crews import services as crew_services
from apps.crews.starters import STARTERS as CREW_STARTERS
from apps.crews.starters import starter_values as crew_values
from apps.registry.models import Tool
from tests.agents.factories import make_agent, make_server, make_tool, order_desk, owner_actor, scripted_connection
from tests.conftest import signed_in


def test_the_refunds_template_prefills_the_editor_with_held_writes(client, org, builder):
    order_desk(org)
    html = signed_in(client, builder).get("/agents/new/?template=refunds&server=orders").content.decode()

    assert 'value="Refunds"' in html and "Check the order before acting" in html
    policies = dict(re.findall(r'id="policy-([\w.]+)".*?<option value="(\w+)" selected', html, re.S))
    assert policies == {"orders.get_order_status": "auto", "orders.list_orders": "auto",
                        "orders.refund_order": "approve", "orders.delete_customer": "deny"}
    assert "Policies: what they mean" in html and "Waits in the inbox" in html


@pytest.mark.parametrize("key", [s.key for s in AGENT_STARTERS])
def test_every_agent_template_saves_as_suggested(org, key):
    order_desk(org)
    third_party = make_server(org, "outside", "third_party")
    make_tool(third_party, "post", "write")
    make_tool(third_party, "quarantined_one", "read", state="quarantined")
    starter = agent_starter(key)
    grants = suggested_grants(starter, Tool.objects.filter(org=org).select_related("server"))

    agent = agent_services.create_agent(
        actor=owner_actor(org), connection_id=scripted_connection(org).id, **starter_values(starter),
        grants=[{"tool": t.qualified_name, "policy": p} for t, p in grants])

    assert agent.name == starter.name
    granted = {t.qualified_name: p for t, p in grants}
    assert "outside.quarantined_one" not in granted
    assert granted.get("outside.post") in (None, "approve")  # never auto on a third-party write


@pytest.mark.parametrize("key", [s.key for s in CREW_STARTERS])
def test_every_crew_template_saves_with_the_agents_it_suggests(client, org, builder, key):
    make_agent(org, "Order triage", role="order desk triage")
    make_agent(org, "Refunds", role="refund clerk")
    make_agent(org, "Desk supervisor", role="order desk supervisor")
    html = signed_in(client, builder).get(f"/crews/new/?template={key}").content.decode()
    assert "Start from a template" in html and "Hand-offs between agents in one run" in html

    from apps.agents.selectors import org_agents

    values = crew_values(next(s for s in CREW_STARTERS if s.key == key), list(org_agents(org_id=org.id)))
    if key == "single":
        assert values["tasks"][0]["agent_id"] == ""  # no hint: the person picks
        values["tasks"][0]["agent_id"] = str(org_agents(org_id=org.id)[0].id)
    crew = crew_services.create_crew(actor=owner_actor(org), **values)
    assert crew.process == values["process"]


def test_the_triage_template_suggests_matching_agents(client, org, builder):
    triage = make_agent(org, "Order triage", role="order desk triage")
    refunds = make_agent(org, "Refunds", role="refund clerk")
    html = signed_in(client, builder).get("/crews/new/?template=triage-action").content.decode()
    assert re.search(rf'<option value="{triage.id}" selected', html)
    assert re.search(rf'<option value="{refunds.id}" selected', html)


def test_agent_and_crew_lists_sort_filter_and_page_from_the_query_string(client, org, builder):
    for name in ("Alpha", "Bravo", "Charlie"):
        make_agent(org, name)
    signed_in(client, builder)
    html = client.get("/agents/?sort=-name").content.decode()
    assert html.index(">Charlie<") < html.index(">Bravo<") < html.index(">Alpha<")
    filtered = client.get("/agents/?q=rav&sort=-name").content.decode()
    assert ">Bravo<" in filtered and ">Alpha<" not in filtered
    assert 'name="sort" value="-name"' in filtered  # filtering keeps the order
    assert "No agent matches" in client.get("/agents/?q=zzz").content.decode()
    empty_crews = client.get("/crews/").content.decode()
    assert "No crews yet" in empty_crews and "?template=single" in empty_crews
