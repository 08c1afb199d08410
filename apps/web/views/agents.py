"""Agent pages: list, editor (allowlist picker, live prompt preview), detail (effective permissions,
history with diffs), and the LLM connections page."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from apps.agents import selectors, services, starters
from apps.agents.models import GrantPolicy, Provider
from apps.agents.prompts import compose_system_prompt
from apps.core.errors import Conflict, ValidationFailed
from apps.costs import selectors as costs
from apps.costs.models import BudgetScope
from apps.registry.models import Risk, TrustTier
from apps.web.access import member_required, post_only
from apps.web.tables import sorted_page

AGENT_TEXT_FIELDS = ("name", "role", "instructions", "in_scope", "out_of_scope", "connection_id", "model",
                     "temperature", "max_steps", "script")


def _redirect(request: HttpRequest, url: str) -> HttpResponse:
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


AGENT_COLUMNS = [("name", "Name", "name"), ("role", "Role", "role"), ("model", "Model", "connection__name"),
                 ("tools", "Tools", "grant_count"), ("version", "Version", "version"), ("state", "", "")]


@member_required()
def agent_list(request: HttpRequest) -> HttpResponse:
    org_id = request.actor.org_id
    rows = selectors.org_agents(org_id=org_id)
    q = request.GET.get("q", "").strip()
    if q:
        rows = rows.filter(name__icontains=q)
    return render(request, "web/agents/list.html", {
        "table": sorted_page(request, rows, columns=AGENT_COLUMNS, default="name", filters=("q",)), "q": q,
        "connections": selectors.org_connections(org_id=org_id), "can_build": request.actor.can("build")})


# --- The editor --------------------------------------------------------------------------------

def _default_policy(tool) -> str:
    if tool.risk == "read":
        return "auto"
    return "approve"


def _grant_rows(request: HttpRequest, errors: dict[str, str]) -> list[dict[str, Any]]:
    """The grant rows as submitted (tool, policy, condition, error), in order, for re-rendering."""
    rows = []
    refs = request.POST.getlist("grant_tool")
    policies = request.POST.getlist("grant_policy")
    conditions = request.POST.getlist("grant_condition")
    for index, ref in enumerate(refs):
        rows.append({"tool": selectors.find_tool(org_id=request.actor.org_id, ref=ref), "ref": ref,
                     "policy": policies[index] if index < len(policies) else "deny",
                     "condition": conditions[index] if index < len(conditions) else "",
                     "error": errors.get(f"grants.{index}", "")})
    return rows


def _submitted(request: HttpRequest) -> dict[str, Any]:
    values: dict[str, Any] = {key: request.POST.get(key, "") for key in AGENT_TEXT_FIELDS}
    values["grants"] = [{"tool": t, "policy": p, "condition": c} for t, p, c in zip(
        request.POST.getlist("grant_tool"), request.POST.getlist("grant_policy"),
        request.POST.getlist("grant_condition"), strict=False)]
    values["context_resources"] = request.POST.getlist("context_resource")
    return values


def _context_choices(org_id, agent, chosen: list[str], errors: dict[str, str]) -> list[dict[str, Any]]:
    """The context resources the editor offers: the organisation's usable ones, and any the agent has that are
    not usable any more (so they can be seen and taken off), each checked when chosen."""
    rows = {str(r.id): r for r in selectors.grantable_resources(org_id=org_id)}
    if agent is not None:
        rows.update({str(c.resource_id): c.resource for c in selectors.agent_context_resources(agent)})
    problems = {chosen[int(k.rsplit(".", 1)[1])]: v for k, v in errors.items()
                if k.startswith("context_resources.") and int(k.rsplit(".", 1)[1]) < len(chosen)}
    return [{"resource": r, "checked": rid in chosen, "error": problems.get(rid, "")}
            for rid, r in sorted(rows.items(), key=lambda item: (item[1].server.name, item[1].uri))]


def _agent_values(agent) -> dict[str, Any]:
    values = {key: getattr(agent, key) for key in AGENT_TEXT_FIELDS if key not in ("script", "connection_id")}
    values["connection_id"] = str(agent.connection_id)
    values["script"] = json.dumps(agent.script, indent=2) if agent.script else ""
    values["temperature"] = "" if values["temperature"] is None else values["temperature"]
    values["context_resources"] = [str(c.resource_id) for c in selectors.agent_context_resources(agent)]
    return values


def _editor(request: HttpRequest, *, agent, values: dict[str, Any], grants: list[dict[str, Any]],
            errors: dict[str, str] | None = None, status: int = 200) -> HttpResponse:
    org_id = request.actor.org_id
    connections = list(selectors.org_connections(org_id=org_id))
    tools = list(selectors.grantable_tools(org_id=org_id)[:50])
    granted = {row["ref"] for row in grants}
    for tool in tools:
        tool.granted = tool.qualified_name in granted
    context = {
        "agent": agent, "values": values, "grants": grants, "errors": errors or {},
        "connections": connections, "policies": GrantPolicy.choices,
        "scripted_ids": [str(c.id) for c in connections if c.provider == Provider.SCRIPTED],
        "servers": sorted({t.server.name for t in selectors.grantable_tools(org_id=org_id)}),
        "risks": Risk.choices, "tiers": TrustTier.choices,
        "tools": tools,
        "resource_cap": settings.AIRLOCK_RESOURCE_MAX_BYTES,
        "context_choices": _context_choices(org_id, agent, [str(v) for v in values.get("context_resources") or []],
                                            errors or {}),
        "prompt": _preview(values),
        "starters": starters.STARTERS, "starter": request.GET.get("template", ""),
        "starter_server": request.GET.get("server", ""),
    }
    template = "web/agents/edit.html#agent-form" if request.htmx else "web/agents/edit.html"
    return render(request, template, context, status=status)


def _preview(values: dict[str, Any]) -> str:
    return compose_system_prompt(name=values.get("name") or "", role=values.get("role") or "",
                                 instructions=values.get("instructions") or "", in_scope=values.get("in_scope") or "",
                                 out_of_scope=values.get("out_of_scope") or "")


def _save(request: HttpRequest, agent=None) -> HttpResponse:
    values = _submitted(request)
    try:
        if agent is None:
            saved = services.create_agent(actor=request.actor, **values)
            messages.success(request, f"Agent “{saved.name}” created.")
        else:
            saved = services.update_agent(actor=request.actor, agent_id=agent.id, **values)
            messages.success(request, f"Agent “{saved.name}” saved (version {saved.version}).")
    except ValidationFailed as exc:
        return _editor(request, agent=agent, values=values, grants=_grant_rows(request, exc.errors),
                       errors=exc.errors, status=422)
    return _redirect(request, reverse("web:agent_detail", args=[saved.id]))


@member_required("build")
def agent_new(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _save(request)
    connections = selectors.org_connections(org_id=request.actor.org_id)
    first = connections.first()
    values = {"max_steps": 8, "connection_id": str(first.id) if first else ""}
    grants = []
    starter = starters.agent_starter(request.GET.get("template", ""))
    if starter:  # prefill from a template; nothing is saved until Create
        values.update(starters.starter_values(starter))
        tools = selectors.grantable_tools(org_id=request.actor.org_id, server=request.GET.get("server", ""))
        grants = [{"tool": t, "ref": t.qualified_name, "policy": policy, "condition": "", "error": ""}
                  for t, policy in starters.suggested_grants(starter, tools)]
    return _editor(request, agent=None, values=values, grants=grants)


@member_required("build")
def agent_edit(request: HttpRequest, agent_id) -> HttpResponse:
    agent = selectors.get_agent(org_id=request.actor.org_id, agent_id=agent_id)
    if request.method == "POST":
        return _save(request, agent)
    grants = [{"tool": g.tool, "ref": g.tool.qualified_name, "policy": g.policy, "condition": g.condition, "error": ""}
              for g in selectors.agent_grants(agent)]
    return _editor(request, agent=agent, values=_agent_values(agent), grants=grants)


@post_only
@member_required("build")
def prompt_preview(request: HttpRequest) -> HttpResponse:
    """The live preview: the exact prompt the engine would send for what is typed now."""
    return render(request, "web/agents/_prompt_preview.html", {"prompt": _preview(request.POST)})


@member_required("build")
def tool_picker(request: HttpRequest) -> HttpResponse:
    tools = selectors.grantable_tools(org_id=request.actor.org_id, server=request.GET.get("server", ""),
                                      risk=request.GET.get("risk", ""), tier=request.GET.get("tier", ""),
                                      search=request.GET.get("q", "").strip())[:50]
    granted = set(request.GET.getlist("grant_tool"))
    for tool in tools:
        tool.granted = tool.qualified_name in granted
    return render(request, "web/agents/_tool_results.html", {"tools": tools})


@member_required("build")
def grant_row(request: HttpRequest) -> HttpResponse:
    """A new allowlist row for the picked tool; nothing when it is already in the list (the picker marks it)."""
    tool = selectors.find_tool(org_id=request.actor.org_id, ref=request.GET.get("tool", ""))
    if tool is None or tool.qualified_name in request.GET.getlist("grant_tool"):
        return HttpResponse(status=204)
    row = {"tool": tool, "ref": tool.qualified_name, "policy": _default_policy(tool), "condition": "", "error": ""}
    return render(request, "web/agents/_grant_row.html", {"row": row, "policies": GrantPolicy.choices,
                                                          "added": True})


# --- Detail, enable/disable, delete ------------------------------------------------------------------

@member_required()
def agent_detail(request: HttpRequest, agent_id) -> HttpResponse:
    agent = selectors.get_agent(org_id=request.actor.org_id, agent_id=agent_id)
    versions = list(selectors.agent_versions(agent=agent)[:20])
    for version in versions:
        version.diffs = [(field, selectors.diff_lines(before, after))
                         for field, (before, after) in sorted(version.changes.items())]
    return render(request, "web/agents/detail.html", {
        "agent": agent, "permissions": selectors.effective_permissions(agent),
        "context_resources": selectors.agent_context_resources(agent),
        "prompt": selectors.system_prompt(agent), "crews": selectors.crews_using(agent), "versions": versions,
        "budget": costs.target_budget_use(org_id=agent.org_id, scope=BudgetScope.AGENT, target_id=agent.id),
        "can_build": request.actor.can("build"), "can_try": request.actor.can("runs.start"), "errors": {}})


@post_only
@member_required("build")
def agent_toggle(request: HttpRequest, agent_id) -> HttpResponse:
    enable = request.POST.get("enabled") == "1"
    agent = services.set_agent_enabled(actor=request.actor, agent_id=agent_id, enabled=enable)
    messages.success(request, f"Agent “{agent.name}” {'enabled' if enable else 'disabled'}; its history stays.")
    return _redirect(request, reverse("web:agent_detail", args=[agent.id]))


@post_only
@member_required("build")
def agent_delete(request: HttpRequest, agent_id) -> HttpResponse:
    agent = selectors.get_agent(org_id=request.actor.org_id, agent_id=agent_id)
    try:
        services.delete_agent(actor=request.actor, agent_id=agent_id)
    except Conflict as exc:
        messages.error(request, exc.message)
        return _redirect(request, reverse("web:agent_detail", args=[agent_id]))
    messages.success(request, f"Agent “{agent.name}” deleted.")
    return _redirect(request, reverse("web:agents"))


# --- LLM connections ---------------------------------------------------------------------------------

CONNECTION_FIELDS = ("name", "provider", "base_url", "default_model")


def _connections_page(request: HttpRequest, *, values=None, errors=None, status: int = 200) -> HttpResponse:
    context = {"connections": selectors.org_connections(org_id=request.actor.org_id),
               "providers": Provider.choices, "values": values or {"provider": "scripted"}, "errors": errors or {},
               "can_build": request.actor.can("build")}
    template = "web/agents/connections.html#connections-panel" if request.htmx else "web/agents/connections.html"
    return render(request, template, context, status=status)


@member_required()
def connections(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _connections_page(request)
    request.actor.require("build")
    values = {key: request.POST.get(key, "") for key in CONNECTION_FIELDS}
    try:
        connection = services.create_connection(actor=request.actor, api_key=request.POST.get("api_key") or None,
                                                **values)
    except (ValidationFailed, Conflict) as exc:
        errors = exc.errors if isinstance(exc, ValidationFailed) else {"name": exc.message}
        return _connections_page(request, values=values, errors=errors, status=422)
    messages.success(request, f"Connection “{connection.name}” added.")
    return _connections_page(request)


@member_required("build")
def connection_edit(request: HttpRequest, connection_id) -> HttpResponse:
    connection = selectors.get_connection(org_id=request.actor.org_id, connection_id=connection_id)
    values = {key: getattr(connection, key) for key in CONNECTION_FIELDS}
    errors: dict[str, str] = {}
    status = 200
    if request.method == "POST":
        values = {key: request.POST.get(key, "") for key in CONNECTION_FIELDS}
        api_key = "" if request.POST.get("clear_api_key") else (request.POST.get("api_key") or None)
        try:
            services.update_connection(actor=request.actor, connection_id=connection.id, api_key=api_key, **values)
        except (ValidationFailed, Conflict) as exc:
            errors, status = (exc.errors if isinstance(exc, ValidationFailed) else {"name": exc.message}), 422
        else:
            messages.success(request, "Connection saved.")
            return _redirect(request, reverse("web:llm_connections"))
    return render(request, "web/agents/connection_edit.html", {
        "connection": connection, "values": values, "errors": errors, "providers": Provider.choices}, status=status)


@post_only
@member_required("build")
def connection_test(request: HttpRequest, connection_id) -> HttpResponse:
    result = services.test_connection(actor=request.actor, connection_id=connection_id,
                                      model=request.POST.get("model", ""))
    return render(request, "web/agents/_connection_result.html", {"result": result, "connection_id": connection_id})


@post_only
@member_required("build")
def connection_delete(request: HttpRequest, connection_id) -> HttpResponse:
    try:
        services.delete_connection(actor=request.actor, connection_id=connection_id)
        messages.success(request, "Connection deleted.")
    except Conflict as exc:
        messages.error(request, exc.message)
    return _connections_page(request) if request.htmx else redirect("web:llm_connections")
