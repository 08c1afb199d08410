"""Every route Airlock serves, read from the URL conf and the OpenAPI schema (never listed by
hand), and one organisation full of objects to probe them with.

A new page or API route is covered by the tenancy and CSRF tests the day it is added; a route
whose id kind has no factory below fails those tests with a message saying what to add.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.apps import apps as django_apps
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.converters import UUIDConverter
from django.utils import timezone
from oauth2_provider.models import Application

from apps.accounts import services as accounts
from apps.accounts.actors import member_actor
from apps.accounts.models import Membership
from apps.approvals import services as approvals
from apps.approvals import standing
from apps.approvals.models import ApprovalRequest
from apps.core.models import TenantModel, WorkerCheck
from apps.costs import services as costs
from apps.crews import services as crews
from apps.gateway import services as gateway
from apps.notifications import services as notifications
from apps.registry.models import McpServer
from apps.runs import services as runs
from tests.agents.factories import make_agent, make_resource, order_desk, scripted_connection
from tests.factories import add_member, make_org, owner_of

API_PREFIX = "api/v1/"
# Mounted apps that are not the organisation's pages: the API (walked through its OpenAPI
# schema instead) and Django's admin (staff only, outside tenancy: no org member reaches it).
NOT_PAGES = (API_PREFIX, "django-admin/")
# Routes with a path parameter that is not an object id of an organisation. Add here only with a reason.
NOT_TENANT_PARAMS = {
    "account/reset/<uidb64>/<token>/": "Django's signed password-reset link: no organisation object",
    "servers/catalog/<slug:key>/": "an entry of the built-in server catalog, the same for every organisation",
    "invite/<str:token>/": "an emailed invite link: the secret token is the only key, no organisation object id",
    "accounts/oidc/<str:provider_id>/login/": "single sign-on start: an organisation's public slug, before sign-in",
    "accounts/oidc/<str:provider_id>/login/callback/": "single sign-on callback: checked by allauth's state",
    ".well-known/oauth-authorization-server/<path:issuer_path>": "OAuth server metadata (RFC 8414): public",
    "o/register/<str:client_id>/": "an OAuth client's own registration (RFC 7592): its registration token is the key",
    "approvals/email/<str:token>/": "an emailed approval (or question) link: the secret token is the only key",
}
# Routes with an organisation's object id that no session reaches: they answer a third party that proves who it
# is another way, so "another organisation's member" has no meaning there. Add here only with a reason.
NOT_SESSION_ROUTES = {
    "integrations/slack/<uuid:connection_id>/interactions/":
        "Slack's interaction requests: no session; refused unless signed with that connection's own secret "
        "(tests/notifications/test_slack.py)",
}
MARKER = "zebrafish"  # in every name of the victim's objects: must never appear in another org's answers


@dataclass(frozen=True)
class Page:
    route: str  # "servers/<uuid:server_id>/"
    name: str
    params: tuple[str, ...]  # the uuid parameters, in order

    def url(self, ids: dict[str, str]) -> str:
        path = self.route
        for param in self.params:
            path = re.sub(rf"<uuid:{param}>", ids[param], path)
        return "/" + re.sub(r"<(?:\w+:)?\w+>", "x", path)  # other parameters (slugs, reset tokens): any value


def _walk(patterns: list, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            if route.startswith(NOT_PAGES):
                continue
            yield from _walk(entry.url_patterns, route)
        else:
            yield route, entry


def pages() -> list[Page]:
    """Every page route of the URL conf (without the API and the admin)."""
    found = []
    for route, pattern in _walk(get_resolver().url_patterns):
        converters = getattr(pattern.pattern, "converters", {})
        params = tuple(name for name, conv in converters.items() if isinstance(conv, UUIDConverter))
        found.append(Page(route=route, name=pattern.name or route, params=params))
    return found


def page_routes_with_other_params() -> list[str]:
    return [route for route, pattern in _walk(get_resolver().url_patterns)
            if getattr(pattern.pattern, "converters", {})
            and not any(isinstance(c, UUIDConverter) for c in pattern.pattern.converters.values())]


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # "/api/v1/servers/{server_id}"
    params: tuple[str, ...]
    body_schema: dict[str, Any] | None
    body_required: bool
    operation: dict[str, Any] = field(compare=False, hash=False, repr=False)

    def url(self, ids: dict[str, str]) -> str:
        path = self.path
        for param in self.params:
            path = path.replace("{" + param + "}", ids[param])
        return path


def openapi_schema() -> dict[str, Any]:
    from apps.api.api import api

    return api.get_openapi_schema(path_prefix="/" + API_PREFIX)


def operations(schema: dict[str, Any] | None = None) -> list[Operation]:
    schema = schema or openapi_schema()
    found = []
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            params = tuple(p["name"] for p in op.get("parameters", []) if p.get("in") == "path")
            body = op.get("requestBody") or {}
            media = (body.get("content") or {}).get("application/json") or {}
            found.append(Operation(method=method, path=path, params=params, body_schema=media.get("schema"),
                                   body_required=bool(body.get("required")), operation=op))
    return found


def minimal_body(schema: dict[str, Any] | None, components: dict[str, Any]) -> Any:
    """The smallest JSON value that satisfies `schema`'s required fields (enough to reach the view)."""
    if not schema:
        return {}
    if "$ref" in schema:
        return minimal_body(components[schema["$ref"].rsplit("/", 1)[1]], components)
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in schema:
            options = [s for s in schema[combinator] if s.get("type") != "null"]
            return minimal_body(options[0], components) if options else None
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    kind = schema.get("type", "object")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: minimal_body(props.get(name, {}), components) for name in schema.get("required", [])}
    return {"string": "x", "integer": 1, "number": 1, "boolean": False, "array": []}.get(kind)


