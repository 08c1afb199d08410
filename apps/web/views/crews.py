"""Crew pages: list, editor (tasks reordered by drag or buttons, supervisor and members, inputs,
limits), detail with history."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from apps.agents import selectors as agents
from apps.core.errors import ValidationFailed
from apps.crews import selectors, services, starters
from apps.crews.validation import INPUT_TYPES
from apps.runs import history
from apps.web.access import member_required, post_only
from apps.web.tables import sorted_page
from apps.web.views.runs import review_columns

SCALARS = ("name", "description", "process", "supervisor_agent_id", "max_hops", "max_tool_calls", "timeout_s",
           "token_budget", "budget_usd", "approvals_required", "approval_ttl_hours")


def _redirect(request: HttpRequest, url: str) -> HttpResponse:
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


CREW_COLUMNS = [("name", "Name", "name"), ("process", "Process", "process"), ("agents", "Agents", ""),
                ("version", "Version", "version"), ("state", "", "")]


@member_required()
def crew_list(request: HttpRequest) -> HttpResponse:
    rows = selectors.org_crews(org_id=request.actor.org_id)
    q = request.GET.get("q", "").strip()
    if q:
        rows = rows.filter(name__icontains=q)
    return render(request, "web/crews/list.html", {
        "table": sorted_page(request, rows, columns=CREW_COLUMNS, default="name", filters=("q",)), "q": q,
        "can_build": request.actor.can("build")})


# --- The editor ----------------------------------------------------------------------------------

def parse_routing_rules(text: str) -> list[dict[str, Any]]:
    """One rule a line: `text => Member name` (or `=> FINISH`). Each rule keeps its line number so an
    error can name the line the person typed it on (blank lines count)."""
    rules = []
    for number, line in enumerate((text or "").splitlines(), start=1):
        if line.strip():
            contains, _, route = line.partition("=>")
            rules.append({"contains": contains.strip(), "route": route.strip(), "line": number})
    return rules


def routing_rule_errors(rules: list[dict[str, Any]], errors: dict[str, str]) -> list[str]:
    """The rules' errors in line order, each prefixed with the line it is on."""
    out = []
    for index, rule in enumerate(rules):
        message = errors.get(f"routing_rules.{index}")
        if message:
            out.append(f"Line {rule.get('line', index + 1)}: {message}")
    return out


def _submitted(request: HttpRequest) -> dict[str, Any]:
    post = request.POST
    values: dict[str, Any] = {key: post.get(key, "") for key in SCALARS}
    values["tasks"] = [{"name": n, "agent_id": a, "description": d, "context": c} for n, a, d, c in zip(
        post.getlist("task_name"), post.getlist("task_agent"), post.getlist("task_description"),
        post.getlist("task_context"), strict=False)]
    values["inputs"] = [{"name": n, "type": t, "required": r != "no"} for n, t, r in zip(
        post.getlist("input_name"), post.getlist("input_type"), post.getlist("input_required"), strict=False)
        if n.strip() or t != "string"]
    values["members"] = post.getlist("members")
    values["separation_of_duties"] = post.get("separation_of_duties") == "1"
    values["on_untrusted"] = post.get("on_untrusted", "hold")
    values["routing_rules"] = parse_routing_rules(post.get("routing_rules", ""))
    return values


def _rules_text(request: HttpRequest, values: dict[str, Any]) -> str:
    """What the person typed, as typed, after a failed save; the saved rules otherwise."""
    if request.method == "POST":
        return request.POST.get("routing_rules", "")
    return "\n".join(f"{r['contains']} => {r['route']}" for r in values.get("routing_rules") or [])


def _crew_values(crew) -> dict[str, Any]:
    values = {key: getattr(crew, key) for key in SCALARS if key != "supervisor_agent_id"}
    values["supervisor_agent_id"] = str(crew.supervisor_id or "")
    values["tasks"] = [{"name": t.name, "agent_id": str(t.agent_id), "description": t.description,
                        "context": ", ".join(t.context)} for t in crew.tasks.all()]
    values["inputs"] = crew.inputs
    values["members"] = [str(m.agent_id) for m in crew.members.all()]
    values["separation_of_duties"] = crew.separation_of_duties
    values["on_untrusted"] = crew.on_untrusted
    values["routing_rules"] = crew.routing_rules
    for key in ("token_budget", "budget_usd"):
        values[key] = "" if values[key] is None else values[key]
    return values


