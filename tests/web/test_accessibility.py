"""A generated accessibility check over the main pages, as the Django test client renders them:
every form control has a label, every icon-only control has an accessible name, every page has a
title and one heading, and pages below a section carry a breadcrumb trail."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from apps.accounts.actors import member_actor
from apps.agents.selectors import org_agents
from apps.crews.selectors import org_crews
from apps.registry import services as registry
from apps.registry.catalog import catalog_entry
from tests.agents.factories import make_agent, order_desk, scripted_connection
from tests.conftest import signed_in

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
NOT_LABELLED = {"hidden", "submit", "button", "reset", "image"}


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict]] = []
        self.label_for: set[str] = set()
        self.controls: list[tuple[str, dict, bool]] = []  # tag, attrs, inside a <label>
        self.named: list[dict] = []  # buttons and links with their text collected
        self.title, self.h1, self.in_title = "", 0, False
        self.breadcrumb_current = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        inside_label = any(t == "label" for t, _ in self.stack)
        if tag == "label" and attrs.get("for"):
            self.label_for.add(attrs["for"])
        if tag in ("input", "select", "textarea") and attrs.get("type") not in NOT_LABELLED:
            self.controls.append((tag, attrs, inside_label))
        if tag in ("button", "a"):
            self.named.append({"tag": tag, "attrs": attrs, "text": ""})
        if tag == "img" and attrs.get("alt") and self.named:
            self.named[-1]["text"] += attrs["alt"]
        if tag == "title":
            self.in_title = True
        if tag == "h1":
            self.h1 += 1
        if tag == "li" and "breadcrumb-item" in attrs.get("class", "") and attrs.get("aria-current") == "page":
            self.breadcrumb_current = True
        if tag not in VOID:
            self.stack.append((tag, attrs))

    def handle_endtag(self, tag):
        if tag == "title":
            self.in_title = False
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                break

    def handle_data(self, data):
        if self.in_title:
            self.title += data
        open_named = [n for n in self.named if any(t in ("button", "a") and a is n["attrs"] for t, a in self.stack)]
        for item in open_named:
            item["text"] += data

    def problems(self) -> list[str]:
        found = []
        for tag, attrs, inside_label in self.controls:
            labelled = inside_label or attrs.get("id") in self.label_for or attrs.get("aria-label") \
                or attrs.get("aria-labelledby")
            if not labelled:
                found.append(f"<{tag} name={attrs.get('name')!r} id={attrs.get('id')!r}> has no label")
        for item in self.named:
            attrs = item["attrs"]
            if not item["text"].strip() and not (attrs.get("aria-label") or attrs.get("title")):
                found.append(f"<{item['tag']} class={attrs.get('class')!r}> has no accessible name")
        if not self.title.strip().endswith("· Airlock"):
            found.append(f"title {self.title.strip()!r}")
        if self.h1 != 1:
            found.append(f"{self.h1} <h1> elements")
        return found


def audit(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


@pytest.fixture
def furnished(org, owner):
    """An organisation with something on every page: servers, tools, an agent, a crew."""
    tools = order_desk(org)
    registry.create_server(actor=member_actor(owner), sync=False, **catalog_entry("time").server_fields())
    agent = make_agent(org, "Refunds", connection=scripted_connection(org),
                       grants=[{"tool": "orders.refund_order", "policy": "approve"}])
    from apps.crews.services import create_crew

    create_crew(actor=member_actor(owner), name="Desk", process="sequential",
                tasks=[{"name": "do", "description": "Do it", "agent_id": str(agent.id), "context": ""}])
    return tools


TOP = ["/", "/servers/", "/servers/catalog/", "/agents/", "/agents/connections/", "/crews/", "/audit/",
       "/settings/members/", "/settings/tokens/", "/settings/system/", "/inbox/", "/runs/"]
BELOW = ["/servers/catalog/orders/", "/servers/{server}/", "/tools/{tool}/", "/agents/new/", "/agents/{agent}/",
         "/agents/{agent}/edit/", "/crews/new/", "/crews/{crew}/", "/crews/{crew}/edit/",
         "/agents/connections/{connection}/"]


def test_every_main_page_labels_its_controls_and_names_its_buttons(client, org, owner, furnished):
    agent = org_agents(org_id=org.id).first()
    ids = {"server": furnished["refund_order"].server_id, "tool": furnished["refund_order"].id, "agent": agent.id,
           "crew": org_crews(org_id=org.id).first().id, "connection": agent.connection_id}
    signed_in(client, owner)
    failures = {}
    for path in TOP + BELOW:
        url = path.format(**ids)
        response = client.get(url)
        assert response.status_code == 200, url
        page = audit(response.content.decode())
        problems = page.problems()
        if path in BELOW and not page.breadcrumb_current:
            problems.append("no breadcrumb trail ending at this page")
        if problems:
            failures[url] = problems
    assert failures == {}


@pytest.mark.parametrize("path", ["/login/", "/signup/", "/account/reset/"])
def test_sign_in_pages_label_their_fields(client, settings, path, db):  # sign-in lists the SSO providers
    settings.AIRLOCK_ALLOW_SIGNUP = True
    response = client.get(path)
    assert response.status_code == 200
    assert audit(response.content.decode()).problems() == []


def test_the_check_itself_catches_what_it_looks_for():
    page = audit('<title>X · Airlock</title><h1>X</h1><input name="q"><label for="z">Z</label><input id="z">'
                 '<label>Kind <select name="kind"></select></label><button class="btn-icon"><i class="ti ti-x"></i>'
                 '</button><button aria-label="Remove"><i class="ti ti-x"></i></button><a href="/">Home</a>')
    assert page.problems() == ["<input name='q' id=None> has no label",
                               "<button class='btn-icon'> has no accessible name"]