# --- the victim organisation -------------------------------------------------------------------

@dataclass
class Victim:
    org: Any
    owner: Membership
    ids: dict[str, str]  # URL parameter name -> the id of one such object of the victim org


def _crew(org, agent) -> str:
    crew = crews.create_crew(actor=member_actor(owner_of(org)), name=f"{MARKER} crew",
                             tasks=[{"name": "look", "description": "Look it up", "agent_id": str(agent.id)}])
    return str(crew.id)


def _run_and_approval(org, crew_id: str, agent, tool) -> tuple[str, str]:
    run = runs.start_run(actor=member_actor(owner_of(org)), crew_id=crew_id, enqueue=False)
    approval = approvals.open_request(
        org_id=org.id, run_id=run.id, tool_call_id=None, agent_id=agent.id, tool_id=tool.id,
        title=f"{MARKER} refund", arguments={"order_id": MARKER}, args_hash="0" * 64,
        definition_hash=tool.definition_hash, risk=tool.risk, reason=f"{MARKER} needs a person", rule="approve",
        context={}, expires_at=None, requested_by_user_id=None)
    return str(run.id), str(approval.id)


def _unknown_tool_call(org, run_id: str, tool) -> str:
    """A ledger row whose outcome is unknown (what a worker lost mid-call leaves), for the resolve routes."""
    from apps.runs.models import RunStep, StepKind, ToolCall

    turn = RunStep.objects.create(org=org, run_id=run_id, position=1, kind=StepKind.AGENT,
                                  agent_name=f"{MARKER} agent", task="look")
    step = RunStep.objects.create(org=org, run_id=run_id, parent=turn, position=2, kind=StepKind.LLM,
                                  agent_name=f"{MARKER} agent", task="look")
    row = ToolCall.objects.create(org=org, run_id=run_id, step=step, call_id="call-1", tool=tool,
                                  qualified_name=tool.qualified_name, model_tool_name="orders__refund_order",
                                  arguments={"order_id": MARKER}, args_hash="0" * 64, state="unknown",
                                  idempotency_key=f"{MARKER}-1")
    return str(row.id)


