"""Another organisation's ids are "not found", on every page and every API route, and lists never
include another organisation's rows. Routes come from the URL conf and the OpenAPI schema, so a
new route is covered without editing this file; a new kind of id needs a factory (routes.py).

The prober is the owner (pages) or an admin token (API) of their own organisation: every
permission check passes, so only the tenant scoping stands between them and the victim's rows.
"""

from __future__ import annotations

import inspect

import pytest
from django.test import Client

from apps.accounts.actors import member_actor
from apps.web.access import page_above
from config.celery import IdOnlyTask
from config.celery import app as celery_app
from tests.factories import make_org, owner_of, token_for
from tests.security import routes

pytestmark = pytest.mark.django_db

PAGES = routes.pages()
SCHEMA = routes.openapi_schema()
OPERATIONS = routes.operations(SCHEMA)
COMPONENTS = SCHEMA.get("components", {}).get("schemas", {})
NOT_A_LEAK = {404, 405}  # 405: the method is refused before any lookup


@pytest.fixture
def victim():
    return routes.victim_world()


@pytest.fixture
def prober():
    """The owner of another organisation, with a session and an admin API token."""
    org = make_org("Globex")
    client = Client()
    client.force_login(owner_of(org).user)
    return {"org": org, "client": client, "auth": {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, 'admin')}"}}


def test_the_route_walk_finds_the_routes_it_must_cover():
    """Guards the generator itself: if the walk broke, every generated test would pass vacuously."""
    names = {page.name for page in PAGES}
    assert {"server", "tool", "agent_detail", "crew_detail", "member_role", "token_revoke",
            "llm_connection_edit"} <= names
    paths = {op.path for op in OPERATIONS}
    assert {"/api/v1/servers/{server_id}", "/api/v1/tools/{tool_id}/pin", "/api/v1/agents/{agent_id}",
            "/api/v1/crews/{crew_id}", "/api/v1/members/{member_id}"} <= paths
    assert len([p for p in PAGES if p.params]) >= 20 and len([o for o in OPERATIONS if o.params]) >= 20


def test_every_page_route_with_parameters_is_checked_or_explained():
    unexplained = [r for r in routes.page_routes_with_other_params() if r not in routes.NOT_TENANT_PARAMS]
    assert unexplained == [], (
        f"Routes with non-uuid parameters: {unexplained}. Object ids in URLs are UUIDs (<uuid:...>); "
        "if this parameter is not an organisation's object, add it to NOT_TENANT_PARAMS with the reason.")


@pytest.mark.parametrize("page", [p for p in PAGES if p.params and p.route not in routes.NOT_SESSION_ROUTES],
                         ids=lambda p: p.route)
def test_another_orgs_ids_are_not_found_on_pages(page, victim, prober):
    routes.require_ids(victim, page.params, page.route, pytest.fail)
    url = page.url(victim.ids)
    before = routes.snapshot(victim.org)

    answers = {}
    for method in ("get", "post"):
        for htmx in ({}, {"HTTP_HX_REQUEST": "true"}):
            response = getattr(prober["client"], method)(url, **htmx)
            if method == "get" and response.status_code == 302 and response["Location"] == page_above(url):
                # A form target sends a GET to the page above its address before any lookup, so the
                # redirect tells nothing; where that page names the victim's object it must be a 404.
                landing = prober["client"].get(response["Location"], **htmx)
                assert routes.MARKER not in landing.content.decode(errors="replace")
                if not any(str(i) in response["Location"] for i in victim.ids.values()):
                    continue
                response = landing
            answers[(method, bool(htmx))] = response.status_code
            body = response.content.decode(errors="replace")
            assert routes.MARKER not in body, f"{method.upper()} {url} shows the victim's data"

    assert set(answers.values()) <= NOT_A_LEAK, f"{url}: {answers} (expected 404, never 200/3xx/403/500)"
    assert 404 in answers.values(), f"{url}: {answers}"
    assert routes.snapshot(victim.org) == before, f"{url} changed the victim's rows"


