"""The catalog pages: who may register, one click, adjusting first, and a taken name."""

from __future__ import annotations

from apps.registry import selectors
from tests.conftest import signed_in


def test_anyone_sees_the_catalog_but_only_admins_get_register_buttons(client, viewer, admin):
    html = signed_in(client, viewer).get("/servers/catalog/").content.decode()
    assert "Order desk (bundled demo)" in html and "uvx mcp-server-time --local-timezone UTC" in html
    assert "npx -y @modelcontextprotocol/server-filesystem" in html and "Register" not in html
    assert signed_in(client, viewer).post("/servers/catalog/time/", {"as_suggested": "1"}).status_code == 403

    html = signed_in(client, admin).get("/servers/catalog/").content.decode()
    assert 'aria-label="Register Time now"' in html


def test_one_click_registers_the_entry_as_suggested(client, admin):
    response = signed_in(client, admin).post("/servers/catalog/time/", {"as_suggested": "1"})

    server = selectors.get_server_by_name(org_id=admin.org_id, name="time")
    assert response.status_code == 302 and response["Location"] == f"/servers/{server.id}/"
    assert (server.trust_tier, server.command, server.args) == ("official", "uvx",
                                                               ["mcp-server-time", "--local-timezone", "UTC"])
    detail = client.get(response["Location"]).content.decode()
    assert "registered from the catalog" in detail
    assert 'hx-trigger="every 1s"' in detail  # watches for the first sync, queued on registration


def test_the_adjust_form_recommends_a_tier_and_keeps_input_when_the_name_is_taken(client, admin):
    signed_in(client, admin).post("/servers/catalog/time/", {"as_suggested": "1"})
    form = client.get("/servers/catalog/time/").content.decode()
    assert 'value="time"' in form and "recommended" in form and "It reads the clock" in form

    response = client.post("/servers/catalog/time/", {
        "name": "time", "transport": "stdio", "trust_tier": "third_party", "command": "mcp-server-time",
        "args": "--local-timezone\nEurope/Paris"})

    html = response.content.decode()
    assert response.status_code == 422
    assert 'id="id_name-error"' in html and "already exists" in html
    assert "Europe/Paris" in html and 'value="mcp-server-time"' in html
    assert 'value="third_party" checked' in html


def test_an_unknown_entry_is_not_found(client, admin):
    assert signed_in(client, admin).get("/servers/catalog/nope/").status_code == 404


def test_the_servers_list_filters_sorts_and_links_to_the_catalog(client, admin):
    for key in ("time", "fetch", "git"):
        signed_in(client, admin).post(f"/servers/catalog/{key}/", {"as_suggested": "1"})

    html = client.get("/servers/?sort=-name").content.decode()
    assert html.index(">time<") < html.index(">git<") < html.index(">fetch<")
    assert 'aria-sort="descending"' in html and "Add from catalog" in html
    filtered = client.get("/servers/?q=fe").content.decode()
    assert ">fetch<" in filtered and ">time<" not in filtered and 'value="fe"' in filtered
    nothing = client.get("/servers/?tier=third_party").content.decode()
    assert "No server matches these filters" in nothing


def test_an_empty_registry_points_to_the_catalog(client, admin):
    html = signed_in(client, admin).get("/servers/").content.decode()
    assert "No MCP servers yet" in html and "Open the catalog" in html


def test_a_builder_is_told_whom_to_ask_and_can_write_to_them(client, builder, owner, admin):
    html = signed_in(client, builder).get("/servers/catalog/").content.decode()
    note = html.split('data-testid="ask-admin-note">')[1].split("</div>")[0]
    assert "Only owners and admins register servers" in note
    assert owner.user.email in note and admin.user.email in note
    ask = html.split('data-testid="ask-admin"')[0].rsplit("<a ", 1)[1]
    emails = sorted([owner.user.email, admin.user.email])
    assert f"mailto:{','.join(emails)}?" in ask
    assert "Please%20register%20the%20MCP%20server" in ask
    entry = client.get("/servers/catalog/time/").content.decode()
    assert 'data-testid="ask-admin"' in entry and "Ask an admin to register it" in entry

    html = signed_in(client, owner).get("/servers/catalog/").content.decode()
    assert 'data-testid="ask-admin' not in html


def test_a_builder_sent_from_the_dashboard_to_add_a_server_reaches_the_ask_an_admin_path(client, builder, admin):
    signed_in(client, builder)
    dashboard = client.get("/").content.decode()
    step = dashboard.split("Register an MCP server")[0].rsplit('<a href="', 1)[1].split('"')[0]
    servers = client.get(step).content.decode()
    assert step == "/servers/" and 'href="/servers/catalog/"' in servers and "Open the catalog" in servers
    catalog = client.get("/servers/catalog/").content.decode()
    assert 'data-testid="ask-admin"' in catalog and admin.user.email in catalog
    assert 'action="/servers/catalog/' not in catalog  # no register form a builder could only be refused by
