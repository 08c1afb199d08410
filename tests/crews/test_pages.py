"""Crew pages through the Django test client."""

from __future__ import annotations

import pytest

from apps.crews import selectors
from tests.agents.factories import make_agent
from tests.conftest import signed_in

pytestmark = pytest.mark.django_db


def crew_form(**overrides):
    data = {"name": "Refund desk", "description": "", "process": "sequential", "supervisor_agent_id": "",
            "max_hops": "6", "max_tool_calls": "50", "timeout_s": "900", "token_budget": "", "budget_usd": "",
            "routing_rules": "", "input_name": ["order_id"], "input_type": ["string"], "input_required": ["yes"]}
    data.update(overrides)
    return data


def test_a_builder_creates_a_sequential_crew(client, org, builder):
    a, b = make_agent(org, name="Triage"), make_agent(org, name="Refunds")
    response = signed_in(client, builder).post("/crews/new/", crew_form(
        task_name=["look", "refund"], task_agent=[str(a.id), str(b.id)],
        task_description=["Look up {order_id}", "Refund it"], task_context=["", "look"]))
    crew = selectors.org_crews(org_id=org.id).get()
    assert response.status_code == 302
    page = client.get(f"/crews/{crew.id}/").content.decode()
    assert "receives: look" in page
    assert "v1" in page


def test_errors_point_at_the_task(client, org, builder):
    a = make_agent(org, name="Triage")
    response = signed_in(client, builder).post("/crews/new/", crew_form(
        task_name=["look"], task_agent=[str(a.id)], task_description=["Look up {order}"], task_context=[""]),
        HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    assert "{order} is not a declared input (inputs: order_id)" in response.content.decode()


def test_a_supervisor_crew_with_rules_from_the_textarea(client, org, builder):
    boss, refunds = make_agent(org, name="Boss"), make_agent(org, name="Refunds")
    response = signed_in(client, builder).post("/crews/new/", crew_form(
        process="supervisor", supervisor_agent_id=str(boss.id), members=[str(refunds.id)],
        routing_rules="refund => Refunds\n"))
    assert response.status_code == 302
    crew = selectors.org_crews(org_id=org.id).get()
    assert crew.routing_rules == [{"contains": "refund", "route": "Refunds"}]


@pytest.mark.parametrize("persona", ["viewer", "approver"])
def test_viewers_cannot_edit_crews(client, request, org, persona):
    client = signed_in(client, request.getfixturevalue(persona))
    assert client.get("/crews/").status_code == 200
    assert client.get("/crews/new/").status_code == 403


def test_the_editor_sets_and_shows_separation_of_duties(client, org, builder):
    a = make_agent(org, name="Triage")
    signed_in(client, builder).post("/crews/new/", crew_form(
        task_name=["look"], task_agent=[str(a.id)], task_description=["Look up {order_id}"], task_context=[""],
        separation_of_duties="1"))
    crew = selectors.org_crews(org_id=org.id).get()
    assert crew.separation_of_duties
    editor = client.get(f"/crews/{crew.id}/edit/").content.decode()
    assert 'name="separation_of_duties" value="1" checked' in editor


def test_a_bad_routing_rule_keeps_the_text_as_typed_and_names_its_line(client, org, builder):
    boss, refunds = make_agent(org, name="Boss"), make_agent(org, name="Refunds")
    typed = "refund => Refunds\n\nbilling\nlate => Lateness\n"
    response = signed_in(client, builder).post("/crews/new/", crew_form(
        process="supervisor", supervisor_agent_id=str(boss.id), members=[str(refunds.id)],
        routing_rules=typed))
    page = response.content.decode()
    assert response.status_code == 422
    textarea = page.split('id="f-routing_rules"')[1].split("</textarea>")[0]
    assert textarea.endswith(">" + typed.replace(">", "&gt;"))  # as typed: no " =>" appended, the blank line kept
    assert "Line 3: Say where “billing” goes: write =&gt; and a member&#x27;s name (Refunds) or FINISH." in page
    assert "Line 4: “Lateness” is not a member of this crew. Members: Refunds; or FINISH to end the run." in page
    assert "&#x27;&#x27; is not a member" not in page