@pytest.mark.parametrize("op", [o for o in OPERATIONS if o.params], ids=lambda o: f"{o.method} {o.path}")
def test_another_orgs_ids_are_not_found_in_the_api(op, victim, prober):
    routes.require_ids(victim, op.params, op.path, pytest.fail)
    body = routes.minimal_body(op.body_schema, COMPONENTS) if op.body_schema else None
    before = routes.snapshot(victim.org)

    kwargs = {"content_type": "application/json", "data": body} if body is not None else {}
    response = getattr(prober["client"], op.method)(op.url(victim.ids), **kwargs, **prober["auth"])

    where = f"{op.method.upper()} {op.path}"
    assert response.status_code == 404, f"{where}: {response.status_code} {response.content[:300]!r}"
    assert response.json()["detail"]
    assert routes.MARKER not in response.content.decode()
    assert routes.snapshot(victim.org) == before


def test_page_lists_never_show_another_orgs_rows(victim, prober):
    foreign = routes.all_ids(victim.org)
    checked = 0
    for page in PAGES:
        if page.params:
            continue
        response = prober["client"].get(page.url({}))
        raw = b"".join(response.streaming_content) if response.streaming else response.content  # exports stream
        body = raw.decode(errors="replace")
        assert response.status_code < 500, page.route
        assert routes.MARKER not in body, f"/{page.route} shows the victim's data"
        assert not [pk for pk in foreign if pk in body], f"/{page.route} shows the victim's ids"
        checked += response.status_code == 200
    assert checked >= 10


def test_api_lists_never_include_another_orgs_rows(victim, prober):
    foreign = routes.all_ids(victim.org)
    lists = [op for op in OPERATIONS if op.method == "get" and not op.params and not [  # a compare needs its ids
        p for p in op.operation.get("parameters", []) if p.get("in") == "query" and p.get("required")]]
    assert len(lists) >= 8
    for op in lists:
        response = prober["client"].get(op.path + "?limit=1000", **prober["auth"])
        body = response.content.decode()
        assert response.status_code == 200, op.path
        assert routes.MARKER not in body, f"{op.path} includes the victim's rows"
        assert not [pk for pk in foreign if pk in body], f"{op.path} includes the victim's ids"


def test_the_victims_own_lists_do_show_them(victim):
    """The negative checks above mean something only if the marker shows up for its owner."""
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token_for(victim.org, 'admin')}"}
    for path in ("/api/v1/servers", "/api/v1/agents", "/api/v1/crews", "/api/v1/llm-connections",
                 "/api/v1/members", "/api/v1/tokens"):
        assert routes.MARKER in client.get(path, **auth).content.decode(), path
    client.force_login(victim.owner.user)
    assert routes.MARKER in client.get("/agents/").content.decode()


# --- task payloads --------------------------------------------------------------------------------

celery_app.loader.import_default_modules()  # runs the app's autodiscovery of apps/*/tasks.py
OUR_TASKS = sorted(name for name in celery_app.tasks if name.startswith("apps."))


def test_every_task_of_ours_is_registered():
    assert {"apps.registry.tasks.sync_server", "apps.core.tasks.check_worker"} <= set(OUR_TASKS)


@pytest.mark.parametrize("name", OUR_TASKS)
def test_tasks_take_ids_only(name, org):
    task = celery_app.tasks[name]
    assert isinstance(task, IdOnlyTask), f"{name} must use the app's IdOnlyTask base"
    params = list(inspect.signature(task.run).parameters.values())
    for param in params:
        assert param.annotation in ("str", str, "str | None"), (
            f"{name}({param.name}: {param.annotation}): task arguments are ids as strings")
    with pytest.raises(TypeError, match="must be ids"):
        task.apply_async(args=[org] * max(1, len(params)))
    with pytest.raises(TypeError, match="must be ids"):
        task.apply_async(kwargs={"payload": {"org_id": str(org.id)}})
    with pytest.raises(TypeError, match="must be ids"):
        task.delay(member_actor(owner_of(org)))