def populate(org) -> Victim:
    """One of every object kind a route takes an id of, all in `org`, all named with MARKER."""
    tools = order_desk(org)
    McpServer.objects.filter(org=org).update(description=f"{MARKER} order desk")
    connection = scripted_connection(org, f"{MARKER} connection")
    handbook = make_resource(tools["get_order_status"].server, f"orders://{MARKER}/handbook",
                             description=f"{MARKER} handbook")
    agent = make_agent(org, name=f"{MARKER} agent", connection=connection,
                       grants=[{"tool": "orders.get_order_status", "policy": "auto"}],
                       context_resources=[str(handbook.id)])
    member = add_member(org, "viewer", email=f"{MARKER}-member@example.com")
    token, _raw = accounts.create_api_token(actor=None, org_id=org.id, name=f"{MARKER} token", role="viewer")
    ids = {
        "member_id": str(member.id),
        "token_id": str(token.id),
        "server_id": str(tools["get_order_status"].server_id),
        "tool_id": str(tools["refund_order"].id),
        "resource_id": str(handbook.id),
        "connection_id": str(connection.id),
        "agent_id": str(agent.id),
        "crew_id": _crew(org, agent),
    }
    ids["run_id"], ids["approval_id"] = _run_and_approval(org, ids["crew_id"], agent, tools["refund_order"])
    ids["tool_call_id"] = _unknown_tool_call(org, ids["run_id"], tools["refund_order"])
    owner_actor = member_actor(owner_of(org))
    price = costs.set_model_price(actor=owner_actor, model=f"{MARKER}-model", input_per_mtok=Decimal("1"),
                                  output_per_mtok=Decimal("2"), note=MARKER)
    budget = costs.set_budget(actor=owner_actor, scope="crew", amount_usd="10", target_id=ids["crew_id"],
                              target_label=f"{MARKER} crew")
    key, _raw = gateway.create_key(actor=owner_actor, name=f"{MARKER} key", agent_id=agent.id)
    ids.update(price_id=str(price.id), budget_id=str(budget.id), key_id=str(key.id))
    host = Application.objects.create(name=f"{MARKER} host", client_type="public",
                                      authorization_grant_type="authorization-code",
                                      redirect_uris="http://127.0.0.1:9/cb")
    ids["grant_id"] = str(gateway.grant_oauth(actor=owner_actor, application=host, agent_id=agent.id).id)
    approval = ApprovalRequest.objects.get(id=ids["approval_id"])
    ids["standing_id"] = str(standing.create_standing(actor=owner_actor, request=approval, scope="run").id)
    webhook, _secret = notifications.create_webhook(actor=owner_actor, name=f"{MARKER} hook",
                                                    url="http://127.0.0.1:9/hook", events=["run.finished"])
    ids["webhook_id"] = str(webhook.id)
    invite, _link = accounts.invite_member(actor=owner_actor, email=f"{MARKER}-invitee@example.com", role="viewer",
                                           accept_url="http://testserver/invite/{token}/")
    ids["invite_id"] = str(invite.id)
    # An answered check, so a leak would show the marker.
    ids["check_id"] = str(WorkerCheck.objects.create(org=org, answered_at=timezone.now(), hostname=MARKER).id)
    return Victim(org=org, owner=owner_of(org), ids=ids)


FACTORY_HINT = ("No factory for the route parameter {param!r} of {route}: add one to populate() in "
                "tests/security/routes.py (create one such object in the victim organisation and put its id "
                "under {param!r}), so this route is checked for tenancy like every other.")


def require_ids(victim: Victim, params: tuple[str, ...], route: str, fail: Callable[[str], None]) -> None:
    for param in params:
        if param not in victim.ids:
            fail(FACTORY_HINT.format(param=param, route=route))


def victim_world() -> Victim:
    return populate(make_org(f"{MARKER} Org", owner_email=f"{MARKER}-owner@example.com"))


def snapshot(org) -> dict[str, list[tuple[str, str]]]:
    """Every tenant row of `org` with its last change: equal before and after means untouched."""
    rows: dict[str, list[tuple[str, str]]] = {}
    for model in django_apps.get_models():
        if issubclass(model, TenantModel):
            values = model.objects.filter(org=org).values_list("id", "updated_at")
            rows[model._meta.label] = sorted((str(pk), str(updated)) for pk, updated in values)
    rows["accounts.Membership"] = sorted(
        (str(pk), f"{role}:{updated}") for pk, role, updated in
        Membership.objects.filter(org=org).values_list("id", "role", "updated_at"))
    return rows


def all_ids(org) -> set[str]:
    return {pk for rows in snapshot(org).values() for pk, _ in rows}