def _editor(request: HttpRequest, *, crew, values: dict[str, Any], errors: dict[str, str] | None = None,
            status: int = 200) -> HttpResponse:
    errors = errors or {}
    tasks = [{**t, "context": t["context"] if isinstance(t["context"], str) else ", ".join(t["context"]),
              "errors": {k: errors.get(f"tasks.{i}.{k}", "") for k in ("name", "agent_id", "description", "context")}}
             for i, t in enumerate(values.get("tasks") or [])]
    inputs = [{**row, "error": errors.get(f"inputs.{i}", "")} for i, row in enumerate(values.get("inputs") or [])]
    rules_text = _rules_text(request, values)
    rule_errors = routing_rule_errors(values.get("routing_rules") or [], errors)
    context = {"crew": crew, "values": values, "errors": errors, "tasks": tasks, "inputs": inputs,
               "rules_text": rules_text, "rule_errors": rule_errors, "input_types": INPUT_TYPES,
               "agents": list(agents.org_agents(org_id=request.actor.org_id)),
               "members": [str(m) for m in values.get("members") or []],
               "starters": starters.STARTERS, "starter": request.GET.get("template", "")}
    template = "web/crews/edit.html#crew-form" if request.htmx else "web/crews/edit.html"
    return render(request, template, context, status=status)


def _save(request: HttpRequest, crew=None) -> HttpResponse:
    values = _submitted(request)
    try:
        if crew is None:
            saved = services.create_crew(actor=request.actor, **values)
            messages.success(request, f"Crew “{saved.name}” created.")
        else:
            saved = services.update_crew(actor=request.actor, crew_id=crew.id, **values)
            messages.success(request, f"Crew “{saved.name}” saved (version {saved.version}).")
    except ValidationFailed as exc:
        return _editor(request, crew=crew, values=values, errors=exc.errors, status=422)
    return _redirect(request, reverse("web:crew_detail", args=[saved.id]))


@member_required("build")
def crew_new(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _save(request)
    values = {"process": "sequential", "max_hops": 6, "max_tool_calls": 50, "timeout_s": 900,
              "approvals_required": 1, "approval_ttl_hours": 24,
              "tasks": [{"name": "", "agent_id": "", "description": "", "context": ""}], "inputs": []}
    starter = starters.crew_starter(request.GET.get("template", ""))
    if starter:  # prefill from a template; nothing is saved until Create
        values = starters.starter_values(starter, list(agents.org_agents(org_id=request.actor.org_id)))
    return _editor(request, crew=None, values=values)


@member_required("build")
def crew_edit(request: HttpRequest, crew_id) -> HttpResponse:
    crew = selectors.get_crew(org_id=request.actor.org_id, crew_id=crew_id)
    if request.method == "POST":
        return _save(request, crew)
    return _editor(request, crew=crew, values=_crew_values(crew))


@member_required("build")
def task_row(request: HttpRequest) -> HttpResponse:
    task = {"name": "", "agent_id": "", "description": "", "context": "", "errors": {}}
    return render(request, "web/crews/_task_row.html", {
        "task": task, "agents": list(agents.org_agents(org_id=request.actor.org_id))})


@member_required("build")
def input_row(request: HttpRequest) -> HttpResponse:
    return render(request, "web/crews/_input_row.html", {"row": {"name": "", "type": "string", "required": True},
                                                         "input_types": INPUT_TYPES})


# --- Detail, enable/disable, delete ----------------------------------------------------------------

@member_required()
def crew_detail(request: HttpRequest, crew_id) -> HttpResponse:
    crew = selectors.get_crew(org_id=request.actor.org_id, crew_id=crew_id)
    versions = list(selectors.crew_versions(crew=crew)[:20])
    for version in versions:
        version.diffs = [(field, agents.diff_lines(before, after))
                         for field, (before, after) in sorted(version.changes.items())]
    crew_runs = list(history.search_runs(org_id=crew.org_id, filters=history.RunFilters(crew_id=crew.id))[:10])
    review_columns(crew_runs)
    return render(request, "web/crews/detail.html", {
        "crew": crew, "versions": versions, "disabled_agents": selectors.disabled_agents(crew),
        "can_build": request.actor.can("build"), "crew_runs": crew_runs})


@post_only
@member_required("build")
def crew_toggle(request: HttpRequest, crew_id) -> HttpResponse:
    enable = request.POST.get("enabled") == "1"
    crew = services.set_crew_enabled(actor=request.actor, crew_id=crew_id, enabled=enable)
    messages.success(request, f"Crew “{crew.name}” {'enabled' if enable else 'disabled'}; its history stays.")
    return _redirect(request, reverse("web:crew_detail", args=[crew.id]))


@post_only
@member_required("build")
def crew_delete(request: HttpRequest, crew_id) -> HttpResponse:
    crew = selectors.get_crew(org_id=request.actor.org_id, crew_id=crew_id)
    services.delete_crew(actor=request.actor, crew_id=crew_id)
    messages.success(request, f"Crew “{crew.name}” deleted.")
    return _redirect(request, reverse("web:crews"))
