"""Run pages (list, detail with the live step tree, start form on the crew page, cancel); the inbox is in inbox.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse

from apps.accounts import selectors as accounts
from apps.agents import selectors as agents
from apps.approvals import selectors as approvals
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.crews import run_read
from apps.crews import selectors as crews
from apps.runs import decisions, history, replay, selectors, services, trial
from apps.runs.models import RunStatus
from apps.runs.page_read import RunPage, run_page
from apps.web.access import member_required, post_only
from apps.web.forms import RunFilterForm
from apps.web.views.inbox import item_context

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
    review_columns(rows)
    count, more = history.count_runs(runs)
    query = request.GET.copy()
    query.pop("page", None)
    context = {"runs": rows[:PAGE_SIZE], "form": form, "status": request.GET.get("status") or None,
               "statuses": RunStatus.choices, "page": page, "has_next": len(rows) > PAGE_SIZE,
               "count": count, "count_capped": more, "query": query.urlencode(),
               "crews": crews.org_crews(org_id=org_id), "agents": agents.org_agents(org_id=org_id),
               "members": accounts.org_members(org_id=org_id).select_related("user")}
    return render(request, "web/runs/list.html#run-results" if request.htmx else "web/runs/list.html", context)


def review_columns(rows: list) -> None:
    """Duration and failed calls per row (one query for the page)."""
    failed = replay.failed_calls_by_run([r.id for r in rows])
    for run in rows:
        run.failed_calls, run.duration = failed.get(run.id, 0), replay.duration_text(run)


LIVE_EVENTS_SHOWN = 100


def run_context(page: RunPage, actor=None) -> dict:
    """Every live panel of the run page (actions, header, step tree, timeline, spend, events), as
    the page renders them and as its socket re-renders them. With an `actor`, each held call carries that
    viewer's inline decision card, `can_resolve` says whether they may answer a call whose outcome is unknown,
    `can_cancel` whether they may cancel the run and `can_replay`/`can_fork` whether they may re-run or fork it."""
    run, rows = page.run, page.rows  # the tree, the waterfall and the spend all show these rows
    turns = selectors.run_tree(rows)
    asked = selectors.server_requests_by_call(rows)
    for turn in turns:
        for model_call in turn.model_calls:
            for tc in model_call.calls:
                tc.server_requests = asked.get(str(tc.id), [])
    if actor is not None:
        for turn in turns:
            for model_call in turn.model_calls:
                for tc in model_call.calls:
                    if tc.state == "held" and tc.approval_id and tc.approval.status == "pending":
                        request = approvals.get_approval(org_id=run.org_id, approval_id=tc.approval_id)
                        # No run summary: the page around the card is the run.
                        tc.inline_decision = render_to_string(
                            "web/inbox/_item.html", {**item_context(request, actor, summary=None),
                                                     "next": reverse("web:run_detail", args=[run.id])})
    can_start = actor is not None and actor.can("runs.start")
    can_fork = (can_start and run.is_finished
                and (run.snapshot.get("crew") or {}).get("process") == "sequential")
    return {"run": run, "turns": turns, "can_resolve": actor is not None and actor.can("approvals.decide"),
            "can_fork": can_fork, "can_replay": can_start and run.is_finished,
            "can_cancel": can_start and not run.is_finished,
            "live_events": page.latest_events,
            "waterfall": history.waterfall(run, rows), "agent_spend": history.spend_by_agent(rows)}


def run_panels(*, org_id, run_id, actor, events_upto: int | None = None) -> tuple[str, int]:
    """The run page's live panels for its socket (each an element with the id the page gives it, which htmx's
    ws extension swaps in place, out of band) and the newest event they show."""
    # `events_upto`: no event after the last one the socket has sent (a socket shows only what it has sent).
    context = run_context(run_page(org_id=org_id, run_id=run_id, events_shown=LIVE_EVENTS_SHOWN,
                                   events_upto=events_upto), actor)
    newest = context["live_events"][0].seq if context["live_events"] else 0
    return render_to_string("web/runs/_live.html", context), newest


@member_required()
def run_detail(request: HttpRequest, run_id) -> HttpResponse:
    page = run_page(org_id=request.actor.org_id, run_id=run_id, events_shown=LIVE_EVENTS_SHOWN)
    context = {**run_context(page, request.actor), **configuration_context(page.run),
               "can_decide": request.actor.can("approvals.decide")}
    return render(request, "web/runs/detail.html", context)


def configuration_context(run) -> dict:
    """What the run used against today's configuration. Not a live panel (it moves when someone edits the crew, not
    when the run moves): building today's snapshot was a third of every live re-render (bench/load.py)."""
    current = None
    try:
        if trial.trial_agent_id(run):  # an agent tried on its own: today's agent in the same one-task crew
            current = trial.trial_snapshot(agents.get_agent(org_id=run.org_id, agent_id=trial.trial_agent_id(run)))
        elif run.crew_id:
            current = services.build_snapshot(run_read.crew_for_run(org_id=run.org_id, crew_id=run.crew_id))
    except NotFound:
        current = None
    return {"config_changes": history.config_diff(run.snapshot, current), "crew_exists": current is not None,
            "snapshot_json": json.dumps(history.mask(run.snapshot), indent=2, sort_keys=True, default=str)}


@post_only
@member_required("runs.start")
def run_cancel(request: HttpRequest, run_id) -> HttpResponse:
    services.cancel_run(actor=request.actor, run_id=run_id)
    messages.success(request, "Cancel requested: the run stops at its next step.")
    return redirect("web:run_detail", run_id=run_id)


RESOLVED_TEXT = {"succeeded": "Recorded: the call happened.", "failed": "Recorded: the call did not happen."}


@post_only
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
