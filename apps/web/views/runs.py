"""Run pages (list, detail with the live step tree, start form on the crew page, cancel); the inbox is in inbox.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts import selectors as accounts
from apps.agents import selectors as agents
from apps.approvals import selectors as approvals
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.crews import selectors as crews
from apps.runs import decisions, history, selectors, services
from apps.runs.models import RunStatus
from apps.web.access import member_required
from apps.web.forms import RunFilterForm

PAGE_SIZE = 50


def run_filters(form: RunFilterForm) -> history.RunFilters:
    """The run history's filters from the query string (invalid values are ignored)."""
    data = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")} if form.is_valid() else {}
    since, until = data.get("since"), data.get("until")
    return history.RunFilters(
        crew_id=data.get("crew"), agent_id=data.get("agent"), status=data.get("status"),
        started_by=data.get("started_by"), q=data.get("q", ""), sort=data.get("sort") or "newest",
        held=bool(data.get("held")), findings=bool(data.get("findings")), attention=bool(data.get("attention")),
        since=datetime(since.year, since.month, since.day, tzinfo=UTC) if since else None,
        until=datetime(until.year, until.month, until.day, tzinfo=UTC) + timedelta(days=1) if until else None)


@member_required()
def run_list(request: HttpRequest) -> HttpResponse:
    """The run history: filters, full-text search, sorting and pages (offset, with a capped count)."""
    org_id = request.actor.org_id
    form = RunFilterForm(request.GET or None)
    runs = history.search_runs(org_id=org_id, filters=run_filters(form))
    page = (form.cleaned_data.get("page") if form.is_valid() else None) or 1
    rows = list(runs[(page - 1) * PAGE_SIZE:page * PAGE_SIZE + 1])
    count, more = history.count_runs(runs)
    query = request.GET.copy()
    query.pop("page", None)
    context = {"runs": rows[:PAGE_SIZE], "form": form, "status": request.GET.get("status") or None,
               "statuses": RunStatus.choices, "page": page, "has_next": len(rows) > PAGE_SIZE,
               "count": count, "count_capped": more, "query": query.urlencode(),
               "crews": crews.org_crews(org_id=org_id), "agents": agents.org_agents(org_id=org_id),
               "members": accounts.org_members(org_id=org_id).select_related("user")}
    return render(request, "web/runs/list.html#run-results" if request.htmx else "web/runs/list.html", context)


def run_context(run, actor=None) -> dict:
    """The header and step tree; with an `actor`, each held call carries that viewer's inline decision card
    and `can_resolve` says whether they may answer a call whose outcome is unknown."""
    turns = selectors.run_tree(run)
    if actor is not None:
        from apps.web.views.inbox import item_context

        for turn in turns:
            for model_call in turn.model_calls:
                for tc in model_call.calls:
                    if tc.state == "held" and tc.approval_id and tc.approval.status == "pending":
                        request = approvals.get_approval(org_id=run.org_id, approval_id=tc.approval_id)
                        tc.inline_decision = render_to_string(
                            "web/inbox/_item.html", {**item_context(request, actor), "summary": None,
                                                     "next": reverse("web:run_detail", args=[run.id])})
    return {"run": run, "turns": turns, "can_resolve": actor is not None and actor.can("approvals.decide")}


@member_required()
def run_detail(request: HttpRequest, run_id) -> HttpResponse:
    run = selectors.get_run(org_id=request.actor.org_id, run_id=run_id)
    context = {**run_context(run, request.actor), "can_cancel": request.actor.can("runs.start") and not run.is_finished,
               "can_decide": request.actor.can("approvals.decide"), **history_context(run)}
    return render(request, "web/runs/detail.html", context)


def history_context(run) -> dict:
    """The run page's timeline, spend per agent and configuration then and now."""
    current = None
    if run.crew_id:
        try:
            current = services.build_snapshot(crews.get_crew(org_id=run.org_id, crew_id=run.crew_id))
        except NotFound:
            current = None
    return {"waterfall": history.waterfall(run), "agent_spend": history.spend_by_agent(run),
            "config_changes": history.config_diff(run.snapshot, current), "crew_exists": current is not None,
            "snapshot_json": json.dumps(history.mask(run.snapshot), indent=2, sort_keys=True, default=str)}


@require_POST
@member_required("runs.start")
def run_cancel(request: HttpRequest, run_id) -> HttpResponse:
    services.cancel_run(actor=request.actor, run_id=run_id)
    messages.success(request, "Cancel requested: the run stops at its next step.")
    return redirect("web:run_detail", run_id=run_id)


RESOLVED_TEXT = {"succeeded": "Recorded: the call happened.", "failed": "Recorded: the call did not happen."}


@require_POST
@member_required("approvals.decide")
def tool_call_resolve(request: HttpRequest, tool_call_id) -> HttpResponse:
    """A person says what happened to a call whose outcome is unknown; the run resumes when nothing else waits."""
    call = selectors.get_tool_call(org_id=request.actor.org_id, tool_call_id=tool_call_id)
    outcome = request.POST.get("outcome", "")
    try:
        decisions.resolve_unknown_call(actor=request.actor, tool_call_id=call.id, outcome=outcome,
                                      note=request.POST.get("note", ""))
    except ValidationFailed as exc:
        messages.error(request, " ".join([exc.message, *exc.errors.values()]))
    except Conflict as exc:
        messages.warning(request, exc.message)
    else:
        text = RESOLVED_TEXT[outcome]
        messages.success(request, f"{text} The run resumes once nothing else waits." if not call.run.is_finished
                         else text)
    target = _next(request, reverse("web:run_detail", args=[call.run_id]))
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = target
        return response
    return redirect(target)


def _next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next", "")
    return target if target.startswith("/") and not target.startswith("//") else default


@member_required("runs.start")
def run_start(request: HttpRequest, crew_id) -> HttpResponse:
    crew = crews.get_crew(org_id=request.actor.org_id, crew_id=crew_id)
    values = {i["name"]: request.POST.get(f"input_{i['name']}", "") for i in crew.inputs}
    if request.method == "POST":
        try:
            run = services.start_run(actor=request.actor, crew_id=crew.id, inputs=values)
        except ValidationFailed as exc:
            return render(request, "web/runs/start.html", {"crew": crew, "values": values, "errors": exc.errors,
                                                           "message": exc.message}, status=422)
        return redirect("web:run_detail", run_id=run.id)
    return render(request, "web/runs/start.html", {"crew": crew, "values": values, "errors": {}})
