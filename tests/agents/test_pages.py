"""Agent and connection pages through the Django test client: what each persona sees and can do."""

from __future__ import annotations

import pytest

from apps.agents import selectors
from tests.agents.factories import make_agent, order_desk, scripted_connection
from tests.conftest import signed_in

pytestmark = pytest.mark.django_db


def agent_form(connection, **overrides):
    data = {"name": "Refunds", "role": "refund clerk", "connection_id": str(connection.id), "max_steps": "8",
            "instructions": "", "in_scope": "", "out_of_scope": "", "model": "", "temperature": "",
            "script": '[{"say": "ok"}]', "grant_tool": [], "grant_policy": [], "grant_condition": []}
    data.update(overrides)
    return data


def test_a_builder_creates_an_agent_from_the_form(client, org, builder):
    order_desk(org)
    connection = scripted_connection(org)
    response = signed_in(client, builder).post("/agents/new/", agent_form(
        connection, grant_tool=["orders.get_order_status", "orders.refund_order"], grant_policy=["auto", "approve"],
        grant_condition=["", ""]))
    agent = selectors.org_agents(org_id=org.id).get()
    assert response.status_code == 302
    assert response.url == f"/agents/{agent.id}/"
    page = client.get(response.url).content.decode()
    assert "Effective permissions" in page
    assert "waits for a person" in page  # refund_order: approve
    assert "You are Refunds, refund clerk." in page


def test_the_form_says_why_policy_refuses_a_grant_and_keeps_what_was_typed(client, org, builder):
    order_desk(org)
    connection = scripted_connection(org)
    response = signed_in(client, builder).post("/agents/new/", agent_form(
        connection, role="keeps this", grant_tool=["orders.delete_customer"], grant_policy=["auto"],
        grant_condition=[""]), HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 422
    assert "orders.delete_customer is dangerous, so it cannot be auto: choose approve or deny." in page
    assert 'value="keeps this"' in page
    assert not selectors.org_agents(org_id=org.id).exists()


def test_the_script_error_is_shown_under_the_script(client, org, builder):
    connection = scripted_connection(org)
    response = signed_in(client, builder).post("/agents/new/", agent_form(connection, script='[{"sing": 1}]'))
    assert response.status_code == 422
    assert "Turn 1: unknown key &#x27;sing&#x27;" in response.content.decode()


def test_the_prompt_preview_renders_what_is_typed(client, org, builder):
    response = signed_in(client, builder).post("/agents/prompt-preview/", {
        "name": "Scout", "role": "", "instructions": "Look around.", "in_scope": "maps", "out_of_scope": ""})
    assert "You are Scout." in response.content.decode()
    assert "## In scope\nmaps" in response.content.decode()


def test_the_tool_picker_filters_by_risk(client, org, builder):
    order_desk(org)
    page = signed_in(client, builder).get("/agents/tools/?risk=dangerous").content.decode()
    assert "orders.delete_customer" in page
    assert "orders.list_orders" not in page


def test_a_tool_already_in_the_allowlist_cannot_be_added_again(client, org, builder):
    order_desk(org)
    signed_in(client, builder)
    picker = client.get("/agents/tools/?grant_tool=orders.list_orders").content.decode()
    listed = picker.split('id="pick-orderslist_orders"')[1].split("</span>")[0]
    assert "disabled" in listed and "already in the allowlist" in listed
    other = picker.split('id="pick-ordersget_order_status"')[1].split("</span>")[0]
    assert "disabled" not in other and "Add orders.get_order_status" in other
    assert client.get("/agents/grant-row/?tool=orders.list_orders&grant_tool=orders.list_orders").status_code == 204
    added = client.get("/agents/grant-row/?tool=orders.list_orders&grant_tool=orders.refund_order")
    row = added.content.decode()
    assert added.status_code == 200 and 'name="grant_tool" value="orders.list_orders"' in row
    assert 'id="pick-orderslist_orders" hx-swap-oob="true"' in row and "autofocus" in row


def test_the_editor_marks_the_agents_granted_tools_as_added(client, org, builder):
    order_desk(org)
    agent = make_agent(org, name="Picky", grants=[{"tool": "orders.list_orders", "policy": "auto"}])
    page = signed_in(client, builder).get(f"/agents/{agent.id}/edit/").content.decode()
    assert "orders.list_orders is already in the allowlist" in page
    assert "Add orders.get_order_status" in page


@pytest.mark.parametrize("persona", ["viewer", "approver"])
def test_viewers_see_agents_but_cannot_edit(client, request, org, persona):
    agent = make_agent(org, name="Visible")
    client = signed_in(client, request.getfixturevalue(persona))
    assert "Visible" in client.get("/agents/").content.decode()
    assert client.get(f"/agents/{agent.id}/").status_code == 200
    assert client.get("/agents/new/").status_code == 403
    assert client.post(f"/agents/{agent.id}/delete/").status_code == 403
    assert "Edit" not in client.get(f"/agents/{agent.id}/").content.decode().split("page-body")[0]


def test_another_orgs_agent_page_is_404(client, org, outsider):
    agent = make_agent(org)
    assert signed_in(client, outsider).get(f"/agents/{agent.id}/").status_code == 404


def test_deleting_an_agent_in_a_crew_explains_which_crews(client, org, builder):
    from apps.accounts.actors import member_actor
    from apps.crews import services as crews

    agent = make_agent(org, name="Busy")
    crews.create_crew(actor=member_actor(builder), name="Desk",
                      tasks=[{"name": "t", "description": "d", "agent_id": agent.id}])
    response = signed_in(client, builder).post(f"/agents/{agent.id}/delete/", follow=True)
    assert "Busy is used by the crew Desk" in response.content.decode()


def test_connections_page_adds_a_connection_and_never_shows_the_key(client, org, builder):
    client = signed_in(client, builder)
    response = client.post("/agents/connections/", {"name": "OpenAI", "provider": "openai",
                                                    "api_key": "sk-verysecret-0123456789", "base_url": "",
                                                    "default_model": "gpt-4o-mini"})
    assert response.status_code == 200
    page = client.get("/agents/connections/").content.decode()
    assert "API key set" in page
    assert "sk-verysecret" not in page


def test_testing_a_connection_shows_the_error(client, org, builder):
    client = signed_in(client, builder)
    client.post("/agents/connections/", {"name": "Local", "provider": "openai_compatible",
                                         "base_url": "http://127.0.0.1:9/v1", "default_model": "llama3"})
    connection = selectors.org_connections(org_id=org.id).get()
    response = client.post(f"/agents/connections/{connection.id}/test/", {"model": ""})
    assert "Could not reach 127.0.0.1:9" in response.content.decode()


def test_every_editor_page_renders_for_a_builder(client, org, builder):
    from apps.accounts.actors import member_actor
    from apps.crews import services as crews

    order_desk(org)
    agent = make_agent(org, grants=[{"tool": "orders.refund_order", "policy": "approve"}])
    crew = crews.create_crew(actor=member_actor(builder), name="C",
                             tasks=[{"name": "t", "description": "d", "agent_id": agent.id}])
    client = signed_in(client, builder)
    for url in ["/agents/new/", f"/agents/{agent.id}/edit/", "/crews/new/", f"/crews/{crew.id}/edit/",
                f"/crews/{crew.id}/", "/crews/task-row/", "/crews/input-row/",
                "/agents/grant-row/?tool=orders.list_orders", f"/agents/connections/{agent.connection_id}/"]:
        assert client.get(url).status_code == 200, url
